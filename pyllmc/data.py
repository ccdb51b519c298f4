"""llmc's token-shard DataLoader, Tokenizer and learning-rate schedules, through the C headers.

DataLoader reads exactly like ./train_gpt2 (llmc/dataloader.h): with n processes, rank r takes the
r-th B*T slice of every n*B*T window, so 2 ranks with B=2 see the tokens 1 rank with B=4 sees.
inputs and targets are int32 (B, T) numpy views into the loader's C buffers (overwritten by
next_batch()). Chat shards (pyllmc.token_shards.write_chat_datafile) read with their loss mask: masked is True
and targets are -1 where the next token is not supervised and at every row's last position.
"""

from __future__ import annotations

import glob
import os
import weakref
from pathlib import Path

import numpy as np

from pyllmc._core import check_dims, check_rc, ffi, int_view, lib

LR_SCHEDULES = ("cosine", "linear", "constant", "wsd")


class DataLoader:
    def __init__(self, pattern: str, B: int, T: int, rank: int = 0, nproc: int = 1, shuffle: bool = False,
                 vocab_size: int = 50257):
        check_dims(B=B, T=T, nproc=nproc)
        if not 0 <= rank < nproc:
            raise ValueError(f"rank {rank} is outside [0, {nproc})")
        if not glob.glob(str(pattern)):
            raise FileNotFoundError(f"{pattern}: no token shards match this pattern")
        out = ffi.new("DataLoader**")
        rc = lib.pyllmc_dataloader_new(out, os.fsencode(str(pattern)), B, T, rank, nproc, int(shuffle), vocab_size)
        if rc != 0:
            lib.pyllmc_dataloader_discard(out[0])
            check_rc(rc)
        self._c = out[0]
        self._finalizer = weakref.finalize(self, lib.pyllmc_dataloader_free, self._c)
        self.B, self.T = B, T
        self.num_tokens = int(self._c.num_tokens)
        self.masked = bool(self._c.masked)  # chat shards: targets -1 where not supervised
        self.inputs = int_view(self._c.inputs, B * T, (B, T))
        self.targets = int_view(self._c.targets, B * T, (B, T))

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """Loads the next batch; returns the (inputs, targets) views."""
        check_rc(lib.pyllmc_dataloader_next_batch(self._c))
        return self.inputs, self.targets

    def reset(self) -> None:
        check_rc(lib.pyllmc_dataloader_reset(self._c))


class Tokenizer:
    """gpt2_tokenizer.bin (written by train_gpt2.py); a missing file leaves decoding unavailable."""

    def __init__(self, path: str | os.PathLike = "gpt2_tokenizer.bin"):
        out = ffi.new("Tokenizer**")
        rc = lib.pyllmc_tokenizer_new(out, os.fsencode(path))
        if rc != 0:
            lib.pyllmc_tokenizer_free(out[0])  # init_ok is 0 here: frees the struct only
            check_rc(rc)
        self._c = out[0]
        self._finalizer = weakref.finalize(self, lib.pyllmc_tokenizer_free, self._c)
        self.path = Path(path)
        self.ok = bool(self._c.init_ok)
        self.eot_token = int(self._c.eot_token) if self.ok else 50256

    def decode(self, tokens: list[int] | np.ndarray) -> str:
        """Text of the tokens (ids shown as <id> when the tokenizer file was missing or an id is unknown)."""
        if not self.ok:
            return " ".join(f"<{int(t)}>" for t in tokens)
        pieces = []
        for t in tokens:
            ptr = lib.tokenizer_decode(self._c, int(t)) if 0 <= int(t) < 2**32 else ffi.NULL
            if ptr == ffi.NULL:
                pieces.append(f"<{int(t)}>".encode())
            else:
                pieces.append(ffi.buffer(ptr, lib.tokenizer_decode_length(self._c, int(t)))[:])
        return b"".join(pieces).decode("utf-8", errors="replace")


class LRScheduler:
    """llmc/schedulers.h: cosine | linear | constant | wsd, as ./train_gpt2 -k."""

    def __init__(self, kind: str, lr: float, warmup: int, total_steps: int, final_frac: float):
        if kind not in LR_SCHEDULES:
            raise ValueError(f"unknown learning rate schedule {kind!r} (valid: {', '.join(LR_SCHEDULES)})")
        out = ffi.new("LearningRateScheduler**")
        check_rc(lib.pyllmc_lr_scheduler_new(out, kind.encode(), float(lr), int(warmup), int(total_steps),
                                             float(final_frac)))
        self._c = out[0]
        self._finalizer = weakref.finalize(self, lib.pyllmc_lr_scheduler_free, self._c)

    def __call__(self, step: int) -> float:
        return float(lib.get_learning_rate(self._c, int(step)))
