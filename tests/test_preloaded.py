"""tests/preloaded.py, the forking Python the tests' reference runs go through: a run there answers exactly as a fresh
`python script.py` does (status, stdout, stderr, argv, cwd, environment, stdin, global generators), and a run it
cannot take faithfully (an import-time setting that differs, not a script) is left to a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ONE_THREAD_PER_WORKER, PRELOADED, REPO
from preloaded import PRELOAD, PreloadedPython

# the servers here get make test's one-thread environment (a loaded OpenBLAS starts no threads), under any pytest
ENV = {**os.environ, **ONE_THREAD_PER_WORKER}

SCRIPTS = {
    "echo.py": "import os, sys\nprint(sys.argv, os.getcwd(), os.environ.get('LLMC_PRELOADED_PROBE'), sys.path[0],"
               " __file__, __name__)\nprint('stdin:', sys.stdin.read())\n",
    "status.py": "import sys\nprint('before exit')\nsys.exit(int(sys.argv[1]))\n",
    "message.py": "import sys\nsys.exit('error: a bad flag, said once')\n",
    "raises.py": "def fail():\n    raise ValueError('boom')\n\nprint('partial output')\nfail()\n",
    "binary.py": "import sys\nsys.stdout.buffer.write(bytes(reversed(sys.stdin.buffer.read())))\n",
    "generators.py": "import random\nimport numpy as np\nprint(random.random(), np.random.rand())\n",
    "tempdir.py": "import tempfile\nprint(tempfile.gettempdir())\n",
    "atexit_file.py": "import atexit\nlog = open('atexit.log', 'w')\nlog.write('unflushed')\n"
                      "atexit.register(lambda: print('atexit ran'))\n",
    "sleeps.py": "import time\ntime.sleep(60)\n",
    "pkg/__init__.py": "",
    "pkg/tool.py": "import sys\nprint('module', sys.argv[1:], __name__)\nsys.exit(4)\n",
}


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("preloaded")
    for name, text in SCRIPTS.items():
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def server() -> Iterator[PreloadedPython]:
    """A server as the suite's: torch imported (and with it numpy.random seeded and tempfile's directory chosen)."""
    preloaded = PreloadedPython(PRELOAD, ENV)
    yield preloaded
    preloaded.close()


def both(server: PreloadedPython, args: list[str], cwd: Path, input: str | bytes = "", env: dict | None = None,
         ) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """The same command through the server and in a fresh interpreter."""
    full_env = {**ENV, **(env or {})}
    text = not isinstance(input, bytes)
    served = server.run([sys.executable, *args], cwd, full_env, input, 60, text, "replace" if text else None)
    assert served is not None, "the server did not take the run"
    fresh = subprocess.run([sys.executable, *args], cwd=cwd, env=full_env, input=input, capture_output=True,
                           text=text, errors="replace" if text else None, timeout=60)
    return served, fresh


@pytest.mark.parametrize("args", [["echo.py", "a", "--b=1"], ["status.py", "3"], ["status.py", "0"], ["message.py"],
                                  ["raises.py"], ["-m", "pkg.tool", "x"]], ids=lambda a: " ".join(a))
def test_a_run_answers_as_a_fresh_python(server: PreloadedPython, scripts: Path, args: list[str]) -> None:
    served, fresh = both(server, args, scripts, input="from stdin", env={"LLMC_PRELOADED_PROBE": "set"})
    assert (served.returncode, served.stdout, served.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_the_script_directory_and_cwd_are_the_runs(server: PreloadedPython, scripts: Path) -> None:
    """A script named by a path relative to another directory: sys.path[0] is the script's, the cwd the run's."""
    served, fresh = both(server, [str(scripts / "echo.py")], scripts.parent)
    assert served.stdout == fresh.stdout and str(scripts.parent) in served.stdout


def test_binary_stdin_and_stdout(server: PreloadedPython, scripts: Path) -> None:
    served, fresh = both(server, ["binary.py"], scripts, input=bytes(range(256)))
    assert served.stdout == fresh.stdout == bytes(reversed(range(256)))


def test_global_generators_are_seeded_per_run(server: PreloadedPython, scripts: Path) -> None:
    """random and numpy were imported (and seeded) once in the server: each run draws new seeds, as a fresh
    process does."""
    draws = [both(server, ["generators.py"], scripts)[0].stdout.split() for _ in range(3)]
    assert len({python for python, _ in draws}) == 3 and len({numpy for _, numpy in draws}) == 3, draws


def test_the_runs_tmpdir(server: PreloadedPython, scripts: Path, tmp_path: Path) -> None:
    served, fresh = both(server, ["tempdir.py"], scripts, env={"TMPDIR": str(tmp_path)})
    assert served.stdout == fresh.stdout == f"{tmp_path}\n"


def test_atexit_and_open_files_at_exit(server: PreloadedPython, scripts: Path) -> None:
    (scripts / "atexit.log").unlink(missing_ok=True)
    served = server.run([sys.executable, "atexit_file.py"], scripts, ENV, "", 60, True, "replace")
    assert served is not None and served.stdout == "atexit ran\n"
    assert (scripts / "atexit.log").read_text() == "unflushed"


@pytest.mark.parametrize("setting", [{"OMP_NUM_THREADS": "7"}, {"PYTHONHASHSEED": "3"}, {"LC_ALL": "C"},
                                     {"TORCHINDUCTOR_CACHE_DIR": "/nonexistent"}, {"MALLOC_ARENA_MAX": "2"}],
                         ids=lambda s: next(iter(s)))
def test_an_import_time_setting_gets_a_fresh_python(server: PreloadedPython, scripts: Path, setting: dict) -> None:
    assert server.run([sys.executable, "echo.py"], scripts, {**ENV, **setting}, "", 60, True, "replace") is None
    assert server.run([sys.executable, "echo.py"], scripts, {**ENV, "LLMC_ANYTHING": "1"}, "", 60, True,
                      "replace") is not None


def test_a_server_follows_its_callers_own_environment(scripts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's os.environ gains an import-time setting after the server started (torch's compiler sets
    TORCHINDUCTOR_CACHE_DIR in it): a server on the new settings takes the runs, and a run that differs from both
    still starts fresh."""
    preloaded = PreloadedPython(("json",), ENV)
    try:
        assert preloaded.run([sys.executable, "echo.py"], scripts, ENV, "", 60, True, "replace") is not None
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(scripts / "inductor"))
        moved = {**ENV, "TORCHINDUCTOR_CACHE_DIR": str(scripts / "inductor")}
        served = preloaded.run([sys.executable, "echo.py"], scripts, moved, "", 60, True, "replace")
        assert served is not None and served.returncode == 0, preloaded.refusal
        assert preloaded.run([sys.executable, "echo.py"], scripts, {**moved, "OMP_NUM_THREADS": "7"}, "", 60, True,
                             "replace") is None
        assert "OMP_NUM_THREADS" in preloaded.refusal
    finally:
        preloaded.close()


@pytest.mark.parametrize("cmd", [["-c", "print(1)"], ["-u", "echo.py"], [], ["echo.sh"]], ids=str)
def test_what_is_not_a_script_run_gets_a_fresh_python(server: PreloadedPython, scripts: Path, cmd: list[str]) -> None:
    assert server.run([sys.executable, *cmd], scripts, ENV, "", 60, True, "replace") is None
    assert server.run(["/bin/echo", "echo.py"], scripts, ENV, "", 60, True, "replace") is None


def test_a_timeout_kills_the_run_and_retires_the_server(scripts: Path) -> None:
    preloaded = PreloadedPython(("json",), ENV)
    with pytest.raises(subprocess.TimeoutExpired):
        preloaded.run([sys.executable, "sleeps.py"], scripts, ENV, "", 2, True, "replace")
    assert preloaded.run([sys.executable, "echo.py"], scripts, ENV, "", 60, True, "replace") is None


def test_turned_off(monkeypatch: pytest.MonkeyPatch, scripts: Path) -> None:
    monkeypatch.setenv("LLMC_TEST_PRELOAD", "0")
    assert PreloadedPython(("json",), ENV).run([sys.executable, "echo.py"], scripts, ENV, "", 60, True, None) is None


def test_a_torch_run_matches_a_fresh_python(server: PreloadedPython, tmp_path: Path) -> None:
    """A few AdamW steps print the same losses, threads and default dtype as in a fresh interpreter."""
    script = tmp_path / "steps.py"
    script.write_text("import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(8, 4)\n"
                      "opt = torch.optim.AdamW(model.parameters(), lr=0.1)\nx = torch.randn(16, 8)\n"
                      "for _ in range(3):\n    loss = model(x).square().mean()\n    opt.zero_grad()\n"
                      "    loss.backward()\n    opt.step()\n    print(repr(loss.item()))\n"
                      "print(torch.get_num_threads(), torch.get_default_dtype(), torch.randn(2).tolist())\n")
    served, fresh = both(server, [str(script)], tmp_path)
    assert (served.returncode, served.stdout, served.stderr) == (0, fresh.stdout, fresh.stderr)


@pytest.mark.skipif(any(os.environ.get(k) != v for k, v in ONE_THREAD_PER_WORKER.items()),
                    reason="the suite's own server serves where its workers run one thread each (make test)")
def test_the_suites_server_takes_the_reference_runs() -> None:
    """Under make test the runs of tests/conftest.py run() go to the server (a refusal would only cost time, unseen)."""
    proc = PRELOADED.run([sys.executable, str(REPO / "train_gpt2.py"), "--help"], REPO, dict(os.environ), None, 120,
                         True, "replace")
    assert proc is not None, f"the suite's server did not take the run: {PRELOADED.refusal}"
    assert proc.returncode == 0 and proc.stdout.startswith("usage: "), proc.stdout + proc.stderr
