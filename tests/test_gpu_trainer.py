"""llmc/cuda/gpu_trainer.cuh fed from Llama 3's tensor table on the CPU execution target (dev/cuda_cpu):
dev/test/test_gpu_trainer.cu lays out, shards, uploads, updates and saves a d2 Llama 3 (GQA, untied head)
through the GPU trainers' shared host code and checks each against llmc/llama3_config.h and llmc/adamw.h."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from test_cuda_cpu import REPO, binary, cuda_cpu_flags, run


def test_gpu_trainer_takes_the_llama3_table(tmp_path: Path) -> None:
    binary("libcuda_cpu.a")
    sources = [p.relative_to(REPO) for p in sorted((REPO / "llmc").rglob("*")) if p.suffix in (".h", ".cuh")]
    sources += [Path("dev/test/test_gpu_trainer.cu"), Path("dev/test/test_common.h")]
    r = run([sys.executable, str(REPO / "dev/cuda_cpu/translate.py"), "--root", str(REPO), "--out", str(tmp_path / "src"),
             *map(str, sources)])
    assert r.returncode == 0, r.stderr
    cxx, libs = cuda_cpu_flags()
    exe = tmp_path / "test_gpu_trainer"
    r = run([*cxx, "-DENABLE_BF16", "-x", "c++", str(tmp_path / "src/dev/test/test_gpu_trainer.cu"), "-x", "none", *libs,
             "-o", str(exe)])
    assert r.returncode == 0, r.stderr[-3000:]
    r = run([str(exe)], cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert re.search(r"^\d+ passed, 0 failed", r.stdout, re.M), r.stdout
