"""
The references' data loader: token shards read in order, split across the ranks of a distributed run as the C
loader splits them (llmc/dataloader.h).

Chat shards (pyllmc/token_shards.py: tokens and a loss mask, conversations of T tokens) are read by the same loader
when every shard of the pattern is one (`masked`): a sample is n*B*T tokens, rank r of n reading B*T of them from
r*B*T; inputs are those tokens, targets[j] = tokens[j+1] where mask[j+1] == 1, else -1 (not supervised), and -1 at
the last position of every row (its next token starts another conversation). The shard's T must equal the loader's.
"""

from __future__ import annotations

import glob

import numpy as np
import torch

from pyllmc.families.gpt2 import VOCAB_SIZE as GPT2_VOCAB
from pyllmc.reference.common import UserError
from pyllmc.token_shards import is_chat_shard, read_chat_datafile, read_datafile


def shard_files(pattern: str) -> list[str]:
    """The shards a pattern names, sorted; a UserError when there are none."""
    files = sorted(glob.glob(pattern))
    if not files:
        raise UserError(f"no token shards match {pattern!r} (run python dev/data/tinyshakespeare.py to make some)")
    return files


def pattern_is_masked(pattern: str) -> bool:
    """Whether the pattern's shards are chat shards (a loss mask each); a UserError when it mixes both kinds."""
    files = shard_files(pattern)
    chat = [is_chat_shard(f) for f in files]
    if any(chat) and not all(chat):
        plain = files[chat.index(False)]
        masked = files[chat.index(True)]
        raise UserError(f"{pattern!r} mixes chat shards with a loss mask ({masked}) and token shards without one "
                        f"({plain}): use one kind per pattern")
    return all(chat)


class DistributedDataLoader:
    """Token shards read in order; rank r of n takes the r-th B*T slice of every n*B*T window (as the C loader).
    masked: the pattern's shards are chat shards, and targets are -1 where not supervised (module docstring)."""

    def __init__(self, pattern: str, B: int, T: int, rank: int, nproc: int, vocab_size: int = GPT2_VOCAB):
        self.files = shard_files(pattern)
        self.masked = pattern_is_masked(pattern)
        self.B, self.T, self.rank, self.nproc, self.vocab_size = B, T, rank, nproc, vocab_size
        self.reset()

    def _load(self, shard: int) -> None:
        self.shard = shard
        if self.masked:
            self._load_chat(self.files[shard])
            return
        self.tokens = read_datafile(self.files[shard], self.vocab_size)
        if len(self.tokens) < self.nproc * self.B * self.T + 1:
            raise UserError(f"{self.files[shard]}: {len(self.tokens)} tokens, too few for one batch of "
                            f"{self.nproc} x {self.B} x {self.T} + 1")
        self.base = 0

    def _load_chat(self, path: str) -> None:
        """A chat shard: its tokens and mask, its T checked against the loader's; at least one sample of n*B*T."""
        chat = read_chat_datafile(path, self.vocab_size)
        if chat.seq_len != self.T:
            raise UserError(f"{path}: a chat shard of {chat.seq_len}-token conversations, but --sequence_length "
                            f"is {self.T}: they must be equal")
        if len(chat.tokens) < self.nproc * self.B * self.T:
            raise UserError(f"{path}: {len(chat.tokens)} tokens, too few for one batch of "
                            f"{self.nproc} x {self.B} x {self.T}")
        self.tokens, self.mask = chat.tokens, chat.mask
        self.base = 0

    def reset(self) -> None:
        self._load(0)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.masked:
            return self._next_chat_batch()
        B, T = self.B, self.T
        start = self.base + self.rank * B * T
        buf = torch.from_numpy(np.asarray(self.tokens[start : start + B * T + 1], dtype=np.int64))
        self.base += self.nproc * B * T
        if self.base + self.nproc * B * T + 1 > len(self.tokens):
            self._load((self.shard + 1) % len(self.files))
        return buf[:-1].view(B, T), buf[1:].view(B, T)

    def _next_chat_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), each (B, T): B whole conversations; targets -1 where the next token is not supervised
        and at each row's last position."""
        B, T = self.B, self.T
        start = self.base + self.rank * B * T
        tokens = np.asarray(self.tokens[start : start + B * T], dtype=np.int64).reshape(B, T)
        mask = np.asarray(self.mask[start : start + B * T]).reshape(B, T)
        targets = np.full((B, T), -1, dtype=np.int64)
        supervised = mask[:, 1:] == 1  # (B, T-1): is token j+1 a target of position j
        targets[:, :-1][supervised] = tokens[:, 1:][supervised]
        self.base += self.nproc * B * T
        if self.base + self.nproc * B * T > len(self.tokens):
            self._load((self.shard + 1) % len(self.files))
        return torch.from_numpy(tokens), torch.from_numpy(targets)
