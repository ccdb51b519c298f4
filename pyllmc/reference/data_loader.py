"""
The references' data loader: token shards read in order, split across the ranks of a distributed run as the C
loader splits them (llmc/dataloader.h).
"""

from __future__ import annotations

import glob

import numpy as np
import torch

from pyllmc.families.gpt2 import VOCAB_SIZE as GPT2_VOCAB
from pyllmc.reference.common import UserError
from pyllmc.token_shards import read_datafile


class DistributedDataLoader:
    """Token shards read in order; rank r of n takes the r-th B*T slice of every n*B*T window (as the C loader)."""

    def __init__(self, pattern: str, B: int, T: int, rank: int, nproc: int, vocab_size: int = GPT2_VOCAB):
        self.files = sorted(glob.glob(pattern))
        if not self.files:
            raise UserError(f"no token shards match {pattern!r} (run python dev/data/tinyshakespeare.py to make some)")
        self.B, self.T, self.rank, self.nproc, self.vocab_size = B, T, rank, nproc, vocab_size
        self.reset()

    def _load(self, shard: int) -> None:
        self.shard = shard
        self.tokens = read_datafile(self.files[shard], self.vocab_size)
        if len(self.tokens) < self.nproc * self.B * self.T + 1:
            raise UserError(f"{self.files[shard]}: {len(self.tokens)} tokens, too few for one batch of "
                            f"{self.nproc} x {self.B} x {self.T} + 1")
        self.base = 0

    def reset(self) -> None:
        self._load(0)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        B, T = self.B, self.T
        start = self.base + self.rank * B * T
        buf = torch.from_numpy(np.asarray(self.tokens[start : start + B * T + 1], dtype=np.int64))
        self.base += self.nproc * B * T
        if self.base + self.nproc * B * T + 1 > len(self.tokens):
            self._load((self.shard + 1) % len(self.files))
        return buf[:-1].view(B, T), buf[1:].view(B, T)
