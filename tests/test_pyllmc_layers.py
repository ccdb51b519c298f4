"""pyllmc.layers: every C layer's forward and backward against torch autograd (float64), plus the
argument checks that must raise instead of letting C read or write out of bounds.

Shapes are deliberately odd (C = 13, T = 7, B*T not a multiple of the 4-row matmul tile, OC not a
multiple of the 64-column panel, OC > 256 for the chunked dinp loop). Errors are measured as
max |ours - torch| / max |torch| per tensor; the tolerance of each layer is stated next to its test.
Backward functions accumulate, so gradients start from random values and the test checks
start + gradient.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import make

# (B, T, C, NH)
SHAPES = [(1, 1, 13, 1), (2, 7, 13, 1), (3, 5, 12, 3), (2, 9, 66, 2), (1, 17, 130, 2)]
SHAPE_IDS = [f"B{b}T{t}C{c}NH{nh}" for b, t, c, nh in SHAPES]

# float32 C vs float64 torch, relative to the largest reference value
TOL_ELEMENTWISE = 1e-6   # encoder, residual: one or two roundings per element
TOL_GELU = 1e-5          # tanhf and the cubic term: a few roundings, some cancellation near x = -2
TOL_REDUCTION = 1e-5     # layernorm, matmul, attention, softmax/cross-entropy: sums of up to a few hundred terms
TOL_ADAMW = 1e-6         # AdamW against torch.optim.AdamW in float32 (same formula, same rounding order)


@pytest.fixture(scope="module")
def L():
    make("pyllmc")
    from pyllmc import layers
    return layers


def rnd(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def t64(a: np.ndarray, grad: bool = False) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def rel_err(ours: np.ndarray, ref: torch.Tensor | np.ndarray) -> float:
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else ref
    scale = max(float(np.abs(ref).max()), 1e-30)
    return float(np.abs(ours.astype(np.float64) - ref).max()) / scale


MAX_ERRORS: dict[str, float] = {}  # largest error seen per check; printed with `pytest -s`


@pytest.fixture(scope="module", autouse=True)
def report_max_errors():
    yield
    for name, err in sorted(MAX_ERRORS.items()):
        print(f"\n{name:32s} max relative error {err:.2e}", end="")


def check(name: str, ours: np.ndarray, ref: torch.Tensor | np.ndarray, tol: float) -> None:
    err = rel_err(ours, ref)
    key = name.split(" step")[0]
    MAX_ERRORS[key] = max(MAX_ERRORS.get(key, 0.0), err)
    assert err <= tol, f"{name}: max relative error {err:.3e} > {tol:.1e}"


# ---------------------------------------------------------------------------- encoder

@pytest.mark.parametrize("B,T,C,NH", SHAPES, ids=SHAPE_IDS)
def test_encoder_forward_backward_match_torch(L, B, T, C, NH):
    rng = np.random.default_rng(1)
    Vp, maxT = 37, T + 3
    inp = rng.integers(0, Vp, (B, T)).astype(np.int32)
    inp[0, 0] = inp[-1, -1]  # a repeated token: its gradient rows must add up
    wte, wpe = rnd(rng, Vp, C), rnd(rng, maxT, C)
    out = np.empty((B, T, C), np.float32)
    L.encoder_forward(out, inp, wte, wpe)
    twte, twpe = t64(wte, True), t64(wpe, True)
    ref = twte[torch.from_numpy(inp).long()] + twpe[:T]
    check("encoder out", out, ref, TOL_ELEMENTWISE)

    dout = rnd(rng, B, T, C)
    dwte0, dwpe0 = rnd(rng, Vp, C), rnd(rng, maxT, C)
    dwte, dwpe = dwte0.copy(), dwpe0.copy()
    L.encoder_backward(dwte, dwpe, dout, inp)
    ref.backward(t64(dout))
    check("encoder dwte", dwte, dwte0 + twte.grad.numpy(), TOL_ELEMENTWISE)
    check("encoder dwpe", dwpe, dwpe0 + twpe.grad.numpy(), TOL_ELEMENTWISE)


# ---------------------------------------------------------------------------- layernorm

@pytest.mark.parametrize("B,T,C,NH", SHAPES, ids=SHAPE_IDS)
def test_layernorm_forward_backward_match_torch(L, B, T, C, NH):
    rng = np.random.default_rng(2)
    inp = rnd(rng, B, T, C, scale=3.0) + 1.5
    w, b = rnd(rng, C), rnd(rng, C)
    out, mean, rstd = np.empty((B, T, C), np.float32), np.empty((B, T), np.float32), np.empty((B, T), np.float32)
    L.layernorm_forward(out, mean, rstd, inp, w, b)
    tx, tw, tb = t64(inp, True), t64(w, True), t64(b, True)
    ref = F.layer_norm(tx, (C,), tw, tb, eps=1e-5)
    check("layernorm out", out, ref, TOL_REDUCTION)
    check("layernorm mean", mean, tx.mean(-1), TOL_REDUCTION)
    check("layernorm rstd", rstd, 1.0 / torch.sqrt(tx.var(-1, unbiased=False) + 1e-5), TOL_REDUCTION)

    dout = rnd(rng, B, T, C)
    dinp0, dw0, db0 = rnd(rng, B, T, C), rnd(rng, C), rnd(rng, C)
    dinp, dw, db = dinp0.copy(), dw0.copy(), db0.copy()
    L.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd)
    ref.backward(t64(dout))
    check("layernorm dinp", dinp - dinp0, tx.grad, TOL_REDUCTION)
    check("layernorm dweight", dw - dw0, tw.grad, TOL_REDUCTION)
    check("layernorm dbias", db - db0, tb.grad, TOL_REDUCTION)


# ---------------------------------------------------------------------------- matmul

@pytest.mark.parametrize("B,T,C,NH", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("OC", [1, 17, 67, 300])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
def test_matmul_forward_backward_match_torch(L, B, T, C, NH, OC, with_bias):
    rng = np.random.default_rng(3)
    inp, w = rnd(rng, B, T, C), rnd(rng, OC, C)
    bias = rnd(rng, OC) if with_bias else None
    out = np.empty((B, T, OC), np.float32)
    L.matmul_forward(out, inp, w, bias)
    tx, tw = t64(inp, True), t64(w, True)
    tbias = t64(bias, True) if with_bias else None
    ref = F.linear(tx, tw, tbias)
    check("matmul out", out, ref, TOL_REDUCTION)

    dout = rnd(rng, B, T, OC)
    dinp0, dw0 = rnd(rng, B, T, C), rnd(rng, OC, C)
    dinp, dw = dinp0.copy(), dw0.copy()
    db0 = rnd(rng, OC) if with_bias else None
    db = db0.copy() if with_bias else None
    L.matmul_backward(dinp, dw, db, dout, inp, w)
    ref.backward(t64(dout))
    check("matmul dinp", dinp, dinp0 + tx.grad.numpy(), TOL_REDUCTION)
    check("matmul dweight", dw, dw0 + tw.grad.numpy(), TOL_REDUCTION)
    if with_bias:
        check("matmul dbias", db, db0 + tbias.grad.numpy(), TOL_REDUCTION)


# ---------------------------------------------------------------------------- attention

def torch_attention(qkv: torch.Tensor, NH: int) -> tuple[torch.Tensor, torch.Tensor]:
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (z.view(B, T, NH, C // NH).transpose(1, 2) for z in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) / np.sqrt(C // NH)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    return y, att


@pytest.mark.parametrize("B,T,C,NH", SHAPES, ids=SHAPE_IDS)
def test_attention_forward_backward_match_torch(L, B, T, C, NH):
    rng = np.random.default_rng(4)
    inp = rnd(rng, B, T, 3 * C)
    out, att = np.empty((B, T, C), np.float32), np.empty((B, NH, T, T), np.float32)
    L.attention_forward(out, att, inp, NH)
    tx = t64(inp, True)
    ref_out, ref_att = torch_attention(tx, NH)
    check("attention out", out, ref_out, TOL_REDUCTION)
    check("attention att", att, ref_att, TOL_REDUCTION)
    assert np.all(att[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0.0)

    dout = rnd(rng, B, T, C)
    dinp0 = rnd(rng, B, T, 3 * C)
    dinp = dinp0.copy()
    L.attention_backward(dinp, dout, inp, att, NH)
    ref_out.backward(t64(dout))
    check("attention dinp", dinp - dinp0, tx.grad, TOL_REDUCTION)


# ---------------------------------------------------------------------------- gelu, residual

@pytest.mark.parametrize("shape", [(1,), (7,), (2, 7, 13), (3, 5, 4 * 66)])
def test_gelu_forward_backward_match_torch(L, shape):
    rng = np.random.default_rng(5)
    inp = rnd(rng, *shape, scale=3.0)
    out = np.empty(shape, np.float32)
    L.gelu_forward(out, inp)
    tx = t64(inp, True)
    ref = F.gelu(tx, approximate="tanh")
    check("gelu out", out, ref, TOL_GELU)
    dout = rnd(rng, *shape)
    dinp0 = rnd(rng, *shape)
    dinp = dinp0.copy()
    L.gelu_backward(dinp, inp, dout)
    ref.backward(t64(dout))
    check("gelu dinp", dinp - dinp0, tx.grad, TOL_GELU)


@pytest.mark.parametrize("shape", [(1,), (2, 7, 13), (1, 17, 130)])
def test_residual_forward_backward_match_torch(L, shape):
    rng = np.random.default_rng(6)
    a, b = rnd(rng, *shape), rnd(rng, *shape)
    out = np.empty(shape, np.float32)
    L.residual_forward(out, a, b)
    ta, tb = t64(a, True), t64(b, True)
    ref = ta + tb
    check("residual out", out, ref, TOL_ELEMENTWISE)
    dout = rnd(rng, *shape)
    da0, db0 = rnd(rng, *shape), rnd(rng, *shape)
    da, db = da0.copy(), db0.copy()
    L.residual_backward(da, db, dout)
    ref.backward(t64(dout))
    check("residual dinp1", da, da0 + ta.grad.numpy(), TOL_ELEMENTWISE)
    check("residual dinp2", db, db0 + tb.grad.numpy(), TOL_ELEMENTWISE)


# ---------------------------------------------------------------------------- softmax + cross-entropy

@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("B,T,V,Vp", [(1, 1, 13, 13), (2, 7, 13, 16), (3, 5, 1000, 1024), (1, 3, 50257, 50304)])
def test_crossentropy_softmax_forward_backward_match_torch(L, B, T, V, Vp, masked):
    rng = np.random.default_rng(7)
    logits = rnd(rng, B, T, Vp, scale=4.0)
    logits[..., V:] = 1e4  # padded columns must be ignored
    targets = rng.integers(0, V, (B, T)).astype(np.int32)
    if masked:  # target -1: not supervised, loss 0 and no gradient (torch's ignore_index=-1)
        targets.reshape(-1)[::2] = -1
    losses, probs = np.empty((B, T), np.float32), np.empty((B, T, Vp), np.float32)
    L.crossentropy_softmax_forward(losses, probs, logits, targets, V)
    tl = t64(logits[..., :V], True)
    ref_probs = torch.softmax(tl, -1)
    ref_losses = F.cross_entropy(tl.reshape(-1, V), torch.from_numpy(targets).long().reshape(-1),
                                 reduction="none", ignore_index=-1).reshape(B, T)
    check("crossentropy losses", losses, ref_losses, TOL_REDUCTION)
    check("crossentropy probs", probs[..., :V], ref_probs, TOL_REDUCTION)
    assert np.all(probs[..., V:] == 0.0)

    dlosses = rnd(rng, B, T)
    dlogits0 = rnd(rng, B, T, Vp)
    dlogits = dlogits0.copy()
    L.crossentropy_softmax_backward(dlogits, dlosses, probs, targets, V)
    ref_losses.backward(t64(dlosses))
    check("crossentropy dlogits", dlogits[..., :V] - dlogits0[..., :V], tl.grad, TOL_REDUCTION)
    assert np.array_equal(dlogits[..., V:], dlogits0[..., V:])


# ---------------------------------------------------------------------------- AdamW

@pytest.mark.parametrize("n,weight_decay,grad_scale", [(1, 0.0, 1.0), (13, 0.1, 1.0), (1000, 0.1, 0.37)])
def test_adamw_update_matches_torch_adamw(L, n, weight_decay, grad_scale):
    rng = np.random.default_rng(8)
    params = rnd(rng, n)
    m, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    tp = torch.tensor(params.copy(), requires_grad=True)
    opt = torch.optim.AdamW([tp], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=weight_decay, foreach=False)
    for t in range(1, 6):
        grads = rnd(rng, n)
        L.adamw_update(params, grads, m, v, lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8,
                       weight_decay=weight_decay, t=t, grad_scale=grad_scale)
        tp.grad = torch.tensor(grads) * np.float32(grad_scale)
        opt.step()
        check(f"adamw params step {t}", params, tp.detach().double(), TOL_ADAMW)
    state = opt.state[tp]
    check("adamw m", m, state["exp_avg"].double(), TOL_ADAMW)
    check("adamw v", v, state["exp_avg_sq"].double(), TOL_ADAMW)


# ---------------------------------------------------------------------------- argument checks

def test_outputs_are_written_in_place_without_copies(L):
    rng = np.random.default_rng(9)
    big = np.zeros(1000, np.float32)
    a, b = rnd(rng, 2, 7, 13), rnd(rng, 2, 7, 13)
    out = big[100:100 + a.size].reshape(a.shape)  # a contiguous view into a larger buffer
    L.residual_forward(out, a, b)
    assert np.array_equal(big[100:100 + a.size], (a + b).ravel())
    assert np.all(big[:100] == 0) and np.all(big[100 + a.size:] == 0)


def test_wrong_dtype_raises_type_error(L):
    a = np.ones((2, 3, 4), np.float64)
    with pytest.raises(TypeError, match="inp1: expected dtype float32"):
        L.residual_forward(np.empty((2, 3, 4), np.float32), a, a.astype(np.float32))
    with pytest.raises(TypeError, match="inp"):
        L.encoder_forward(np.empty((1, 2, 4), np.float32), np.zeros((1, 2), np.int64),
                          np.zeros((5, 4), np.float32), np.zeros((5, 4), np.float32))
    with pytest.raises(TypeError, match="numpy array"):
        L.gelu_forward(np.empty(3, np.float32), [1.0, 2.0, 3.0])


def test_non_contiguous_raises_value_error(L):
    inp = np.ones((2, 3, 8), np.float32)[:, :, ::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        L.gelu_forward(np.empty((2, 3, 4), np.float32), inp)


def test_shape_mismatches_raise_value_error(L):
    inp = np.ones((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match=r"out: expected shape \(2, 3, 5\)"):
        L.matmul_forward(np.empty((2, 3, 4), np.float32), inp, np.ones((5, 4), np.float32))
    with pytest.raises(ValueError, match="weight: expected shape"):
        L.matmul_forward(np.empty((2, 3, 5), np.float32), inp, np.ones((5, 3), np.float32))
    with pytest.raises(ValueError, match="NH=3 does not divide C=4"):
        L.attention_forward(np.empty((2, 3, 4), np.float32), np.empty((2, 3, 3, 3), np.float32),
                            np.ones((2, 3, 12), np.float32), 3)
    with pytest.raises(ValueError, match="wpe: expected shape"):
        L.encoder_forward(np.empty((1, 6, 4), np.float32), np.zeros((1, 6), np.int32),
                          np.zeros((5, 4), np.float32), np.zeros((5, 4), np.float32))


def test_out_of_range_token_ids_raise_value_error(L):
    with pytest.raises(ValueError, match=r"inp: id 5 at flat position 1 is outside \[0, 5\)"):
        L.encoder_forward(np.empty((1, 2, 4), np.float32), np.array([[0, 5]], np.int32),
                          np.zeros((5, 4), np.float32), np.zeros((5, 4), np.float32))
    with pytest.raises(ValueError, match=r"targets: id -2 at flat position 1 is outside \[-1, 7\)"):
        L.crossentropy_softmax_forward(np.empty((1, 2), np.float32), np.empty((1, 2, 8), np.float32),
                                       np.zeros((1, 2, 8), np.float32), np.array([[0, -2]], np.int32), 7)
    with pytest.raises(ValueError, match="targets: id 7"):
        L.crossentropy_softmax_backward(np.zeros((1, 1, 8), np.float32), np.zeros((1, 1), np.float32),
                                        np.zeros((1, 1, 8), np.float32), np.array([[7]], np.int32), 7)


def test_read_only_output_raises_value_error(L):
    out = np.empty(4, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out: array is read-only"):
        L.gelu_forward(out, np.ones(4, np.float32))


def test_adamw_rejects_bad_step_and_betas(L):
    p = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="t must be"):
        L.adamw_update(p, p.copy(), np.zeros(3, np.float32), np.zeros(3, np.float32), lr=1e-3, t=0)
    with pytest.raises(ValueError, match="betas"):
        L.adamw_update(p, p.copy(), np.zeros(3, np.float32), np.zeros(3, np.float32), lr=1e-3, beta1=1.0)
