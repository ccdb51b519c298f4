"""
A model's tensors in its model file's order and back, for the models whose file_tensors() lists them (the references
after GPT-2's), the family modules' readers with a bad file as a UserError, and ModelFiles: what such a reference
writes and reads (model file, debug state), given once.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from pyllmc.family import Family
from pyllmc.model_file import VERSIONS, ModelFileError, write_model_file
from pyllmc.reference.cli import debug_optimizer, debug_targets
from pyllmc.reference.causal_lm import CausalLM
from pyllmc.reference.common import UserError, is_depth_name, print0
from pyllmc.reference.debug_state import (DebugOptimizer, debug_state_name, is_masked, reference_steps,
                                          write_debug_state_with_norms)
from pyllmc.reference.optimizers import is_block_matrix


def read_model_file(read: Callable[[str | Path], tuple], filename: str | Path) -> tuple:
    """One of the family modules' model-file readers on `filename`, a bad file raised as a UserError (one `error:` line)."""
    try:
        return read(filename)
    except ModelFileError as e:
        raise UserError(str(e)) from None


def hf_tensor_taker(sd: dict[str, torch.Tensor], where: str) -> Callable[[str], torch.Tensor]:
    """take(key): a Hugging Face state dict's tensor as float32; a missing one is a UserError naming `where`."""
    def take(key: str) -> torch.Tensor:
        if key not in sd:
            raise UserError(f"{where}: the Hugging Face model has no tensor {key!r}")
        return sd[key].float()
    return take


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


@dataclass(frozen=True)
class ModelFiles:
    """A reference's model file and debug state, for a model class built as model_class(config, flash) whose
    file_tensors() lists its tensors in file order; a reference binds the methods to its module's names
    (stacked, write_model, read_model, reference_steps, write_debug_state)."""

    model_class: Callable[[Any, bool], CausalLM]
    family: Family  # the debug state's magic and version
    header_of: Callable[[Any, int], bytes]  # (config, version) -> the model file's header bytes
    read: Callable[[str | Path], tuple]  # the family's reader: (config, tensors in file order)
    global_names: tuple[str, ...]  # the file tensors not stacked over layers

    def stacked(self, model: CausalLM, get: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
        """The model file's tensors in order, each stacked over layers, element = get(parameter)."""
        return stacked_file_tensors(model, get, self.global_names)

    def load_model(self, name: str, seed: int, depth_config: Callable[[int], Any],
                   load_hf: Callable[[str, bool], CausalLM], flash: bool = False) -> tuple[CausalLM, str]:
        """The model a --model name gives: dN from scratch (depth_config(N), init_weights(seed)), one of our model
        files, or load_hf(name, flash) for a Hugging Face directory or hub name. Returns it and the stem of the files
        written for it."""
        if is_depth_name(name):
            depth = int(name[1:])
            if depth < 1:
                raise UserError(f"--model {name}: the depth must be at least 1 (e.g. d2)")
            model = self.model_class(depth_config(depth), flash)
            model.init_weights(seed)
            return model, f"{self.family.name}_{name}"
        if name.endswith(".bin"):
            return self.read_model(name, flash), Path(name).stem
        return load_hf(name, flash), f"{self.family.name}_{Path(name).name}"

    def write_model(self, model: CausalLM, filename: str | Path, dtype: str) -> None:
        """The model file: its header (version 3 fp32, 5 bf16), then the tensors in `dtype`."""
        header = self.header_of(model.config, VERSIONS[dtype])
        write_model_file(filename, header, self.stacked(model, lambda p: p.detach().cpu().float()), dtype)
        print0(f"wrote {filename}")

    def read_model(self, filename: str | Path, flash: bool = False) -> CausalLM:
        """The model from one of our model files, validated by the family's reader: UserError otherwise."""
        c, tensors = read_model_file(self.read, filename)
        model = self.model_class(c, flash)
        load_file_tensors(model, tensors)
        return model

    def reference_steps(self, model: CausalLM, x: torch.Tensor, y: torch.Tensor, opt: DebugOptimizer,
                        dtype: torch.dtype = torch.float32):
        """The debug state's reference steps (AdamW, or Muon on the blocks' matrices + AdamW): (logits, loss, grads in
        file order, losses, grad norms before clipping)."""
        return reference_steps(model, x, y, opt, dtype, is_block_matrix, self.stacked)

    def write_debug_state(self, model: CausalLM, x: torch.Tensor, y: torch.Tensor, filename: str | Path,
                          opt: DebugOptimizer = DebugOptimizer()) -> None:
        """The debug state, the layout with grad norms (version 3): one batch, its logits, loss and every gradient
        (file order), the losses and grad norms of `opt.steps` reference steps, then each step loss's float32 noise
        (|fp32 loss - fp64 rerun loss|); header[12..17] name the optimizer (DebugOptimizer.header_fields)."""
        write_debug_state_with_norms(model, x, y, filename, opt, self.reference_steps, self.family.debug_state_magic,
                                     self.family.debug_state_version)

    def file_writer(self, args: argparse.Namespace, model: CausalLM, stem: str,
                    write_tokenizer: Callable[[], None]) -> Callable[[torch.Tensor, torch.Tensor], None]:
        """A ModelFamily.write_files: the model files <stem>.bin (fp32) and <stem>_bf16.bin, the tokenizer file, then
        <stem>_debug_state.bin from one batch with the command line's debug optimizer (<stem>_masked_debug_state.bin
        when its targets hold -1: --mask_half 1, or a chat shard's mask)."""
        def write_files(x: torch.Tensor, y: torch.Tensor) -> None:
            write_tokenizer()  # first: where it fails, no model file is left for `make` to take as done
            self.write_model(model, f"{stem}.bin", "float32")
            self.write_model(model, f"{stem}_bf16.bin", "bfloat16")
            y = debug_targets(args, y)
            self.write_debug_state(model, x, y, debug_state_name(stem, is_masked(y)), debug_optimizer(args))
        return write_files
