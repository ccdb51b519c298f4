"""
What the families' GGUF exports share (dev/eval/export_gguf.py writes the file; each family's module,
pyllmc/families/<name>.py, knows its llama.cpp architecture, tensor names, metadata, tokenizer and the numpy forward
pass that reads the file back): the record a registry row holds, llama.cpp's token types, and causal attention in numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

TOKEN_NORMAL, TOKEN_CONTROL = 1, 3  # llama.cpp's token types


class GgufError(Exception):
    """A problem with the input (the model file and its tokenizer do not fit) that is reported as one line."""


@dataclass(frozen=True)
class GgufModel:
    """A model file as llama.cpp wants it: the writer's metadata calls (in order: the file's bytes follow it), the
    tensors under llama.cpp's names in numpy shape (float32), and the line describing it after the export."""

    metadata: Callable[[Any], None]  # called with a gguf.GGUFWriter
    tensors: dict[str, np.ndarray]
    line: str


@dataclass(frozen=True)
class GgufExport:
    """A family's GGUF export (a registry row's gguf_export)."""

    arch: str  # llama.cpp's architecture name: general.architecture and the prefix of its metadata keys
    model_name: str  # what the family's model file is called in an error line, e.g. "GPT-2 model"
    # (model file path, its (config, tensors) as the family's reader gives them, --tokenizer) -> the GGUF's contents
    model: Callable[[Path, Any, "dict[str, np.ndarray]", str], GgufModel]
    # (prompt, --tokenizer) -> the ids the check runs: the family's document delimiter, then the prompt's tokens
    prompt_tokens: Callable[[str, str], "list[int]"]
    # (the file's scalar metadata, its tensors as float64, token ids) -> logits (T, V) from the GGUF alone
    logits: Callable[[dict, "dict[str, np.ndarray]", "list[int]"], np.ndarray]


def softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal attention per head: q, k, v (nh, T, hs) -> (nh, T, hs)."""
    T = q.shape[1]
    att = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    att = np.where(np.tril(np.ones((T, T), dtype=bool)), att, -np.inf)
    att = np.exp(att - att.max(-1, keepdims=True))
    return (att / att.sum(-1, keepdims=True)) @ v
