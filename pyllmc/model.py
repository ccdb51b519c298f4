"""GPT2: train_gpt2.c's model driven from Python (forward, backward, AdamW, sampling, checkpoints).

    model = GPT2.from_checkpoint("gpt2_124M.bin")        # or GPT2.from_scratch("d12", seed=42)
    logits, loss = model.forward(x, y)                    # x, y: (B, T) token ids
    model.zero_grad(); model.backward(); model.step(lr=3e-4)
    model.params["wte"], model.grads["qkvw"]              # numpy views into the C buffers (no copies)

Parameters, gradients and AdamW moments live in C memory owned by the model; the numpy views keep
the model alive. Input is validated here first; anything the C core still rejects raises LlmcError.
"""

from __future__ import annotations

import math
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyllmc.families.gpt2 import GPT2_FIELDS, read_gpt2_header
from pyllmc._core import INT_MAX, LlmcError, check_ids, check_rc, ffi, lib

# the parameter table of llmc/gpt2.h, checkpoint order
PARAMETER_NAMES = tuple(ffi.string(lib.GPT2_PARAMETER_NAMES[i]).decode() for i in range(lib.GPT2_NUM_PARAMETER_TENSORS))


@dataclass(frozen=True)
class GPT2Config:
    """The model's shapes (the checkpoint header's fields)."""
    max_seq_len: int = 1024
    vocab_size: int = 50257
    padded_vocab_size: int = 50304
    num_layers: int = 12
    num_heads: int = 12
    channels: int = 768

    @classmethod
    def from_descriptor(cls, desc: str) -> GPT2Config:
        """dN / gpt2:dN / gpt3:cN, exactly as `./train_gpt2 -e` reads them (llmc/gpt2.h)."""
        cfg = ffi.new("GPT2Config*")
        why = ffi.new("char[256]")
        kind = lib.pyllmc_config_from_descriptor(str(desc).encode(), cfg, why, 256)
        if kind != 1:
            reason = ffi.string(why).decode() if kind < 0 else "expected dN, gpt2:dN or gpt3:cN"
            raise ValueError(f"model descriptor {desc!r}: {reason}")
        return cls._from_c(cfg[0])

    @classmethod
    def _from_c(cls, c: Any) -> GPT2Config:
        return cls(c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels)

    def validate(self) -> None:
        # the checkpoint header's limits (model_file.py, llmc/checkpoint.h), under this class's field names
        fields = {"max_seq_len": "maxT", "vocab_size": "V", "padded_vocab_size": "Vp", "num_layers": "L",
                  "num_heads": "NH", "channels": "C"}
        for name, header_field in fields.items():
            hi = GPT2_FIELDS[header_field][2]
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not 1 <= v <= hi:
                raise ValueError(f"GPT2Config.{name} = {v!r} is outside [1, {hi}]")
        if self.padded_vocab_size < self.vocab_size:
            raise ValueError(f"GPT2Config: padded_vocab_size {self.padded_vocab_size} < vocab_size {self.vocab_size}")
        if self.channels % self.num_heads != 0:
            raise ValueError(f"GPT2Config: channels {self.channels} is not a multiple of num_heads {self.num_heads}")

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of each of the 16 parameter tensors, checkpoint order, from the C table:
        (L,) for the per-layer tensors, then rows, then cols for the 2-D ones."""
        cfg = ffi.new("GPT2Config*", (self.max_seq_len, self.vocab_size, self.padded_vocab_size,
                                      self.num_layers, self.num_heads, self.channels))
        dims = ffi.new("size_t[16][3]")
        lib.gpt2_parameter_dims(dims, cfg)
        shapes = {}
        for i, name in enumerate(PARAMETER_NAMES):
            layers, rows, cols = dims[i]
            shape = (layers,) if lib.GPT2_PARAMETER_PER_LAYER[i] else ()
            shapes[name] = shape + ((rows, cols) if lib.GPT2_PARAMETER_IS_MATRIX[i] else (rows,))
        return shapes

    def num_parameters(self) -> int:
        return sum(math.prod(s) for s in self.parameter_shapes().values())


class _CArray:
    """Exposes C memory to numpy through __array_interface__ and keeps its owner alive."""

    def __init__(self, owner: Any, ptr: Any, shape: tuple[int, ...], typestr: str, readonly: bool = False):
        self.owner = owner
        self.__array_interface__ = {"data": (int(ffi.cast("uintptr_t", ptr)), readonly), "shape": shape,
                                    "typestr": typestr, "version": 3}


def read_checkpoint_header(path: str | os.PathLike) -> tuple[GPT2Config, int]:
    """Validates a model checkpoint's header and size in Python (model_file.py): (config, version). Raises
    FileNotFoundError / ValueError naming the file instead of letting the C loader exit."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model checkpoint")
    h = read_gpt2_header(path)
    return GPT2Config(max_seq_len=h.maxT, vocab_size=h.V, padded_vocab_size=h.Vp, num_layers=h.L, num_heads=h.NH,
                      channels=h.C), h.version


def _token_array(name: str, a: Any, V: int, maxT: int) -> np.ndarray:
    """(B, T) int32 C-contiguous token ids in [0, V); a 1-D sequence is taken as B = 1. Copies only
    when the input is not already int32 and contiguous."""
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer token ids, got dtype {arr.dtype}")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name}: expected a non-empty (B, T) array of token ids, got shape {arr.shape}")
    if arr.shape[1] > maxT:
        raise ValueError(f"{name}: T = {arr.shape[1]} is longer than the model's max sequence length {maxT}")
    if arr.size > INT_MAX // 64:
        raise ValueError(f"{name}: too many tokens ({arr.size})")
    check_ids(name, arr, V)
    return np.ascontiguousarray(arr, dtype=np.int32)


class GPT2:
    """GPT-2 on the C core. Build with GPT2.from_checkpoint(path) or GPT2.from_scratch(config, seed)."""

    def __init__(self, _c_model: Any = None):
        if _c_model is None:
            raise TypeError("use GPT2.from_checkpoint(path) or GPT2.from_scratch(config, seed)")
        self._c = _c_model
        self.config = GPT2Config._from_c(self._c.config)
        self.t = 0  # optimizer steps taken
        self._finalizer = weakref.finalize(self, lib.pyllmc_model_free, self._c)
        n = int(self._c.cpu.num_parameters)
        if n != self.config.num_parameters():
            raise LlmcError(f"internal: C model has {n} parameters, the config says {self.config.num_parameters()}")
        self.params_flat: np.ndarray = np.asarray(_CArray(self, self._c.cpu.params_memory, (n,), "<f4"))
        self.grads_flat: np.ndarray = np.asarray(_CArray(self, self._c.cpu.grads_memory, (n,), "<f4"))
        self.params: dict[str, np.ndarray] = self._named(self.params_flat)
        self.grads: dict[str, np.ndarray] = self._named(self.grads_flat)

    def _named(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        views, offset = {}, 0
        for name, shape in self.config.parameter_shapes().items():
            size = math.prod(shape)
            views[name] = flat[offset:offset + size].reshape(shape)
            offset += size
        return views

    # ------------------------------------------------------------------------ construction

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike) -> GPT2:
        """Loads an llm.c-compatible checkpoint (fp32 version 3 or bf16 version 5)."""
        read_checkpoint_header(path)
        c = ffi.new("GPT2*")
        rc = lib.pyllmc_model_init_checkpoint(c, os.fsencode(path))
        if rc != 0:
            lib.pyllmc_model_discard(c)
            check_rc(rc)
        return cls(c)

    @classmethod
    def from_scratch(cls, config: str | GPT2Config = "d12", seed: int = 42) -> GPT2:
        """Random init exactly like train_gpt2.py (and ./train_gpt2 -e dN) with this seed."""
        cfg = GPT2Config.from_descriptor(config) if isinstance(config, str) else config
        if not isinstance(cfg, GPT2Config):
            raise TypeError(f"config: expected a descriptor like 'd12' or a GPT2Config, got {type(config).__name__}")
        cfg.validate()
        if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
            raise ValueError(f"seed must be an integer in [0, 2^32), got {seed!r}")
        c_cfg = ffi.new("GPT2Config*", [cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab_size, cfg.num_layers,
                                        cfg.num_heads, cfg.channels])
        c = ffi.new("GPT2*")
        rc = lib.pyllmc_model_init_scratch(c, c_cfg, int(seed))
        if rc != 0:
            lib.pyllmc_model_discard(c)
            check_rc(rc)
        return cls(c)

    @property
    def num_parameters(self) -> int:
        return int(self._c.cpu.num_parameters)

    def params_changed(self) -> None:
        """Call after writing self.params / self.params_flat in place when training in bf16 (set_precision): the
        bf16 copy of the weights the GEMMs read is then rounded again before the next forward."""
        lib.pyllmc_model_params_changed(self._c)

    # ------------------------------------------------------------------------ training

    def forward(self, idx: Any, targets: Any = None, return_logits: bool = True) -> tuple[np.ndarray | None, float | None]:
        """Forward pass on token ids idx (B, T). Returns (logits (B, T, V) as a new array, or None when
        return_logits is False; the mean cross-entropy loss, or None without targets)."""
        cfg = self.config
        x = _token_array("idx", idx, cfg.vocab_size, cfg.max_seq_len)
        B, T = x.shape
        y = None
        if targets is not None:
            y = _token_array("targets", targets, cfg.vocab_size, cfg.max_seq_len)
            if y.shape != x.shape:
                raise ValueError(f"targets: shape {y.shape} differs from idx's {x.shape}")
        check_rc(lib.pyllmc_model_ensure_activations(self._c, B, T))
        y_ptr = ffi.NULL if y is None else ffi.from_buffer("int[]", y)
        # a forward pass with targets keeps the logits only when asked (the classifier runs a chunk of rows at a time)
        self._c.cpu.keep_logits = 1 if return_logits else 0
        check_rc(lib.pyllmc_model_forward(self._c, ffi.from_buffer("int[]", x), y_ptr, B, T))
        loss = float(self._c.cpu.mean_loss) if y is not None else None
        logits = None
        if return_logits:
            Vp, V = cfg.padded_vocab_size, cfg.vocab_size
            full = np.frombuffer(ffi.buffer(self._c.cpu.logits, 4 * B * T * Vp), dtype=np.float32)
            logits = full.reshape(B, T, Vp)[:, :, :V].copy()
        return logits, loss

    def zero_grad(self) -> None:
        """Sets every gradient to zero (backward accumulates)."""
        lib.pyllmc_model_zero_grad(self._c)

    def backward(self, loss_scale: float = 1.0) -> None:
        """Backward pass of the last forward (which must have had targets). Gradients are ADDED to
        self.grads, like PyTorch's .backward(); loss_scale multiplies the loss (1/accumulation steps)."""
        if not self._c.cpu.mean_loss >= 0.0:
            raise RuntimeError("backward() needs a forward(idx, targets) with targets first "
                               "(a forward without targets or generate() came in between)")
        if not math.isfinite(loss_scale):
            raise ValueError(f"loss_scale must be finite, got {loss_scale!r}")
        check_rc(lib.pyllmc_model_backward(self._c, float(loss_scale)))

    def grad_norm(self) -> float:
        """Global L2 norm of the gradients (what step() clips)."""
        return float(lib.pyllmc_model_grad_norm(self._c))

    def step(self, lr: float, beta1: float = 0.9, beta2: float = 0.95, eps: float = 1e-8,
             weight_decay: float = 0.0, grad_clip: float = 1.0) -> float:
        """One AdamW step exactly as ./train_gpt2 does it: gradients clipped to global norm grad_clip
        (0 = off), PyTorch AdamW, weight decay on the 2-D weights only. Returns the gradient norm."""
        for name, val in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay), ("grad_clip", grad_clip)):
            if not (isinstance(val, (int, float, np.floating)) and math.isfinite(val) and val >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise ValueError(f"betas must be in [0, 1), got ({beta1}, {beta2})")
        check_rc(lib.pyllmc_model_ensure_optimizer(self._c))
        self.t += 1
        return float(lib.pyllmc_model_step(self._c, float(lr), float(beta1), float(beta2), float(eps),
                                           float(weight_decay), float(grad_clip), self.t))

    # ------------------------------------------------------------------------ inference and files

    def generate(self, tokens: Any, max_new_tokens: int, temperature: float = 1.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int = 1337) -> np.ndarray:
        """Samples max_new_tokens after the prompt `tokens` (1-D ids) with llmc/sampler.h:
        temperature 0 = argmax, top_k 0 = off, top_p 1 = off. Returns prompt + new tokens (int32).
        The context is the last max_seq_len tokens."""
        cfg = self.config
        prompt = np.asarray(tokens)
        if prompt.ndim != 1 or prompt.size == 0:
            raise ValueError(f"tokens: expected a non-empty 1-D sequence of token ids, got shape {prompt.shape}")
        prompt = _token_array("tokens", prompt, cfg.vocab_size, 2**31 - 1)[0]
        if not isinstance(max_new_tokens, (int, np.integer)) or not 0 <= max_new_tokens <= 10**7:
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        if not (math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0 (0 = argmax), got {temperature!r}")
        if not isinstance(top_k, (int, np.integer)) or top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {top_k!r}")
        if not (0.0 < top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {top_p!r}")
        if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
            raise ValueError(f"seed must be an integer in [0, 2^64), got {seed!r}")
        n_prompt = prompt.size
        out = np.empty(n_prompt + max_new_tokens, dtype=np.int32)
        out[:n_prompt] = prompt
        if max_new_tokens == 0:
            return out
        window = cfg.max_seq_len
        check_rc(lib.pyllmc_model_ensure_activations(self._c, 1, min(out.size - 1, window)))
        check_rc(lib.pyllmc_model_generate(self._c, ffi.from_buffer("int[]", out), n_prompt, out.size, window,
                                           float(temperature), int(top_k), float(top_p), int(seed)))
        return out

    def save(self, path: str | os.PathLike) -> None:
        """Writes an fp32 (version 3) checkpoint atomically (temporary file, fsync, rename)."""
        path = Path(path)
        if not path.parent.is_dir():
            raise FileNotFoundError(f"{path}: directory {path.parent} does not exist")
        check_rc(lib.pyllmc_model_save(self._c, os.fsencode(path)))

    def close(self) -> None:
        """Frees the C buffers now (views into them must not be used afterwards)."""
        self._finalizer()

    def __repr__(self) -> str:
        c = self.config
        return (f"GPT2(L={c.num_layers}, NH={c.num_heads}, C={c.channels}, maxT={c.max_seq_len}, "
                f"V={c.vocab_size}, Vp={c.padded_vocab_size}, {self.num_parameters} parameters)")


def set_precision(precision: str) -> None:
    """The GEMMs' precision for every model in this process, as ./train_gpt2 -p: "fp32", or "bf16" (inputs rounded
    to bf16, sums and master weights in fp32; on oneDNN where the build has it). This sets it unconditionally;
    pyllmc.train asks first whether bf16 pays on this CPU, as the C trainers do."""
    if lib.pyllmc_set_precision(str(precision).encode()) != 0:
        raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}")


def precision() -> str:
    """The GEMMs' precision now: "fp32" or "bf16"."""
    return ffi.string(lib.pyllmc_precision()).decode()

