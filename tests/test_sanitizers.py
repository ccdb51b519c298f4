"""The C unit tests, test_gpt2, a short train_gpt2 run, encode and generate under ASan + UBSan.

Every dev/test/test_*.c, test_gpt2.c, train_gpt2.c (single process, no MPI), encode.c and
generate.c are built with ASan + UBSan (+ float-cast-overflow), -O1 -g, no recovery: the Makefile's SAN_CFLAGS
(`make san-build` writes them into build/sanitize/, `make test` beside pip's install, and each test makes its
program up to date); they run with ASan/UBSan halting on the first error (halt_on_error=1, print_stacktrace=1). The
sanitizers log to files (log_path) with their own exit codes (86 ASan, 87 UBSan), so a death test
that expects "exit 1 and one error line" cannot mistake a sanitizer report for a clean refusal;
any report in the logs fails the test. allocator_may_return_null=1 lets the tests of mallocCheck
see a failed huge allocation (ASan logs a WARNING for it, which is allowed).
Runtime: about 60-90 s on 2 cores (a d1 model with B=2, T=16).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, TS_TRAIN, make, run, write_reference

UNIT_TESTS = sorted(p.stem for p in (REPO / "dev" / "test").glob("test_*.c"))


def sanitizer_env(log_dir: Path) -> dict[str, str]:
    log_dir.mkdir(parents=True, exist_ok=True)
    return {
        "ASAN_OPTIONS": f"halt_on_error=1:exitcode=86:detect_leaks=1:allocator_may_return_null=1:log_path={log_dir}/asan",
        "UBSAN_OPTIONS": f"halt_on_error=1:print_stacktrace=1:exitcode=87:log_path={log_dir}/ubsan",
        "OMP_NUM_THREADS": "2",
    }


def sanitizer_reports(log_dir: Path) -> list[str]:
    """Every sanitizer report in log_dir; ASan's warning for a refused huge allocation is not one."""
    reports = []
    for log in sorted(log_dir.glob("*san.*")):
        text = log.read_text(errors="replace")
        lines = [line for line in text.splitlines() if line.strip() and "failed to allocate 0x" not in line]
        if lines:
            reports.append(f"--- {log.name}\n" + "\n".join(lines[:60]))
    return reports


def build(name: str) -> Path:
    """build/sanitize/<name> (make san-build), up to date."""
    make(f"build/sanitize/{name}")
    return REPO / "build" / "sanitize" / name


@pytest.fixture(scope="module")
def san_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sanitize")


@pytest.mark.parametrize("name", UNIT_TESTS)
def test_unit_test_is_clean_under_asan_and_ubsan(san_dir: Path, name: str) -> None:
    exe = build(name)
    logs = san_dir / f"logs_{name}"
    # (test_elementwise's GELU checks in one of the GELU's two forms: the other runs the same loops over the same
    # memory, and each form's checks take 20 s under the sanitizers; both run in tests/test_cpu_elementwise.py)
    env = {**sanitizer_env(logs), **({"LLMC_TEST_GELU_FORMS": "sigmoid"} if name == "test_elementwise" else {})}
    proc = run([exe], cwd=REPO, check=False, env=env, timeout=900)
    reports = sanitizer_reports(logs)
    assert not reports, "\n".join(reports)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    closing = re.search(r"(\d+) passed, (\d+) failed\s*$", proc.stdout)
    assert closing and int(closing.group(2)) == 0 and int(closing.group(1)) > 0, proc.stdout[-2000:]


@pytest.fixture(scope="module")
def d1_reference(tmp_path_factory, tinyshakespeare) -> Path:
    """gpt2_d1.bin, gpt2_d1_debug_state.bin (B=2, T=16) and gpt2_tokenizer.bin written by train_gpt2.py."""
    return write_reference(tmp_path_factory.mktemp("san_d1"), "d1", B=2, T=16)


def test_test_gpt2_is_clean_under_asan_and_ubsan(san_dir: Path, d1_reference: Path) -> None:
    exe = build("test_gpt2")
    logs = san_dir / "logs_test_gpt2"
    proc = run([exe, "-e", "gpt2_d1.bin", "-s", "gpt2_d1_debug_state.bin"], cwd=d1_reference, check=False,
               env=sanitizer_env(logs), timeout=900)
    reports = sanitizer_reports(logs)
    assert not reports, "\n".join(reports)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert re.search(r"\d+ passed, 0 failed\s*$", proc.stdout), proc.stdout[-2000:]


def test_train_gpt2_run_and_resume_are_clean_under_asan_and_ubsan(san_dir: Path, d1_reference: Path) -> None:
    """Training with validation, HellaSwag, sampling and checkpoints, then a resume: every code path of a run."""
    sys.path.insert(0, str(REPO / "dev" / "data"))
    from data_common import write_evalfile

    rng = np.random.default_rng(0)
    examples = [{"label": i % 4, "ctx_tokens": rng.integers(0, 50257, 3 + i).tolist(),
                 "ending_tokens": [rng.integers(0, 50257, 1 + k).tolist() for k in range(4)]} for i in range(5)]
    write_evalfile(d1_reference / "eval.bin", examples)
    exe = build("train_gpt2")
    logs = san_dir / "logs_train_gpt2"
    flags = ["-e", "gpt2_d1.bin", "-i", TS_TRAIN, "-j", TS_TRAIN, "-b", 4, "-t", 16, "-v", 2, "-m", 1, "-s", 2, "-g", 3,
             "-h", 1, "-he", "eval.bin", "-n", 2, "-o", "run"]
    first = run([exe, *flags, "-x", 2], cwd=d1_reference, check=False, env=sanitizer_env(logs), timeout=900)
    assert not sanitizer_reports(logs), "\n".join(sanitizer_reports(logs))
    assert first.returncode == 0, f"exit {first.returncode}\n{first.stdout[-3000:]}\n{first.stderr[-3000:]}"
    assert (d1_reference / "run" / "DONE_00000002").exists()
    resumed = run([exe, *flags, "-x", 3, "-y", 1], cwd=d1_reference, check=False, env=sanitizer_env(logs), timeout=900)
    assert not sanitizer_reports(logs), "\n".join(sanitizer_reports(logs))
    assert resumed.returncode == 0, f"exit {resumed.returncode}\n{resumed.stdout[-3000:]}\n{resumed.stderr[-3000:]}"
    assert "resumed from" in resumed.stdout and (d1_reference / "run" / "DONE_00000003").exists()


def test_encode_and_generate_are_clean_under_asan_and_ubsan(san_dir: Path, d1_reference: Path) -> None:
    """The BPE encoder on tricky text (invalid UTF-8, a long run, special tokens), then KV-cached sampling."""
    run([sys.executable, REPO / "dev" / "write_bpe.py", "-o", d1_reference / "gpt2_bpe.bin"])
    encode = build("encode")
    generate = build("generate")
    logs = san_dir / "logs_tools"
    env = sanitizer_env(logs)
    text = ("First Citizen:\nBefore we proceed, hear me speak.<|endoftext|>caf\u00e9 \u65e5\u672c 12345 \U0001f600 "
            "don't   x\t\n").encode() + b"\xff\xfe\xc3\x28 \xed\xa0\x80" + b"a" * 3000
    ids = subprocess.run([str(encode), "-b", "gpt2_bpe.bin", "--allow-special"], input=text, cwd=d1_reference,
                         capture_output=True, env={**os.environ, **env}, timeout=600)
    assert ids.returncode == 0, ids.stderr[-2000:]
    for decoder in [["-d", "-b", "gpt2_bpe.bin"], ["-d", "-t", "gpt2_tokenizer.bin"]]:
        back = subprocess.run([str(encode), *decoder], input=ids.stdout, cwd=d1_reference, capture_output=True,
                              env={**os.environ, **env}, timeout=600)
        assert back.returncode == 0 and back.stdout == text, back.stderr[-2000:]
    gen = run([generate, "-e", "gpt2_d1.bin", "-b", "gpt2_bpe.bin", "-p", "Hello, my name is", "-n", 12, "--check-kv",
               "--top-k", 40, "--top-p", 0.9, "--seed", 1], cwd=d1_reference, check=False, env=env, timeout=600)
    assert not sanitizer_reports(logs), "\n".join(sanitizer_reports(logs))
    assert gen.returncode == 0, f"exit {gen.returncode}\n{gen.stdout[-2000:]}\n{gen.stderr[-2000:]}"
