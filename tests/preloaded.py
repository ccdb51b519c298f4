"""A Python that has imported torch already, for the tests' reference runs (`python train_gpt2.py ...`).

Each reference run started fresh spends about 7 s before its first line of work on importing torch and
torch._dynamo (which torch.optim's step imports); the tests start about 65 of them. Here one server per pytest
worker imports them once and forks a child for each run, which sets the run's argv, working directory,
environment and standard streams and executes the script as `__main__` (runpy), as `python script.py` would.

A run goes to the server only when nothing read at import time differs from the server's environment (thread
counts, allocator and library settings, PYTHON*: IMPORT_TIME_ENV); the rest start a fresh interpreter, and so does
everything when the server could not start (tests/conftest.py run()). The server refuses to serve when importing
left a second thread in it (a fork copies only the calling thread): OpenBLAS, under numpy and torch, starts its
threads when it is loaded unless OPENBLAS_NUM_THREADS is 1, so the server serves under `make test`'s pytest workers
(one thread each: tests/conftest.py ONE_THREAD_PER_WORKER), and a plain `pytest` run on a multi-core machine starts
every run fresh.

Run as a server: python tests/preloaded.py SOCKET_PATH MODULE... (it imports the modules, then prints "ready" once
it accepts requests).
"""

from __future__ import annotations

import atexit
import gc
import importlib.machinery
import io
import json
import os
import re
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import types
from pathlib import Path

PRELOAD = ("numpy", "torch", "torch._dynamo")
# environment variables a preloaded module (or the C libraries under it, or Python's start-up: the locale sets the
# standard streams' encoding) reads when it is loaded, not when used
IMPORT_TIME_ENV = re.compile(r"(OMP|GOMP|KMP|MKL|OPENBLAS|ONEDNN|DNNL|TORCH|PYTORCH|TRITON|LD|MALLOC|CUDA|NUMPY|"
                             r"OPENMPI|OMPI|PMIX)(_.*)?|PYTHON.*|TORCHDYNAMO.*|TORCHINDUCTOR.*|LANG|LANGUAGE|LC_.*")
START_TIMEOUT = 120.0
MAX_RESTARTS = 3  # servers started anew for a caller whose own environment moved


def _exit_code(exc: SystemExit) -> int:
    """The status `python script.py` exits with after `sys.exit(code)`, printing a non-integer code as Python does."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _run_child(request: dict) -> None:
    """In the forked child: become `python SCRIPT ARGS...` (or `python -m MODULE ARGS...`) and exit."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, flags in ((0, request["stdin"], os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                            (2, request["stderr"], os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    # what a fresh process chooses anew: numpy's global generator's seed (torch's import loads and seeds it, once, in
    # the server; Python's random reseeds itself in a forked child) and the temporary directory (torch's import
    # chose it from the server's TMPDIR)
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    tempfile.tempdir = None
    code = 1
    namespace: dict = {}
    try:
        if request["module"]:
            sys.argv = [request["module"], *request["args"]]
            sys.path[0] = os.getcwd()
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:  # as Python runs a script: argv[0] as given, __file__ and the traceback's file names absolute
            script = os.path.abspath(request["script"])
            sys.argv = [request["script"], *request["args"]]
            sys.path[0] = os.path.dirname(script)
            main = types.ModuleType("__main__")
            main.__file__ = script
            main.__loader__ = importlib.machinery.SourceFileLoader("__main__", script)
            sys.modules["__main__"] = main
            namespace = main.__dict__
            with io.open_code(script) as source:
                exec(compile(source.read(), script, "exec"), main.__dict__)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # what an uncaught exception does to `python script.py`: the traceback, status 1
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:  # the traceback starts in the script
            tb = tb.tb_next
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        code = 1
    finally:
        try:  # an interpreter's exit: the atexit functions, then the modules' globals let go (an open file flushed)
            atexit._run_exitfuncs()
            namespace.clear()
            gc.collect()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _serve(socket_path: str, preload: list[str]) -> None:
    for name in preload:
        __import__(name)
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        sys.exit(f"preloaded: importing {', '.join(preload)} left {threads} threads; a fork would copy only one")
    try:  # the server ends with the pytest worker that started it (PR_SET_PDEATHSIG)
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(1)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        with conn, conn.makefile("rwb") as stream:
            line = stream.readline()
            if not line:
                continue
            pid = os.fork()
            if pid == 0:  # the child never returns to this loop, even when setting up the run fails
                try:
                    server.close()
                    _run_child(json.loads(line))
                finally:
                    os._exit(1)
            stream.write(json.dumps({"pid": pid}).encode() + b"\n")
            stream.flush()
            _, status = os.waitpid(pid, 0)
            stream.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
            stream.flush()


class PreloadedPython:
    """The client: run(cmd, ...) answers like subprocess.run for `[sys.executable, SCRIPT.py | -m MODULE, ...]`
    when the server can take it, and None when the caller should start a fresh interpreter."""

    def __init__(self, preload: tuple[str, ...] = PRELOAD, env: dict[str, str] | None = None) -> None:
        """`env`: the server's environment (default: this process's when the first run comes)."""
        self._preload = preload
        self._server: subprocess.Popen | None = None
        self._socket = ""
        self._env: dict[str, str] = dict(env) if env is not None else {}
        self._broken = os.environ.get("LLMC_TEST_PRELOAD", "1") == "0"
        self._restarts = 0
        self.refusal = "LLMC_TEST_PRELOAD=0" if self._broken else ""  # why the last run was not served
        self._dir = ""
        self._at_exit = False

    def _start(self) -> bool:
        self._dir = tempfile.mkdtemp(prefix="llmc_preloaded_")
        self._socket = os.path.join(self._dir, "socket")
        self._env = self._env or dict(os.environ)
        log = open(os.path.join(self._dir, "server.log"), "wb")
        self._server = subprocess.Popen([sys.executable, __file__, self._socket, *self._preload],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=self._env)
        log.close()
        if not self._at_exit:  # once: close() stops whichever server is running at exit
            atexit.register(self.close)
            self._at_exit = True
        ready, _, _ = select.select([self._server.stdout], [], [], START_TIMEOUT)
        if not ready or self._server.stdout.readline() != b"ready\n":
            self.close(f"the server did not start: {os.path.join(self._dir, 'server.log')}", keep_log=True)
            return False
        return True

    def close(self, reason: str = "closed", keep_log: bool = False) -> None:
        """Stop the server; later runs answer None (a fresh interpreter). keep_log: leave its directory (with
        server.log) for the person reading `refusal`."""
        self._broken = True
        if self._server is not None or not self.refusal:  # the first reason stays (close at exit adds none)
            self.refusal = reason
        self._stop(keep_log)

    def _stop(self, keep_log: bool = False) -> None:
        if self._server is None:
            return
        if self._server.poll() is None:
            self._server.kill()
            self._server.wait()
        self._server.stdout.close()
        self._server = None
        if not keep_log:
            shutil.rmtree(self._dir, ignore_errors=True)

    def _request(self, cmd: list[str], env: dict[str, str]) -> dict | None:
        if len(cmd) < 2 or cmd[0] != sys.executable:
            return None
        if cmd[1] == "-m" and len(cmd) >= 3:
            request = {"module": cmd[2], "script": "", "args": cmd[3:]}
        elif cmd[1].endswith(".py") and not cmd[1].startswith("-"):
            request = {"module": "", "script": cmd[1], "args": cmd[2:]}
        else:
            return None
        if self._broken or (self._server is None and not self._start()):
            return None
        differ = [name for name in set(env) | set(self._env)
                  if IMPORT_TIME_ENV.fullmatch(name) and env.get(name) != self._env.get(name)]
        if not differ:
            return request
        # The caller's own environment moved since the server started (torch's compiler sets TORCHINDUCTOR_CACHE_DIR
        # in os.environ when a test first uses it): a server on the new settings serves the runs from now on.
        if self._restarts < MAX_RESTARTS and all(env.get(name) == os.environ.get(name) for name in differ):
            self._stop()
            self._env = {name: value for name, value in {**self._env, **{n: env.get(n) for n in differ}}.items()
                         if value is not None}
            self._restarts += 1
            return request if self._start() else None
        self.refusal = f"import-time setting differs from the server's: {', '.join(sorted(differ))}"
        return None

    def run(self, cmd: list[str], cwd: Path | str, env: dict[str, str], input: str | bytes | None,
            timeout: float, text: bool, errors: str | None) -> subprocess.CompletedProcess | None:
        request = self._request(cmd, env)
        if request is None:
            return None
        with tempfile.TemporaryDirectory(dir=self._dir) as tmp:
            paths = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
            Path(paths["stdin"]).write_bytes(input.encode() if isinstance(input, str) else input or b"")
            Path(paths["stdout"]).touch()
            Path(paths["stderr"]).touch()
            request.update(paths, cwd=os.path.abspath(cwd), env=env)
            try:
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.connect(self._socket)
            except OSError as exc:
                self.close(f"the server did not answer: {exc}")
                return None
            with client, client.makefile("rwb") as stream:
                stream.write(json.dumps(request).encode() + b"\n")
                stream.flush()
                pid = json.loads(stream.readline())["pid"]
                client.settimeout(timeout)
                try:
                    answer = stream.readline()
                except TimeoutError:
                    os.kill(pid, signal.SIGKILL)
                    self.close("a run timed out")  # the server's wait for that child is owed an answer no one reads
                    raise subprocess.TimeoutExpired(cmd, timeout) from None
            if not answer:
                self.close("the server died")
                raise RuntimeError(f"the preloaded Python server died running {' '.join(cmd)}")
            status = json.loads(answer)["status"]
            out, err = Path(paths["stdout"]).read_bytes(), Path(paths["stderr"]).read_bytes()
        if text:
            out, err = out.decode(errors=errors or "strict"), err.decode(errors=errors or "strict")
        return subprocess.CompletedProcess(cmd, status, out, err)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2:])
