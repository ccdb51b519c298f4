"""
A model's tensors in its model file's order and back, for the models whose file_tensors() lists them (train_llama3.py's
Llama, train_nanochat.py's NanoChat), and model_file.py's readers with a bad file as a UserError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from pyllmc.model_file import ModelFileError
from pyllmc.reference.causal_lm import CausalLM
from pyllmc.reference.common import UserError


def read_model_file(read: Callable[[str | Path], tuple], filename: str | Path) -> tuple:
    """One of model_file.py's readers on `filename`, a bad file raised as a UserError (one `error:` line)."""
    try:
        return read(filename)
    except ModelFileError as e:
        raise UserError(str(e)) from None


def stacked_file_tensors(model: CausalLM, get: Callable[[torch.Tensor], torch.Tensor],
                         global_names: tuple[str, ...]) -> list[torch.Tensor]:
    """For a model whose file_tensors() lists (name, per-layer parts) in file order (train_llama3.py's Llama,
    train_nanochat.py's NanoChat): each tensor stacked over layers, element = get(parameter); the ones named in
    global_names have one part, taken as it is."""
    return [parts[0] if name in global_names else torch.stack(parts)
            for name, parts in ((n, [get(p) for p in ps]) for n, ps in model.file_tensors())]


def load_file_tensors(model: CausalLM, tensors: dict[str, np.ndarray]) -> None:
    """The inverse of stacked_file_tensors: a model file's tensors (float32, by name) copied into the model."""
    with torch.no_grad():
        for name, parts in model.file_tensors():
            t = torch.from_numpy(tensors[name])
            for i, p in enumerate(parts):
                p.copy_(t.view(p.shape) if len(parts) == 1 else t[i])  # view: a 1-layer model's (1, ...) stack
