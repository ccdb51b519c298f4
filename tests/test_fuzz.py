"""libFuzzer harnesses of every C file loader (dev/fuzz/), under AddressSanitizer and UBSan.

Each harness runs for FUZZ_TIME seconds (default 5, as in `make test`; `make fuzz` runs 20, `make fuzz FUZZ_TIME=60`
longer) on a seed
corpus written by llmc's own writers (dev/fuzz/make_corpus.py) and must finish without a crash, a
sanitizer report, a leak of the loader's memory or files, or an allocation above
FUZZ_MALLOC_LIMIT_MB (a header that claims more than the file holds must be refused before anything
is allocated). Every input in dev/fuzz/regressions/ (crashes found earlier, now fixed) is replayed
by the harness its name starts with. Runtime: 8 x FUZZ_TIME s plus about 25 s of builds and seeds.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
from pathlib import Path

import pytest

from conftest import PYTHON, REPO, make, require_system_packages, run

HARNESSES = ["checkpoint", "debug_state", "tokenizer", "shard", "evalfile", "train_state", "bpe", "chat"]
FUZZ_TIME = int(os.environ.get("FUZZ_TIME", "5"))
FUZZ_MALLOC_LIMIT_MB = 64  # seeds are a few KB: no loader may need more for them
# The fuzzer's own memory may reach 1 GB. Linux keeps a process's peak RSS across fork and exec, and
# libFuzzer reads that peak, so a harness started from this (by now large) pytest process starts at its
# peak: the limit is 1 GB above it (a fresh-clone run saw 1.27 GB from the very first input otherwise).
FUZZ_OWN_RSS_MB = 1024
REGRESSIONS = REPO / "dev" / "fuzz" / "regressions"


def fuzz_rss_limit_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 + FUZZ_OWN_RSS_MB


def harness_path(name: str) -> Path:
    return REPO / "dev" / "fuzz" / f"fuzz_{name}"


@pytest.fixture(scope="module")
def harnesses() -> dict[str, Path]:
    """Every harness built (make installs clang first when it is missing; skipped without root or sudo)."""
    require_system_packages("fuzz")
    make(*(f"dev/fuzz/fuzz_{h}" for h in HARNESSES))
    return {h: harness_path(h) for h in HARNESSES}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, harnesses: dict[str, Path]) -> Path:
    out = tmp_path_factory.mktemp("fuzz_corpus")
    env = {"TIKTOKEN_CACHE_DIR": os.environ.get("TIKTOKEN_CACHE_DIR", str(REPO.parent / "shared" / "tiktoken_cache"))}
    run([PYTHON, REPO / "dev" / "fuzz" / "make_corpus.py", out, "--train-state-harness", harnesses["train_state"]], env=env)
    return out


def harness_for(regression: Path) -> str:
    """The harness a regression input belongs to: the longest harness name its file name starts with."""
    names = [h for h in HARNESSES if regression.name.startswith(h + "_")]
    assert names, f"{regression}: name must start with one of {HARNESSES} and '_'"
    return max(names, key=len)


def test_make_corpus_writes_valid_seeds_for_every_harness(harnesses: dict[str, Path], corpus: Path) -> None:
    for name, exe in harnesses.items():
        seeds = sorted((corpus / name).iterdir())
        assert seeds, f"no seeds for {name}"
        # seeds are valid files: the loader accepts them, so it prints no error line
        proc = run([exe, *seeds], check=False, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "error:" not in proc.stderr, f"{name}: a seed is rejected: {proc.stderr[-1000:]}"


@pytest.mark.parametrize("name", HARNESSES)
def test_fuzz_harness_runs_without_a_crash(harnesses: dict[str, Path], corpus: Path, tmp_path: Path, name: str) -> None:
    work = tmp_path / "corpus"
    shutil.copytree(corpus / name, work)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    cmd = [harnesses[name], f"-max_total_time={FUZZ_TIME}", "-close_fd_mask=3", "-print_final_stats=1",
           f"-malloc_limit_mb={FUZZ_MALLOC_LIMIT_MB}", f"-rss_limit_mb={fuzz_rss_limit_mb()}", "-timeout=10",
           f"-artifact_prefix={artifacts}/", work]
    proc = run(cmd, check=False, timeout=FUZZ_TIME + 120,
               env={"ASAN_OPTIONS": "halt_on_error=1:detect_leaks=1", "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"})
    found = sorted(p.name for p in artifacts.iterdir())
    assert proc.returncode == 0 and not found, (
        f"fuzz_{name} found a crash (exit {proc.returncode}, inputs {found} in {artifacts}); copy the input to "
        f"dev/fuzz/regressions/{name}_<what> once fixed\n{proc.stderr[-4000:]}")
    execs = re.search(r"stat::number_of_executed_units:\s*(\d+)", proc.stderr)
    assert execs and int(execs.group(1)) >= 100, proc.stderr[-2000:]
    print(f"fuzz_{name}: {execs.group(1)} executions in {FUZZ_TIME} s")


@pytest.mark.parametrize("regression", sorted(REGRESSIONS.iterdir()) if REGRESSIONS.is_dir() else [],
                         ids=lambda p: p.name)
def test_fuzz_regression_input_is_handled(harnesses: dict[str, Path], regression: Path) -> None:
    name = harness_for(regression)
    proc = run([harnesses[name], regression], check=False, timeout=120,
               env={"ASAN_OPTIONS": "halt_on_error=1", "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    # a refused input gets one clear line naming the scratch file the harness wrote it to; libFuzzer runs an
    # input a second time when the first run made more allocations than frees (its leak check, which then
    # found none: exit 0), and that run prints the same line again
    errors = {line for line in proc.stderr.splitlines() if line.startswith("error: ")}
    assert len(errors) <= 1 and all("llmc_fuzz_" in e for e in errors), proc.stderr[-2000:]
