"""train_gpt2.c's layers on numpy arrays, without copies.

Every function takes C-contiguous float32 (and int32 token id) arrays and passes pointers into them
straight to the C function of the same name. Outputs are arguments too (the caller owns the memory),
exactly as in C; the sizes B, T, C, OC, NH come from the shapes. Before any C call, dtypes,
contiguity, writability, shapes and token ids are checked: a mismatch raises TypeError or ValueError
instead of reading or writing out of bounds.

Forward functions overwrite their outputs. Backward functions ACCUMULATE (+=) into every gradient
they write, like the C code (the model zeroes its gradients once per step): pass zeroed arrays to
get the plain gradient.

Shapes (B batch, T time, C channels, OC output channels, NH heads, Vp padded vocab):
    encoder      inp (B,T) int32, wte (Vp,C), wpe (maxT,C) -> out (B,T,C)
    layernorm    inp (B,T,C), weight, bias (C) -> out (B,T,C), mean, rstd (B,T)
    matmul       inp (B,T,C), weight (OC,C), bias (OC) or None -> out (B,T,OC)
    attention    inp (B,T,3C) = q,k,v -> out (B,T,C), att (B,NH,T,T)
    gelu         inp (any) -> out (same shape)
    residual     inp1, inp2 (any, same) -> out
    crossentropy_softmax  logits (B,T,Vp), targets (B,T) int32 in [-1,V) -> losses (B,T), probs (B,T,Vp)
    adamw_update params, grads, m, v (any, same shape), in place
"""

from __future__ import annotations

import numpy as np

from pyllmc._core import check_array, check_dims, check_ids, ffi, fptr, iptr, lib

__all__ = [
    "encoder_forward", "encoder_backward", "layernorm_forward", "layernorm_backward",
    "matmul_forward", "matmul_backward", "attention_forward", "attention_backward",
    "gelu_forward", "gelu_backward", "residual_forward", "residual_backward",
    "crossentropy_softmax_forward", "crossentropy_softmax_backward", "adamw_update",
]


def _shape3(name: str, a: np.ndarray, dtype: type = np.float32) -> tuple[int, int, int]:
    check_array(name, a, dtype)
    if a.ndim != 3:
        raise ValueError(f"{name}: expected a 3-D array (B, T, C), got shape {a.shape}")
    B, T, C = (int(x) for x in a.shape)
    check_dims(B=B, T=T, C=C, BT=B * T)
    return B, T, C


def _bt(name: str, a: np.ndarray) -> tuple[int, int]:
    check_array(name, a, np.int32)
    if a.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D int32 array (B, T), got shape {a.shape}")
    B, T = (int(x) for x in a.shape)
    check_dims(B=B, T=T, BT=B * T)
    return B, T


def _table(name: str, a: np.ndarray, C: int, min_rows: int) -> int:
    check_array(name, a, np.float32)
    if a.ndim != 2 or a.shape[1] != C or a.shape[0] < min_rows:
        raise ValueError(f"{name}: expected shape (rows >= {min_rows}, {C}), got {a.shape}")
    return int(a.shape[0])


# ---------------------------------------------------------------------------- encoder

def encoder_forward(out: np.ndarray, inp: np.ndarray, wte: np.ndarray, wpe: np.ndarray) -> None:
    """out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]."""
    B, T = _bt("inp", inp)
    check_array("wte", wte, np.float32)
    if wte.ndim != 2:
        raise ValueError(f"wte: expected a 2-D array (Vp, C), got shape {wte.shape}")
    C = int(wte.shape[1])
    check_dims(C=C)
    Vp = _table("wte", wte, C, 1)
    _table("wpe", wpe, C, T)
    check_ids("inp", inp, Vp)
    lib.encoder_forward(fptr("out", out, (B, T, C), True), iptr("inp", inp), fptr("wte", wte), fptr("wpe", wpe), B, T, C)


def encoder_backward(dwte: np.ndarray, dwpe: np.ndarray, dout: np.ndarray, inp: np.ndarray) -> None:
    """dwte[inp[b,t]] += dout[b,t]; dwpe[t] += dout[b,t]."""
    B, T, C = _shape3("dout", dout)
    _bt("inp", inp)
    if inp.shape != (B, T):
        raise ValueError(f"inp: expected shape {(B, T)}, got {inp.shape}")
    Vp = _table("dwte", dwte, C, 1)
    _table("dwpe", dwpe, C, T)
    check_ids("inp", inp, Vp)
    lib.encoder_backward(fptr("dwte", dwte, None, True), fptr("dwpe", dwpe, None, True), fptr("dout", dout),
                         iptr("inp", inp), B, T, C)


# ---------------------------------------------------------------------------- layernorm

def layernorm_forward(out: np.ndarray, mean: np.ndarray, rstd: np.ndarray, inp: np.ndarray,
                      weight: np.ndarray, bias: np.ndarray) -> None:
    """out = (inp - mean) * rstd * weight + bias over the last axis; keeps mean and rstd for backward."""
    B, T, C = _shape3("inp", inp)
    lib.layernorm_forward(fptr("out", out, (B, T, C), True), fptr("mean", mean, (B, T), True),
                          fptr("rstd", rstd, (B, T), True), fptr("inp", inp), fptr("weight", weight, (C,)),
                          fptr("bias", bias, (C,)), B, T, C)


def layernorm_backward(dinp: np.ndarray, dweight: np.ndarray, dbias: np.ndarray, dout: np.ndarray,
                       inp: np.ndarray, weight: np.ndarray, mean: np.ndarray, rstd: np.ndarray) -> None:
    """Accumulates dinp (B,T,C), dweight and dbias (C)."""
    B, T, C = _shape3("inp", inp)
    lib.layernorm_backward(fptr("dinp", dinp, (B, T, C), True), fptr("dweight", dweight, (C,), True),
                           fptr("dbias", dbias, (C,), True), fptr("dout", dout, (B, T, C)), fptr("inp", inp),
                           fptr("weight", weight, (C,)), fptr("mean", mean, (B, T)), fptr("rstd", rstd, (B, T)),
                           B, T, C)


# ---------------------------------------------------------------------------- matmul

def _weight(name: str, w: np.ndarray, C: int) -> int:
    check_array(name, w, np.float32)
    if w.ndim != 2 or w.shape[1] != C:
        raise ValueError(f"{name}: expected shape (OC, {C}), got {w.shape}")
    OC = int(w.shape[0])
    check_dims(OC=OC)
    return OC


def matmul_forward(out: np.ndarray, inp: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> None:
    """out[b,t,o] = bias[o] + sum_c inp[b,t,c] * weight[o,c]."""
    B, T, C = _shape3("inp", inp)
    OC = _weight("weight", weight, C)
    bias_ptr = ffi.NULL if bias is None else fptr("bias", bias, (OC,))
    lib.matmul_forward(fptr("out", out, (B, T, OC), True), fptr("inp", inp), fptr("weight", weight), bias_ptr,
                       B, T, C, OC)


def matmul_backward(dinp: np.ndarray, dweight: np.ndarray, dbias: np.ndarray | None, dout: np.ndarray,
                    inp: np.ndarray, weight: np.ndarray) -> None:
    """Accumulates dinp (B,T,C), dweight (OC,C) and dbias (OC) (None: no bias)."""
    B, T, C = _shape3("inp", inp)
    OC = _weight("weight", weight, C)
    dbias_ptr = ffi.NULL if dbias is None else fptr("dbias", dbias, (OC,), True)
    lib.matmul_backward(fptr("dinp", dinp, (B, T, C), True), fptr("dweight", dweight, (OC, C), True), dbias_ptr,
                        fptr("dout", dout, (B, T, OC)), fptr("inp", inp), fptr("weight", weight), B, T, C, OC)


# ---------------------------------------------------------------------------- attention

def _attention_dims(inp: np.ndarray, NH: int) -> tuple[int, int, int]:
    B, T, C3 = _shape3("inp", inp)
    check_dims(NH=NH)
    if C3 % 3 != 0:
        raise ValueError(f"inp: last dimension {C3} is not 3*C (query, key, value)")
    C = C3 // 3
    if C % NH != 0:
        raise ValueError(f"NH={NH} does not divide C={C}")
    return B, T, C


def attention_forward(out: np.ndarray, att: np.ndarray, inp: np.ndarray, NH: int) -> None:
    """Causal multi-head attention of inp (B,T,3C); att (B,NH,T,T) keeps the softmax for backward."""
    B, T, C = _attention_dims(inp, NH)
    lib.attention_forward(fptr("out", out, (B, T, C), True), fptr("att", att, (B, NH, T, T), True),
                          fptr("inp", inp), B, T, C, NH)


def attention_backward(dinp: np.ndarray, dout: np.ndarray, inp: np.ndarray, att: np.ndarray, NH: int) -> None:
    """Accumulates dinp (B,T,3C)."""
    B, T, C = _attention_dims(inp, NH)
    lib.attention_backward(fptr("dinp", dinp, (B, T, 3 * C), True), fptr("dout", dout, (B, T, C)),
                           fptr("inp", inp), fptr("att", att, (B, NH, T, T)), B, T, C, NH)


# ---------------------------------------------------------------------------- elementwise

def _n(name: str, a: np.ndarray) -> int:
    check_array(name, a, np.float32)
    check_dims(N=int(a.size))
    return int(a.size)


def gelu_forward(out: np.ndarray, inp: np.ndarray) -> None:
    """out = gelu(inp), tanh approximation."""
    n = _n("inp", inp)
    lib.gelu_forward(fptr("out", out, inp.shape, True), fptr("inp", inp), n)


def gelu_backward(dinp: np.ndarray, inp: np.ndarray, dout: np.ndarray) -> None:
    """Accumulates dinp += gelu'(inp) * dout."""
    n = _n("inp", inp)
    lib.gelu_backward(fptr("dinp", dinp, inp.shape, True), fptr("inp", inp), fptr("dout", dout, inp.shape), n)


def residual_forward(out: np.ndarray, inp1: np.ndarray, inp2: np.ndarray) -> None:
    """out = inp1 + inp2."""
    n = _n("inp1", inp1)
    lib.residual_forward(fptr("out", out, inp1.shape, True), fptr("inp1", inp1), fptr("inp2", inp2, inp1.shape), n)


def residual_backward(dinp1: np.ndarray, dinp2: np.ndarray, dout: np.ndarray) -> None:
    """Accumulates dinp1 += dout and dinp2 += dout."""
    n = _n("dout", dout)
    lib.residual_backward(fptr("dinp1", dinp1, dout.shape, True), fptr("dinp2", dinp2, dout.shape, True),
                          fptr("dout", dout), n)


# ---------------------------------------------------------------------------- softmax + cross-entropy

def _crossentropy_dims(logits_name: str, logits: np.ndarray, targets: np.ndarray,
                       V: int | None) -> tuple[int, int, int, int]:
    B, T, Vp = _shape3(logits_name, logits)
    V = Vp if V is None else V
    check_dims(V=V)
    if V > Vp:
        raise ValueError(f"V={V} is larger than the logits' last dimension Vp={Vp}")
    check_array("targets", targets, np.int32, (B, T))
    check_ids("targets", targets, V, lower=-1)  # -1: not supervised (loss 0, no gradient)
    return B, T, V, Vp


def crossentropy_softmax_forward(losses: np.ndarray, probs: np.ndarray, logits: np.ndarray, targets: np.ndarray,
                                 V: int | None = None) -> None:
    """probs = softmax over the first V logits (columns V..Vp-1 get 0); losses = -log probs[target]."""
    B, T, V, Vp = _crossentropy_dims("logits", logits, targets, V)
    lib.crossentropy_softmax_forward(fptr("losses", losses, (B, T), True), fptr("probs", probs, (B, T, Vp), True),
                                     fptr("logits", logits), iptr("targets", targets), B, T, V, Vp)


def crossentropy_softmax_backward(dlogits: np.ndarray, dlosses: np.ndarray, probs: np.ndarray,
                                  targets: np.ndarray, V: int | None = None) -> None:
    """Accumulates dlogits += (probs - onehot(targets)) * dlosses over the first V columns."""
    B, T, V, Vp = _crossentropy_dims("probs", probs, targets, V)
    lib.crossentropy_softmax_backward(fptr("dlogits", dlogits, (B, T, Vp), True), fptr("dlosses", dlosses, (B, T)),
                                      fptr("probs", probs), iptr("targets", targets), B, T, V, Vp)


# ---------------------------------------------------------------------------- optimizer

def adamw_update(params: np.ndarray, grads: np.ndarray, m: np.ndarray, v: np.ndarray, lr: float,
                 beta1: float = 0.9, beta2: float = 0.95, eps: float = 1e-8, weight_decay: float = 0.0,
                 t: int = 1, grad_scale: float = 1.0) -> None:
    """One AdamW step in place (PyTorch semantics; t is the 1-based step; grads are multiplied by grad_scale)."""
    n = _n("params", params)
    if not isinstance(t, (int, np.integer)) or not 1 <= int(t) <= 2**31 - 1:
        raise ValueError(f"t must be a step number >= 1, got {t!r}")
    for name, val in (("lr", lr), ("beta1", beta1), ("beta2", beta2), ("eps", eps),
                      ("weight_decay", weight_decay), ("grad_scale", grad_scale)):
        if not np.isfinite(val):
            raise ValueError(f"{name} must be finite, got {val!r}")
    if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
        raise ValueError(f"betas must be in [0, 1), got ({beta1}, {beta2})")
    lib.pyllmc_adamw_update(fptr("params", params, None, True), fptr("grads", grads, params.shape),
                            fptr("m", m, params.shape, True), fptr("v", v, params.shape, True), n,
                            float(lr), float(beta1), float(beta2), float(eps), float(weight_decay),
                            float(grad_scale), int(t))
