"""llmc/trainer.h's rules against PyTorch, through pyllmc's cffi build of the same header.

The loop itself (resume, signals, checkpoint listing and pruning, -a 1, the outlier windows) is
driven by dev/test/test_trainer.c; here the rules that have a PyTorch counterpart are compared with it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import make

TOTAL_NORMS = [0.25, 0.9999990, 0.9999995, 1.0, 1.0000001, 1.5, 2.0, 37.0, 1e4]


@pytest.fixture(scope="module")
def lib():
    make("pyllmc")
    from pyllmc._core import lib as c_lib
    return c_lib


def torch_clip(grads: list[np.ndarray], max_norm: float) -> tuple[float, list[np.ndarray]]:
    params = [torch.zeros(g.shape, dtype=torch.float32, requires_grad=True) for g in grads]
    for p, g in zip(params, grads):
        p.grad = torch.from_numpy(g.copy())
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return float(norm), [p.grad.numpy() for p in params]


@pytest.mark.parametrize("target_norm", TOTAL_NORMS)
def test_clipping_is_torch_clip_grad_norm(lib, target_norm: float) -> None:
    rng = np.random.default_rng(int(target_norm * 1000) % 2**32)
    grads = [rng.standard_normal(s).astype(np.float32) for s in ((64, 32), (32,), (7, 5, 3))]
    scale_to = np.float32(target_norm) / np.float32(np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads)))
    grads = [g * scale_to for g in grads]
    norm, torch_grads = torch_clip(grads, 1.0)
    scale = lib.grad_clip_scale(norm, lib.TRAINER_GRAD_CLIP)
    ours = [g * np.float32(scale) for g in grads]
    for a, b in zip(ours, torch_grads):
        np.testing.assert_array_equal(a, b)  # the same float32 operations, so the same bits


def test_clipping_off_and_non_finite_norms(lib) -> None:
    assert lib.grad_clip_scale(5.0, 0.0) == 1.0
    assert lib.grad_clip_scale(float("nan"), 1.0) == 1.0
    assert lib.grad_clip_scale(float("inf"), 1.0) == 1.0


def test_the_optimizer_constants_are_the_reference_defaults(lib) -> None:
    # train_gpt2.py's AdamW: betas (0.9, 0.95), eps 1e-8, clip 1.0; init seed 42, sampler seed 1337
    assert (lib.TRAINER_ADAMW_BETA1, lib.TRAINER_ADAMW_BETA2) == (np.float32(0.9), np.float32(0.95))
    assert lib.TRAINER_ADAMW_EPS == np.float32(1e-8) and lib.TRAINER_GRAD_CLIP == 1.0
    assert (lib.TRAINER_INIT_SEED, lib.TRAINER_SAMPLER_SEED) == (42, 1337)
