"""llmc/cpu/attention_cpu.h's attention (the CPU trainers' causal self-attention) against torch's
scaled_dot_product_attention, forward and backward, in float64.

dev/test/attention_dump runs attention_forward then attention_backward on tensors this file
writes. The tiled kernel (fp32; LLMC_ATTENTION=tiled) takes its queries in tiles of 64 rows; it is checked
at T = 1024 (16 tiles, the GPT-2 context) and at T not a multiple of the tile (1, 63, 65, 130, 200),
and the path that fills a (B,NH,T,T) weights buffer at T = 65. Tolerance: max |ours - torch| <=
1e-5 of max |torch| per tensor (fp32 sums of up to T terms; measured <= 1e-6 here). The blocked kernel
(LLMC_ATTENTION=blocked: bf16 products, fp32 sums, online softmax over key blocks) at the same shapes:
TOL_BF16 = 2e-2 of max |torch| (bf16 rounds Q, K, V, P, dO, dS to 8 significant bits; measured <= 8e-3).
The check is shown to fail: gradients of a shifted dout are not accepted. Bad input to the dump program is one
error line. The kernel's own checks (dev/test/test_attention_cpu) pass in a build for any x86-64 CPU too, not only in
-march=native's. Runtime: about 25 s.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import REPO, assert_one_error_line, make, run

DUMP = REPO / "dev" / "test" / "attention_dump"
TOL = 1e-5
TOL_BF16 = 2e-2


@pytest.fixture(scope="module")
def dump() -> Path:
    make("dev/test/attention_dump")
    return DUMP


def llmc_attention(dump: Path, tmp: Path, inp: np.ndarray, dout: np.ndarray, NH: int,
                   weights: bool = False, kernel: str = "tiled") -> tuple[np.ndarray, np.ndarray]:
    """(out, dinp) of attention_forward / attention_backward on inp (B,T,3C) and dout (B,T,C), on the kernel named."""
    B, T, C3 = inp.shape
    src, dst = tmp / "in.bin", tmp / "out.bin"
    with open(src, "wb") as f:
        f.write(np.array([B, T, C3 // 3, NH], dtype="<i4").tobytes())
        f.write(inp.astype("<f4").tobytes())
        f.write(dout.astype("<f4").tobytes())
    run([dump, src, dst] + (["weights"] if weights else []), env={"OMP_NUM_THREADS": "2", "LLMC_ATTENTION": kernel})
    got = np.fromfile(dst, dtype="<f4")
    n_out = B * T * C3 // 3
    assert got.size == n_out + B * T * C3
    return got[:n_out].reshape(B, T, C3 // 3), got[n_out:].reshape(B, T, C3)


def torch_attention(inp: np.ndarray, dout: np.ndarray, NH: int) -> tuple[np.ndarray, np.ndarray]:
    """(out, dinp) of causal scaled_dot_product_attention in float64."""
    B, T, C3 = inp.shape
    C = C3 // 3
    x = torch.tensor(inp, dtype=torch.float64, requires_grad=True)
    q, k, v = (z.view(B, T, NH, C // NH).transpose(1, 2) for z in x.split(C, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
    y.backward(torch.tensor(dout, dtype=torch.float64))
    return y.detach().numpy(), x.grad.numpy()


def rel_err(ours: np.ndarray, ref: np.ndarray) -> float:
    """max |ours - ref| over max |ref|, the latter at least 1e-3 (at T=1 dq is 0 up to float64 noise)"""
    return float(np.abs(ours.astype(np.float64) - ref).max()) / max(float(np.abs(ref).max()), 1e-3)


def inputs(B: int, T: int, C: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    # scores of a few units (as in a trained model), so the softmax is neither flat nor one-hot
    return (rng.standard_normal((B, T, 3 * C)).astype(np.float32) * 1.5,
            rng.standard_normal((B, T, C)).astype(np.float32))


@pytest.mark.parametrize("B,T,C,NH,weights", [(1, 1024, 128, 2, False), (2, 1, 32, 2, False), (1, 63, 64, 4, False),
                                              (2, 65, 48, 3, False), (1, 130, 64, 2, False), (1, 200, 32, 1, False),
                                              (2, 65, 48, 3, True)])
def test_attention_matches_torch_sdpa_forward_and_backward(dump: Path, tmp_path: Path, B: int, T: int, C: int,
                                                           NH: int, weights: bool) -> None:
    inp, dout = inputs(B, T, C, seed=T)
    out, dinp = llmc_attention(dump, tmp_path, inp, dout, NH, weights)
    ref_out, ref_dinp = torch_attention(inp, dout, NH)
    assert rel_err(out, ref_out) <= TOL, f"out: {rel_err(out, ref_out):.3e}"
    for name, part in (("dq", 0), ("dk", 1), ("dv", 2)):
        sl = slice(part * C, (part + 1) * C)
        err = rel_err(dinp[..., sl], ref_dinp[..., sl])
        assert err <= TOL, f"{name}: {err:.3e}"


@pytest.mark.parametrize("B,T,C,NH", [(1, 1024, 128, 2), (2, 1, 32, 2), (1, 63, 64, 4), (2, 65, 48, 3), (1, 200, 32, 1)])
def test_blocked_bf16_attention_matches_torch_sdpa_within_bf16_tolerance(dump: Path, tmp_path: Path, B: int, T: int,
                                                                         C: int, NH: int) -> None:
    inp, dout = inputs(B, T, C, seed=T)
    out, dinp = llmc_attention(dump, tmp_path, inp, dout, NH, kernel="blocked")
    ref_out, ref_dinp = torch_attention(inp, dout, NH)
    assert rel_err(out, ref_out) <= TOL_BF16, f"out: {rel_err(out, ref_out):.3e}"
    assert rel_err(out, ref_out) > TOL, "the blocked kernel ran in fp32"  # (so LLMC_ATTENTION=blocked took effect)
    for name, part in (("dq", 0), ("dk", 1), ("dv", 2)):
        sl = slice(part * C, (part + 1) * C)
        err = rel_err(dinp[..., sl], ref_dinp[..., sl])
        assert err <= TOL_BF16, f"{name}: {err:.3e}"


def test_the_comparison_rejects_a_wrong_gradient(dump: Path, tmp_path: Path) -> None:
    inp, dout = inputs(1, 130, 64, seed=7)
    _, dinp = llmc_attention(dump, tmp_path, inp, np.roll(dout, 1, axis=1), 2)
    _, ref_dinp = torch_attention(inp, dout, 2)
    assert rel_err(dinp, ref_dinp) > 100 * TOL


def test_blocked_and_weights_paths_agree_closely(dump: Path, tmp_path: Path) -> None:
    inp, dout = inputs(1, 200, 64, seed=3)
    out_a, dinp_a = llmc_attention(dump, tmp_path, inp, dout, 2)
    out_b, dinp_b = llmc_attention(dump, tmp_path, inp, dout, 2, weights=True)
    assert rel_err(out_a, out_b.astype(np.float64)) <= 1e-6
    assert rel_err(dinp_a, dinp_b.astype(np.float64)) <= 1e-6


def test_dump_refuses_a_short_file_in_one_line(dump: Path, tmp_path: Path) -> None:
    src = tmp_path / "short.bin"
    src.write_bytes(np.array([1, 8, 16, 2], dtype="<i4").tobytes() + b"\0" * 12)
    proc = run([dump, src, tmp_path / "out.bin"], check=False)
    assert assert_one_error_line(proc, alone=True) == f"error: {src}: file too short for inp"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="an x86-64 build: the AMX and AVX-512 paths are x86's")
def test_the_kernels_checks_pass_in_a_build_for_any_x86_64(tmp_path: Path) -> None:
    """dev/test/test_attention_cpu built as a distribution would build it (-O3 -march=x86-64: AMX, AVX512-BF16 and the
    AVX-512 loops chosen at run time, none by the compiler) passes on this CPU. At -O3 without -march=native GCC 12
    dropped the stores of the AMX tile shapes before ldtilecfg, and on a CPU with AMX the first tile load faulted."""
    exe = tmp_path / "test_attention_cpu_x86_64"
    run([os.environ.get("CC", "cc"), "-O3", "-march=x86-64", "-std=gnu11", "-fopenmp", "-Wno-psabi", f"-I{REPO}",
         REPO / "dev" / "test" / "test_attention_cpu.c", "-lm", "-o", exe])
    r = run([exe], check=False, env={"OMP_NUM_THREADS": "2"})
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
    assert r.stdout.rstrip().splitlines()[-1].endswith("passed, 0 failed"), r.stdout[-2000:]
