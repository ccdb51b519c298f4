"""Shared pytest fixtures: the repo, the tinyshakespeare shards, and reference files written by train_gpt2.py.

Under pytest-xdist (`make test` runs `pytest -n 2`) every worker is its own process: the reference files are
written once per run into a directory the workers share (shared_dir), and builds through make() take turns.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock
from preloaded import PreloadedPython

pytest.register_assert_rewrite("decoder_c")  # the shared checks of tests/decoder_c.py report like a test's own asserts

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
PRELOADED = PreloadedPython()  # run() hands `PYTHON script.py ...` to a Python with torch imported already
TS_DIR = REPO / "dev" / "data" / "tinyshakespeare"
TS_TRAIN = TS_DIR / "tiny_shakespeare_train.bin"
TS_VAL = TS_DIR / "tiny_shakespeare_val.bin"

# Under pytest-xdist (make test: TEST_JOBS workers, as many as the machine has cores) the programs a test starts
# run on one thread unless the test sets the count itself: with a thread per core in each worker's program, two
# programs' threads take turns on the cores and OpenMP's waiting threads spin through the other's time slices
# (one core loaded by something else: test_gpt2cu 61 -> 57 s, the DDP reference runs 101 -> 88 s).
ONE_THREAD_PER_WORKER = {"OMP_NUM_THREADS": "1", "CUDA_CPU_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    for _name, _value in ONE_THREAD_PER_WORKER.items():
        os.environ.setdefault(_name, _value)


# The lines train_gpt2 / train_llama3 -p bf16 print. Their default build runs bf16 GEMMs on oneDNN (the wheels of
# make setup): where oneDNN has no bf16 kernel (an AVX2-only CPU, or ONEDNN_MAX_CPU_ISA=AVX2 on any) they train in
# fp32 and say so; with the built-in kernel (LLMC_BF16_GEMM=builtin) a CPU without AVX512-BF16 (or
# LLMC_BF16_NATIVE=0) gives the emulation line; otherwise the decision from the two GEMM rates, either way.
BF16_NO_AVX512_BF16 = ("-p bf16: training in fp32 instead: this CPU has no AVX512-BF16, so bf16 GEMMs would be "
                       "emulated in fp32 and run slower (LLMC_BF16=force runs bf16)")
BF16_ONEDNN_REFUSED = re.compile(r"-p bf16: training in fp32 instead: oneDNN has no bf16 GEMM kernel on this CPU "
                                 r"\(oneDNN \d+\.\d+\.\d+, [a-z0-9_]+\) \(LLMC_BF16=force runs bf16\)")
# the line of a decision taken from the two GEMM rates (measured, or injected with LLMC_BF16_RATES=BF16,FP32)
BF16_RATES_LINE = re.compile(
    r"-p bf16: training in (bf16|fp32 instead): (oneDNN's bf16 GEMM \(([^()]+)\)|llmc's AMX bf16 GEMM \(amx_bf16 tiles\)|"
    r"the built-in bf16 GEMM \((?:AVX512-BF16|emulated in fp32)\)) ran at (\d+) GFLOP/s, the fp32 GEMM \([a-z-]+\) at (\d+): "
    r"(at least|less than) 1\.15x( \(LLMC_BF16=force runs bf16\))?")
BF16_MIN_GAIN = 1.15  # llmc/cpu/matmul.h's MATMUL_BF16_MIN_GAIN
CPUINFO = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
HAS_AVX512_BF16 = "avx512_bf16" in CPUINFO
HAS_AMX_BF16 = "amx_bf16" in CPUINFO

# -p bf16's decision steered both ways on any CPU: (environment, bf16 kept). The rates are GFLOP/s, bf16
# first; 184,106 is what a Zen 4 measured (kept), 106,184 an AVX512-BF16 at half the FMA rate (refused);
# ONEDNN_MAX_CPU_ISA=AVX2 takes oneDNN's bf16 kernels away on every CPU (the AVX2-only CPU's path), and the built-in
# kernel without AVX512-BF16 would be emulated.
BF16_INJECTED_DECISIONS = [
    ({"LLMC_BF16_RATES": "184,106"}, True),
    ({"LLMC_BF16_RATES": "115,100"}, True),
    ({"LLMC_BF16_RATES": "114,100"}, False),
    ({"LLMC_BF16_RATES": "106,184"}, False),
    ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, False),
    ({"LLMC_BF16_GEMM": "builtin", "LLMC_BF16_NATIVE": "0"}, False),
]


def bf16_decision(stdout: str, env: dict[str, str]) -> bool:
    """Checks the one -p bf16 line of a trainer's stdout against what it was given and returns whether bf16 was
    kept. Injected rates must be echoed exactly and decide by the 1.15x rule; a real calibration's rounded rates
    must agree with the decision it printed (an inverted comparison fails here on any CPU with AVX512-BF16) and
    name oneDNN's kernel; ONEDNN_MAX_CPU_ISA=AVX2, or a CPU without AVX512-BF16 or AMX, gives oneDNN's refusal;
    LLMC_BF16_GEMM=builtin with LLMC_BF16_NATIVE=0 (or without AVX512-BF16) gives the emulation line."""
    said = [line for line in stdout.splitlines() if line.startswith("-p bf16")]
    assert len(said) == 1, said
    rates = env.get("LLMC_BF16_RATES")
    builtin = env.get("LLMC_BF16_GEMM") == "builtin"
    if not rates and builtin and (env.get("LLMC_BF16_NATIVE") == "0" or not HAS_AVX512_BF16):
        assert said[0] == BF16_NO_AVX512_BF16, said
        return False
    if not rates and not builtin and (env.get("ONEDNN_MAX_CPU_ISA") == "AVX2" or not (HAS_AVX512_BF16 or HAS_AMX_BF16)):
        assert BF16_ONEDNN_REFUSED.fullmatch(said[0]), said
        return False
    m = BF16_RATES_LINE.fullmatch(said[0])
    assert m, said
    kept, bf16, fp32 = m[1] == "bf16", float(m[4]), float(m[5])
    assert kept == (m[6] == "at least") and kept == (m[7] is None), said
    assert builtin == m[2].startswith("the built-in"), said  # the GEMM that was asked for is the one named
    # on a CPU with AMX the AMX kernel runs the bf16 GEMMs unless LLMC_BF16_GEMM says otherwise (llmc/cpu/matmul.h)
    amx = not builtin and env.get("LLMC_BF16_GEMM", "amx" if HAS_AMX_BF16 else "onednn") == "amx"
    assert amx == m[2].startswith("llmc's AMX"), said
    if not rates and not builtin and not amx:  # a real oneDNN calibration names the kernel oneDNN picked
        assert m[3].startswith(("brg:", "brgemm", "gemm:")) and "ref" not in m[3], said
    if rates:
        given = [float(r) for r in rates.split(",")]
        assert [bf16, fp32] == given and kept == (given[0] >= BF16_MIN_GAIN * given[1]), said
    elif kept:  # printed rates are rounded to whole GFLOP/s
        assert bf16 + 0.5 >= BF16_MIN_GAIN * (fp32 - 0.5), f"bf16 kept although {said[0]}"
    else:
        assert bf16 - 0.5 < BF16_MIN_GAIN * (fp32 + 0.5), f"bf16 refused although {said[0]}"
    return kept


def run(cmd: list[object], cwd: Path | str = REPO, check: bool = True, env: dict[str, str] | None = None,
        timeout: float = 1800, input: str | bytes | None = None) -> subprocess.CompletedProcess:
    """Run a command, capturing its output (text, or bytes when `input` is bytes); on an unexpected failure
    show what it printed. `env` adds to (or overrides) the current environment."""
    full_env = {**os.environ, **(env or {})}
    proc = PRELOADED.run([str(c) for c in cmd], cwd, full_env, input, timeout, text=not isinstance(input, bytes),
                         errors=None if isinstance(input, bytes) else "replace")
    if proc is None:  # not a Python script run, or one that needs a fresh interpreter (tests/preloaded.py)
        proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=full_env, capture_output=True,
                              text=not isinstance(input, bytes), errors=None if isinstance(input, bytes) else "replace",
                              input=input, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]!s}\n"
                             f"--- stderr\n{proc.stderr[-4000:]!s}")
    return proc


def losses_from_log(path: Path) -> list[float]:
    """The train losses a reference trainer (train_gpt2.py's loop) wrote to its main.log, one per step."""
    return [float(line.split("trl:")[1].split()[0]) for line in path.read_text().splitlines() if " trl:" in line]


def assert_one_error_line(proc: subprocess.CompletedProcess, status: int = 1, alone: bool = False) -> str:
    """The one line of stderr starting with "error: " of a process that exited with `status` and printed no
    Python traceback; with `alone`, stderr holds that line and nothing else."""
    stderr = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode(errors="replace")
    assert proc.returncode == status, f"exit {proc.returncode}, want {status}\n{stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr[-2000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr[-2000:]
    if alone:
        assert stderr.strip() == errors[0], stderr[-2000:]
    return errors[0]


def edited_copy(src: Path, dst: Path, edit: Callable[[bytearray], bytearray]) -> Path:
    """dst: the bytes of src after edit(bytearray) (a damaged copy of a file for a bad-input test)."""
    dst.write_bytes(bytes(edit(bytearray(src.read_bytes()))))
    return dst


def set_int(data: bytearray, index: int, value: int) -> bytearray:
    """data with int32 header field `index` set to value (little-endian)."""
    struct.pack_into("<i", data, 4 * index, value)
    return data


def set_float(data: bytearray, index: int, value: float) -> bytearray:
    """data with float32 header field `index` of the 256 after the 1024 int32 bytes set to value (little-endian)."""
    struct.pack_into("<f", data, 1024 + 4 * index, value)
    return data


def common_model_file_damage(magic: int, magic_message: str, short_message: str) -> list[tuple[Callable, str]]:
    """(edit, message) pairs of the damage every family's model-file reader refuses: another family's magic, version
    4, the last 4 bytes cut, 4 bytes of trailing data, and a file of 1500 bytes (shorter than the 2048-byte header)."""
    return [(lambda d: set_int(d, 0, magic), magic_message), (lambda d: set_int(d, 1, 4), "wrong version 4"),
            (lambda d: d[:-4], "truncated"), (lambda d: d + b"\0\0\0\0", "trailing data"),
            (lambda d: d[:1500], short_message)]


def assert_reader_refuses_in_one_line(read: Callable[[Path], object], good: Path,
                                      edit: Callable[[bytearray], bytearray], message: str) -> None:
    """read(an edited copy bad.bin of `good`) raises the references' UserError: one line naming bad.bin and holding
    `message`."""
    from pyllmc.reference.common import UserError

    bad = edited_copy(good, good.parent / "bad.bin", edit)
    with pytest.raises(UserError) as e:
        read(bad)
    assert message in str(e.value) and "bad.bin" in str(e.value) and "\n" not in str(e.value), str(e.value)


def assert_gradients_match(expected: dict, got: dict, rel: float) -> None:
    """The same gradient names, each nonzero in `expected` and within rel * max(its largest |value|, 1e-2) of it."""
    assert set(got) == set(expected)
    for name, grad in expected.items():
        scale = grad.abs().max().item()
        assert scale > 0, name
        assert (got[name] - grad).abs().max().item() <= rel * max(scale, 1e-2), name


@dataclass
class DebugState:
    """The arrays of a debug state with grad norms (Llama 3's layout, version 3): the batch, its logits and loss, every
    gradient in file order, then per reference step its loss, grad norm and float32 noise."""
    header: "np.ndarray"
    x: "np.ndarray"
    y: "np.ndarray"
    logits: "np.ndarray"  # (B*T, V)
    loss: float
    grads: "np.ndarray"
    losses: "np.ndarray"
    norms: "np.ndarray"
    noise: "np.ndarray"


def read_adamw_debug_state(path: Path, magic: int, B: int, T: int, V: int, n_params: int,
                           nsteps: int = 10) -> DebugState:
    """The debug state at `path`, its header checked ({magic, 3, B, T, nsteps}, the fixed AdamW settings, no Muon
    fields), its batch (y is x shifted by one) and its length (n_params gradients)."""
    import numpy as np

    h = np.fromfile(path, dtype="<i4", count=256)
    assert list(h[:5]) == [magic, 3, B, T, nsteps]
    assert np.allclose(h[5:11].view("<f4"), [1e-4, 0.9, 0.95, 1e-8, 0.1, 1.0])
    assert h[11] == 10 and not h[12:].any(), "AdamW: no Muon settings"
    ints = np.fromfile(path, dtype="<i4", count=2 * B * T, offset=1024)
    x, y = ints[: B * T], ints[B * T :]
    assert np.array_equal(x[1:], y[:-1])
    floats = np.fromfile(path, dtype="<f4", offset=1024 + 8 * B * T)
    assert floats.size == B * T * V + 1 + n_params + 3 * nsteps
    return DebugState(header=h, x=x, y=y, logits=floats[: B * T * V].reshape(B * T, V), loss=float(floats[B * T * V]),
                      grads=floats[B * T * V + 1 : B * T * V + 1 + n_params], losses=floats[-3 * nsteps : -2 * nsteps],
                      norms=floats[-2 * nsteps : -nsteps], noise=floats[-nsteps:])


def assert_reference_steps_recorded(s: DebugState) -> None:
    """The steps' records agree with the batch's: the first loss is the batch's loss, the last lower, the first norm
    that of the gradients; every norm positive, every noise within 1e-4 of its loss."""
    import numpy as np

    assert s.losses[0] == pytest.approx(s.loss, abs=1e-6) and s.losses[-1] < s.losses[0]
    assert s.norms[0] == pytest.approx(float(np.linalg.norm(s.grads.astype(np.float64))), rel=1e-5)
    assert np.all(s.norms > 0) and np.all(s.noise >= 0) and np.all(s.noise < 1e-4 * s.losses)


def dn_init_drawn_in_file_order(load: Callable[[int], tuple], shapes_of: Callable, stacked: Callable,
                                norms: tuple[str, ...], seed: int = 7) -> tuple:
    """A reference's dN model from scratch, checked: load(seed) -> (model, stem) twice equal and with seed + 1
    different; and the C side's scheme, restated: one torch generator seeded with `seed`, one normal_ draw per file
    tensor of shapes_of(config) that is not in `norms` (stacked over layers, by the reference's stacked()), in file
    order, std 0.02, attprojw and fcprojw 0.02/sqrt(2L); the norms' weights 1. Returns load(seed)."""
    import math

    import torch

    (a, stem), (b, _), (other, _) = load(seed), load(seed), load(seed + 1)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.transformer.wte.weight, other.transformer.wte.weight)
    g = torch.Generator().manual_seed(seed)
    shapes, file_tensors = shapes_of(a.config), stacked(a, lambda p: p.detach())
    assert len(file_tensors) == len(shapes)
    tensors = dict(zip(shapes, file_tensors))
    resid = 0.02 / math.sqrt(2 * a.config.n_layer)
    for name, shape in shapes.items():
        if name in norms:
            assert torch.all(tensors[name] == 1), name
            continue
        std = resid if name in ("attprojw", "fcprojw") else 0.02
        assert torch.equal(tensors[name], torch.empty(shape).normal_(0.0, std, generator=g)), name
    return a, stem


def killed_after(run_dir: Path, part: Path, step: int, ranks: int = 1) -> Path:
    """`part`: what a trainer's run in run_dir leaves when it is killed after its step-`step` checkpoint, that
    checkpoint alone (the model, every rank's training state, the DONE marker); a run with -y 1 resumes from it."""
    part.mkdir()
    states = [f"state_{step:08d}_{rank:05d}.bin" for rank in range(ranks)]
    for name in [f"model_{step:08d}.bin", *states, f"DONE_{step:08d}"]:
        shutil.copy(run_dir / name, part / name)
    return part


# debug-state header fields (train_gpt2.py's write_debug_state): step losses, their float32 noises, Muon's Nesterov flag
DEBUG_STATE_NSTEPS, DEBUG_STATE_NNOISE, DEBUG_STATE_NESTEROV = 4, 11, 15


def debug_state_first_steps(state: Path, out: Path, steps: int, flip_nesterov: bool = False,
                            grad_norms: bool = False) -> Path:
    """A copy of the debug state `state` at `out` that holds only its first `steps` step losses (and their noises,
    and with grad_norms their gradient norms: the Llama 3 layout's section after the losses), so a test program
    checks those steps and no more; with flip_nesterov, Muon's Nesterov flag is flipped too."""
    data = bytearray(state.read_bytes())
    header = list(struct.unpack_from("<256i", data))
    nsteps, nnoise = header[DEBUG_STATE_NSTEPS], header[DEBUG_STATE_NNOISE]
    assert nsteps >= steps and nnoise in (0, nsteps), (nsteps, nnoise, steps)
    sections = [nsteps, nsteps, nnoise] if grad_norms else [nsteps, nnoise]
    body_end = len(data) - 4 * sum(sections)
    kept, at = [], body_end
    for n in sections:
        kept.append(bytes(data[at:at + 4 * min(steps, n)]))
        at += 4 * n
    header[DEBUG_STATE_NSTEPS], header[DEBUG_STATE_NNOISE] = steps, steps if nnoise else 0
    if flip_nesterov:
        header[DEBUG_STATE_NESTEROV] = 1 - header[DEBUG_STATE_NESTEROV]
    out.write_bytes(struct.pack("<256i", *header) + bytes(data[1024:body_end]) + b"".join(kept))
    return out


def repo_lock(name: str) -> FileLock:
    """A lock on something in the repository that pytest-xdist workers must not build at the same time."""
    (REPO / "build").mkdir(exist_ok=True)
    return FileLock(str(REPO / "build" / f".{name}.lock"))


def make(*targets: str) -> None:
    """Builds the targets; one make at a time in the repository (pytest-xdist workers take turns)."""
    with repo_lock("make"):
        run(["make", "--no-print-directory", *targets])


SYSPKG_STATUS = REPO / "build" / "system-packages.missing"


def require_system_packages(group: str) -> None:
    """`make system-packages` (dev/system_packages.sh installs what is missing when it can), then a skip naming the
    reason when `group` ("fuzz", "opencl") is still missing: only where the machine gives neither root nor sudo.
    With root a package that cannot be installed fails make here, so nothing is skipped."""
    make("system-packages")
    for line in SYSPKG_STATUS.read_text().splitlines():
        name, _, why = line.partition(": ")
        if name == group:
            pytest.skip(f"the system packages of '{group}' are missing: {why}")


def shared_dir(tmp_path_factory: pytest.TempPathFactory, name: str, write: Callable[[Path], object]) -> Path:
    """The directory `name`, filled by write(directory) once per test run: pytest-xdist workers share it (the
    first one writes it under a lock, the others wait for it), a plain run has it in its own temp directory."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    out, written = root / name, root / f"{name}.written"
    with FileLock(str(root / f"{name}.lock")):
        if not written.exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            write(out)
            written.touch()
    return out


# The test files that cost the most CPU time, most first. `make test` runs pytest-xdist with --dist loadfile
# --no-loadscope-reorder: each file goes whole to the next free worker in this order, so the long files start
# at once and the short ones fill the gaps at the end (instead of a long file starting last on one worker while
# the other sits idle). The order changes only the schedule, never what a test checks.
LONGEST_FIRST = [  # per-file sums of `pytest --durations=0`, most first
    "test_cuda_cpu.py", "test_c_trainer.py", "test_cuda_build.py", "test_debug_state_tolerances.py",
    "test_sanitizers.py", "test_chat_refs.py", "test_muon.py", "test_llama3_reference.py", "test_train_gpt2.py", "test_llama3_c.py",
    "test_nanochat_c.py", "test_qwen3_c.py", "test_chat_states.py", "test_cuda_cpu_chat.py", "test_chat_trainer.py", "test_bench.py",
    "test_nanochat_reference.py", "test_cuda_cpu_nanochat.py", "test_cuda_cpu_qwen3.py", "test_cuda_cpu_llama3.py",
    "test_cuda_cpu_muon.py", "test_opencl.py", "test_fuzz.py", "test_cpu_variants.py",
    "test_cpu_kernels.py", "test_bench_gpu.py", "test_c_headers.py", "test_llama3_encode.py",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Orders the collected tests by LONGEST_FIRST (the other files after them, as collected); stable within a file."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def first_difference(left: bytes, right: bytes) -> int:
    """The offset of the first byte where left and right differ (the shorter one's length if one starts the other)."""
    step, at = 1 << 16, 0
    while at < min(len(left), len(right)) and left[at:at + step] == right[at:at + step]:
        at += step
    while at < min(len(left), len(right)) and left[at] == right[at]:
        at += 1
    return at


@pytest.hookimpl(tryfirst=True)
def pytest_assertrepr_compare(op: str, left: object, right: object) -> list[str] | None:
    """Two large byte strings (checkpoints, states) compared: their lengths and the first difference, at once.
    pytest's own explanation diffs their reprs line by line, which for two checkpoints ran for over half an hour."""
    if op not in ("==", "!=") or not isinstance(left, (bytes, bytearray)) or not isinstance(right, (bytes, bytearray)):
        return None
    if max(len(left), len(right)) <= 4096:
        return None
    if op == "!=":
        return [f"{len(left)} bytes != {len(right)} bytes: equal"]
    return [f"{len(left)} bytes == {len(right)} bytes: they differ first at byte {first_difference(left, right)}"]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tinyshakespeare() -> tuple[Path, Path]:
    """(train, val) shards, made by dev/data/tinyshakespeare.py if they are not there yet."""
    with repo_lock("tinyshakespeare"):
        if not (TS_TRAIN.exists() and TS_VAL.exists()):
            seed = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
            cache = TS_DIR / "tiny_shakespeare.txt"
            if seed.exists() and not cache.exists():
                TS_DIR.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(seed, cache)
            run([PYTHON, REPO / "dev" / "data" / "tinyshakespeare.py"])
    return TS_TRAIN, TS_VAL


def write_reference(workdir: Path, model: str, B: int = 4, T: int = 64, steps: int = 10) -> Path:
    """Run train_gpt2.py in `workdir` to write the checkpoint, tokenizer and debug state (with `steps` optimizer
    steps) for `model`."""
    workdir.mkdir(parents=True, exist_ok=True)
    run([PYTHON, REPO / "train_gpt2.py", "--model", model, "--input_bin", TS_TRAIN, "--batch_size", B,
         "--sequence_length", T, "--num_iterations", 0, "--write_tensors", 1, "--seed", 42, "--debug_steps", steps],
        cwd=workdir)
    return workdir


def copy_reference(make_target: str, source: Path, names: list[str]) -> Callable[[Path], None]:
    """A shared_dir writer: make `make_target` (up to date after `make test`'s test-refs), then copy the named
    files of `source` into the test run's directory."""
    def copy(out: Path) -> None:
        make(make_target)
        for name in names:
            shutil.copyfile(source / name, out / name)
    return copy


@pytest.fixture(scope="session")
def d12_reference(tmp_path_factory, tinyshakespeare) -> Path:
    """Directory holding gpt2_124M.bin, gpt2_124M_bf16.bin, gpt2_124M_debug_state.bin, gpt2_tokenizer.bin (d12),
    as write_reference(out, "d12", steps=4) writes them (byte for byte at the same torch thread count):
    `make build/refs_d12/gpt2_124M.bin` writes them once
    (dev/cuda_cpu_refs.py --model d12 --steps 4, with train_gpt2.py's writers on the same batch).
    The debug state holds 4 optimizer steps (d2's holds 10): at 124M parameters each step costs the reference
    seconds in float32 and again in float64 (its loss noise), and steps 0..3 reach step 3, where d12's step losses
    once broke a fixed tolerance (tests/test_debug_state_tolerances.py)."""
    names = ["gpt2_124M.bin", "gpt2_124M_bf16.bin", "gpt2_124M_debug_state.bin", "gpt2_tokenizer.bin"]
    return shared_dir(tmp_path_factory, "d12", copy_reference("build/refs_d12/gpt2_124M.bin", REPO / "build" / "refs_d12", names))


D2_REFERENCE = REPO / "build" / "cuda_cpu_refs"
D2_FILES = ["gpt2_d2.bin", "gpt2_d2_bf16.bin", "gpt2_d2_debug_state.bin", "gpt2_tokenizer.bin", "gpt2_chat_tokenizer.bin"]


@pytest.fixture(scope="session")
def d2_reference(tmp_path_factory, tinyshakespeare) -> Path:
    """Directory holding gpt2_d2.bin, gpt2_d2_bf16.bin, gpt2_d2_debug_state.bin, gpt2_tokenizer.bin and
    gpt2_chat_tokenizer.bin, as write_reference(out, "d2") writes them: `make cuda-cpu-refs` writes them once (dev/cuda_cpu_refs.py, with
    train_gpt2.py's writers on the same batch; `make test` builds them before pytest, and the GPU target's tests
    read them there); each test run gets its own copy."""
    return shared_dir(tmp_path_factory, "d2", copy_reference("cuda-cpu-refs", D2_REFERENCE, D2_FILES))


D2_SMALL_VOCAB_REFERENCE = D2_REFERENCE / "vocab509"  # `make cuda-cpu-refs` (dev/cuda_cpu/cuda_cpu.mk)
D2_SMALL_VOCAB_FILES = ["gpt2_d2.bin", "gpt2_d2_bf16.bin", "gpt2_d2_debug_state.bin", "gpt2_d2_muon_debug_state.bin",
                        "tinyshakespeare_train.bin", "tinyshakespeare_val.bin"]


@pytest.fixture(scope="session")
def d2_small_vocab_reference(tmp_path_factory, tinyshakespeare) -> Path:
    """The d2 of d2_reference with a 509-token vocabulary (padded to 512): its models, AdamW and Muon debug states
    (the batch's tokens modulo 509) and train/val shards of tinyshakespeare's tokens modulo 509, no tokenizer
    (`make cuda-cpu-refs`: dev/cuda_cpu_refs.py --vocab_size 509 --muon). For the runs where GPT-2's 50,257-row
    classifier would be most of the time and none of what is checked."""
    return shared_dir(tmp_path_factory, "d2_small_vocab",
                      copy_reference("cuda-cpu-refs", D2_SMALL_VOCAB_REFERENCE, D2_SMALL_VOCAB_FILES))


@pytest.fixture(scope="session")
def llama3_references(tmp_path_factory, tinyshakespeare) -> Path:
    """dev/llama3_refs.py's files (`make llama3-debug-states`, built once in build/llama3 before pytest runs):
    the test tokenizer (tok/), the llama-3 tinyshakespeare shards (ts/), llama3_tokenizer.bin, train_llama3.py's
    d2 (GQA 2:1) and GQA 4:1 models and debug states, and their Muon states in muon/; each test run gets its own
    copy."""
    def copy(out: Path) -> None:
        make("llama3-debug-states")
        shutil.copytree(REPO / "build" / "llama3", out, dirs_exist_ok=True)

    return shared_dir(tmp_path_factory, "llama3_references", copy)


@pytest.fixture(scope="session")
def qwen3_references(tmp_path_factory, tinyshakespeare) -> Path:
    """dev/qwen3_refs.py's files (`make qwen3-debug-states`, built once in build/qwen3 before pytest runs): the
    <|endoftext|> test tokenizer (tok/), the llama-3 tinyshakespeare shards (ts/), qwen3_tokenizer.bin, train_qwen3.py's
    d1 and d2 from scratch and its MHA and MQA models with their debug states, and Muon states in muon/; each test run
    gets its own copy."""
    def copy(out: Path) -> None:
        make("qwen3-debug-states")
        shutil.copytree(REPO / "build" / "qwen3", out, dirs_exist_ok=True)

    return shared_dir(tmp_path_factory, "qwen3_references", copy)


def trainer_data(request: pytest.FixtureRequest, tmp_path: Path, trainer: str) -> list[Path]:
    """The train and val shards a CPU trainer of the registry reads: the GPT-2 tinyshakespeare shards for a family whose
    -e dN has a depth-sized vocabulary, else its references' llama-3 shards, with its tokenizer file copied into
    tmp_path (run the trainer there: -e dN takes V from it)."""
    from pyllmc.families import REGISTRY

    row = next(row for row in REGISTRY if row.trainer == trainer)
    if row.depth_vocab is not None:
        return list(request.getfixturevalue("tinyshakespeare"))
    ref: Path = request.getfixturevalue(f"{row.name}_references")
    shutil.copy(ref / f"{row.name}_tokenizer.bin", tmp_path)
    return [ref / "ts" / "tiny_shakespeare_train.bin", ref / "ts" / "tiny_shakespeare_val.bin"]


def tinyshakespeare_text() -> Path:
    """The Tiny Shakespeare text: the data script's cache, else the machine's seed copy."""
    cache = TS_DIR / "tiny_shakespeare.txt"
    seed = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
    return cache if cache.exists() or not seed.exists() else seed


def trained_tokenizer(tmp_path_factory: pytest.TempPathFactory, name: str, *flags: object) -> Path:
    """A directory (shared_dir `name`) holding the tokenizer.json dev/data/make_test_tokenizer.py trains on Tiny
    Shakespeare with `flags`."""
    def write(out: Path) -> None:
        run([PYTHON, REPO / "dev" / "data" / "make_test_tokenizer.py", *flags, "--out_dir", out,
             "--corpus", tinyshakespeare_text()])

    return shared_dir(tmp_path_factory, name, write)




def llama3_shards(tmp_path_factory: pytest.TempPathFactory, name: str, tokenizer: Path) -> tuple[Path, Path]:
    """(train, val) llama-3 shards (uint32, magic 20240801 v7) of Tiny Shakespeare in `tokenizer`'s ids, in
    shared_dir `name`."""
    def write(data_dir: Path) -> None:
        shutil.copyfile(tinyshakespeare_text(), data_dir / "tiny_shakespeare.txt")
        run([PYTHON, REPO / "dev" / "data" / "tinyshakespeare.py", "--model_desc", "llama-3", "--tokenizer",
             tokenizer, "--data_dir", data_dir])

    data_dir = shared_dir(tmp_path_factory, name, write)
    return data_dir / "tiny_shakespeare_train.bin", data_dir / "tiny_shakespeare_val.bin"


@pytest.fixture(scope="session")
def llama3_tokenizer(tmp_path_factory, tinyshakespeare) -> Path:
    """Directory holding tokenizer.json: a 514-token byte-level BPE in the Llama 3 style (dev/data/make_test_tokenizer.py;
    <|begin_of_text|> = 512, <|end_of_text|> = 513), trained on Tiny Shakespeare in about a second."""
    return trained_tokenizer(tmp_path_factory, "llama3_tokenizer")


@pytest.fixture(scope="session")
def llama3_tinyshakespeare(tmp_path_factory, llama3_tokenizer) -> tuple[Path, Path]:
    """(train, val) llama-3 shards (uint32, magic 20240801 v7) of Tiny Shakespeare in the test tokenizer's ids."""
    return llama3_shards(tmp_path_factory, "llama3_tinyshakespeare", llama3_tokenizer)
