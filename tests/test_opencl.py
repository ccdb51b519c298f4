"""The OpenCL trainer (train_gpt2cl.c, test_gpt2cl.c, llmc/opencl*) on PoCL, OpenCL on the CPU.

`make` builds both programs (mk/opencl.mk; `make system-packages` installs the OpenCL headers, ICD loader, PoCL and
CLBlast with apt-get when they are missing). test_gpt2cl checks every tensor against the reference's d2
debug state, with CLBlast and with our own GEMM kernel; a corrupted state fails it; a short training run
gives train_gpt2's losses; a resumed run continues bit for bit; bad input and a bad device are one line.

Runtime on 2 cores: about 20 s of CPU for each d2 test_gpt2cl run with CLBlast, 45 s with the tiled
kernel, a few seconds for the d1 training runs. The d12 (124M) debug state is not run here: on PoCL a
d12 step takes tens of seconds (doc/opencl.md: speed on PoCL), so its 11 forward/backward passes would take minutes.
"""
from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import (REPO, TS_TRAIN, TS_VAL, assert_one_error_line, debug_state_first_steps, killed_after, make,
                      require_system_packages, run)

V, VP = 50257, 50304
TRAIN_CL = REPO / "train_gpt2cl"
TEST_CL = REPO / "test_gpt2cl"


@pytest.fixture(scope="module")
def binaries() -> tuple[Path, Path]:
    require_system_packages("opencl")
    make("train_gpt2cl", "test_gpt2cl", "train_gpt2")
    return TRAIN_CL, TEST_CL


def run_test_gpt2cl(d2: Path, *flags: object, gemm: str = "clblast", state: Path | None = None,
                check: bool = True):
    state = state or d2 / "gpt2_d2_debug_state.bin"
    return run([TEST_CL, "-e", d2 / "gpt2_d2.bin", "-s", state, *flags], cwd=d2, env={"LLMC_CL_GEMM": gemm},
               check=check)


def train(binary: Path, cwd: Path, *flags: object, env: dict[str, str] | None = None, check: bool = True):
    """Runs a trainer on tinyshakespeare in cwd (no sampling unless asked)."""
    cmd = [binary, "-i", TS_TRAIN, "-j", TS_VAL, "-s", 0, *flags]
    return run(cmd, cwd=cwd, env={"OMP_NUM_THREADS": "1", **(env or {})}, check=check)


def log_values(log: Path, key: str) -> dict[int, float]:
    """step -> value of `key` (trl, tel, norm) in a main.log."""
    out = {}
    for line in log.read_text().splitlines():
        m = re.match(r"s:(\d+) (.*)", line)
        fields = dict(f.split(":", 1) for f in m.group(2).split()) if m else {}
        if key in fields:
            out[int(m.group(1))] = float(fields[key])
    return out


# ---------------------------------------------------------------------------- against the reference

# CLBlast (the default GEMMs) on GPT-2's vocabulary; our tiled kernel on the d2 with 509 tokens (padded to 512: the
# classifier's columns are 8 tiles of 64, as GPT-2's 50,304 are 786), where the classifier is no longer 90% of the
# run: 22 s -> 1.7 s on one Zen 3 core
@pytest.mark.parametrize("gemm,reference", [("clblast", "d2_reference"), ("tiled", "d2_small_vocab_reference")])
def test_test_gpt2cl_passes_on_d2(binaries, request: pytest.FixtureRequest, gemm: str, reference: str) -> None:
    proc = run_test_gpt2cl(request.getfixturevalue(reference), gemm=gemm)
    print(proc.stdout)
    name = "CLBlast" if gemm == "clblast" else "gemm_tiled"
    assert f"GEMMs: {name}" in proc.stdout
    assert "28 passed, 0 failed" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| d")]
    assert len(rows) == 16 and all(row.rstrip().endswith("ok   |") for row in rows)


def test_test_gpt2cl_fails_on_corrupted_debug_state(binaries, d2_reference: Path, tmp_path: Path) -> None:
    # the state's first 4 steps are enough to reach the corrupted 4th step loss
    src = debug_state_first_steps(d2_reference / "gpt2_d2_debug_state.bin", tmp_path / "first4.bin", 4)
    header = np.fromfile(src, dtype="<i4", count=256)
    B, T, L, C = int(header[2]), int(header[3]), 2, 128
    num_params = VP * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C
    grads = 1024 + 2 * B * T * 4 + B * T * V * 4 + 4
    data = bytearray(src.read_bytes())
    # one gradient of the first layer's qkvw (well inside the tensor), and the 4th recorded step loss
    for offset, delta in [(grads + (VP * C + 1024 * C + 2 * L * C + 1000) * 4, 1.0), (grads + num_params * 4 + 3 * 4, 0.01)]:
        (value,) = struct.unpack_from("<f", data, offset)
        struct.pack_into("<f", data, offset, value + delta)
    bad = tmp_path / "bad_state.bin"
    bad.write_bytes(bytes(data))
    proc = run_test_gpt2cl(d2_reference, state=bad, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "20 passed, 2 failed" in proc.stdout  # 16 gradients, logits, loss and 4 step losses
    failing = [line.split("|")[1].strip() for line in proc.stdout.splitlines() if "FAIL" in line and line.startswith("|")]
    assert failing == ["dqkvw", "loss step 3"], proc.stdout


def test_test_gpt2cl_rejects_truncated_debug_state(binaries, d2_reference: Path, tmp_path: Path) -> None:
    bad = tmp_path / "short_state.bin"
    bad.write_bytes((d2_reference / "gpt2_d2_debug_state.bin").read_bytes()[:5000])
    proc = run_test_gpt2cl(d2_reference, state=bad, check=False)
    assert "size mismatch" in assert_one_error_line(proc)


# ---------------------------------------------------------------------------- training

FLAGS = ["-e", "d1", "-b", 2, "-t", 16, "-v", 4, "-m", 2, "-c", 0.1, "-u", 2, "-q", 0.1]


def test_training_losses_match_the_cpu_trainer(binaries, tmp_path: Path) -> None:
    train(REPO / "train_gpt2", tmp_path, *FLAGS, "-x", 8, "-o", "cpu")
    proc = train(TRAIN_CL, tmp_path, *FLAGS, "-x", 8, "-o", "cl")
    assert "OpenCL device:" in proc.stdout
    for key, rtol in [("trl", 2e-6), ("tel", 2e-6), ("norm", 1e-5)]:
        cpu, cl = log_values(tmp_path / "cpu" / "main.log", key), log_values(tmp_path / "cl" / "main.log", key)
        assert len(cpu) >= 3 and cpu.keys() == cl.keys(), key
        for step in cpu:
            assert cl[step] == pytest.approx(cpu[step], rel=rtol), (key, step, cl[step], cpu[step])


def test_gradient_accumulation_matches_one_larger_batch(binaries, tmp_path: Path) -> None:
    flags = ["-e", "d1", "-t", 16, "-x", 3, "-v", 0]
    train(TRAIN_CL, tmp_path, *flags, "-b", 4, "-o", "big")
    train(TRAIN_CL, tmp_path, *flags, "-b", 2, "-d", 64, "-o", "accum")
    big, accum = log_values(tmp_path / "big" / "main.log", "trl"), log_values(tmp_path / "accum" / "main.log", "trl")
    assert len(big) == 3 and big.keys() == accum.keys()
    for step in big:
        assert accum[step] == pytest.approx(big[step], rel=2e-6), (step, accum[step], big[step])


def test_resume_continues_bit_identically(binaries, d2_reference: Path, tmp_path: Path) -> None:
    shutil.copy(d2_reference / "gpt2_tokenizer.bin", tmp_path)
    flags = [*FLAGS, "-x", 8, "-n", 4, "-s", 4, "-g", 8]
    straight = train(TRAIN_CL, tmp_path, *flags, "-o", "straight")
    # the same run killed after step 4: keep only its first checkpoint, then resume
    part = killed_after(tmp_path / "straight", tmp_path / "part", 4)
    resumed = train(TRAIN_CL, tmp_path, *flags, "-o", "part", "-y", 1)
    assert "resumed from" in resumed.stdout
    a = log_values(tmp_path / "straight" / "main.log", "trl")
    b = log_values(part / "main.log", "trl")
    assert len(a) == 8 and sorted(b) == [4, 5, 6, 7]
    assert all(a[s] == b[s] for s in b)
    assert (tmp_path / "straight" / "model_00000008.bin").read_bytes() == (part / "model_00000008.bin").read_bytes()
    assert (tmp_path / "straight" / "state_00000008_00000.bin").read_bytes() == (part / "state_00000008_00000.bin").read_bytes()
    # the text sample at step 8 comes from the restored sampler RNG
    sample = lambda out: out.split("generating:")[-1].split("---")[1]
    assert sample(straight.stdout) == sample(resumed.stdout)


def test_checkpoint_is_readable_by_the_cpu_trainer(binaries, tmp_path: Path) -> None:
    train(TRAIN_CL, tmp_path, *FLAGS, "-x", 2, "-n", 2, "-o", "cl")
    # the CPU trainer continues from the OpenCL trainer's model file: same format
    proc = train(REPO / "train_gpt2", tmp_path, "-e", tmp_path / "cl" / "model_00000002.bin", "-b", 2, "-t", 16, "-x", 1,
                 "-v", 1, "-m", 1)
    assert re.search(r"L=1 NH=\d+ C=64", proc.stdout) and "val loss" in proc.stdout


# ---------------------------------------------------------------------------- devices and bad input

def test_list_devices_names_platform_and_device(binaries) -> None:
    proc = run([TRAIN_CL, "-cl", 1])
    assert re.search(r"^platform 0 \(-cp 0\): .+", proc.stdout, re.M), proc.stdout
    assert re.search(r"^  device 0 \(-cp 0 -cd 0\): .+ \[(CPU|GPU|accelerator|other)\], OpenCL C \d\.\d.*: usable$", proc.stdout, re.M)


def test_help_lists_the_device_flags(binaries) -> None:
    proc = run([TRAIN_CL, "--help"])
    for flag in ["-cp", "-cd", "-cl", "-e", "-o", "-y", "-n"]:
        assert re.search(rf"^  {re.escape(flag)}\s", proc.stdout, re.M), flag


BAD_CASES = {
    "device index": (["-cd", 99], {}, "no OpenCL device 99 on platform 0"),
    "platform index": (["-cp", 99], {}, "no OpenCL platform 99"),
    "no OpenCL driver": ([], {"OCL_ICD_VENDORS": "/nonexistent", "OCL_ICD_FILENAMES": ""}, "no OpenCL platform found"),
    "bf16 precision": (["-p", "bf16"], {}, "fp32 only"),
    "unknown GEMM": ([], {"LLMC_CL_GEMM": "cublas"}, "LLMC_CL_GEMM=cublas"),
    "missing checkpoint": (["-e", "no_such_model.bin"], {}, "no such checkpoint"),
    "T > maxT": (["-t", 2048], {}, "max sequence length 1024"),
    "missing data": (["-i", "dev/data/tinyshakespeare/nothing_*.bin"], {}, "tinyshakespeare.py"),
}


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_input_gives_one_error_line(binaries, case: str) -> None:
    flags, env, expected = BAD_CASES[case]
    proc = run([TRAIN_CL, "-i", TS_TRAIN, "-j", TS_VAL, "-e", "d1", "-s", 0, "-x", 1, *flags], cwd=REPO, env=env,
               check=False)
    assert expected in assert_one_error_line(proc)


CLCHECK_PROGRAM = r"""
#include "llmc/opencl/opencl_common.h"
int main(void) {
    char name[64];
    clCheck(clGetDeviceInfo(NULL, CL_DEVICE_NAME, sizeof(name), name, NULL)); // no device: CL_INVALID_DEVICE
    return 0;
}
"""


def test_failed_opencl_call_is_one_line_naming_call_file_line_and_error(binaries, tmp_path: Path) -> None:
    src = tmp_path / "clcheck.c"
    src.write_text(CLCHECK_PROGRAM)
    run(["cc", "-I", REPO, src, "-lOpenCL", "-o", tmp_path / "clcheck"])
    line = assert_one_error_line(run([tmp_path / "clcheck"], check=False), alone=True)
    assert re.fullmatch(r"error: OpenCL call clGetDeviceInfo failed at .*clcheck\.c:5: CL_INVALID_DEVICE \(-33\)", line), line
