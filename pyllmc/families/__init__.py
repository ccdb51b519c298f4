"""
The model families, listed once for the Python side: REGISTRY mirrors llmc/families.h's LLMC_FAMILIES(X) row for row
(tests/test_families.py holds them equal), and the dev/ scripts, the exports, the tests' parametrisations and the
package's module list read it instead of naming families. Each family's module (pyllmc/families/<name>.py) is its
description: the Family record (pyllmc/family.py), its model file's header, checks, tensor shapes and reader, and its
dN rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pyllmc.family import Family, OutputChecks
from pyllmc.gguf_common import GgufExport
from pyllmc.families import gpt2, llama3, nanochat, qwen3
from pyllmc.model_file import ModelFileError, read_magic

# a model file's config (or header) and its tensors in file order, float32
ModelReader = Callable[[Path], "tuple[Any, dict[str, np.ndarray]]"]
# the parameters of a dN model at a vocabulary size
DepthParameters = Callable[[int, int], int]
# the Hugging Face export of a model file's (config, tensors) in a dtype: (state dict, config.json, a line describing
# the file, whether GPT-2's tokenizer files fit its vocabulary)
HfExport = Callable[[Any, "dict[str, np.ndarray]", str], "tuple[dict[str, np.ndarray], dict, str, bool]"]
# (L, C, the linear layers of one block as (out, in) features) of a dN model, as the family's C trainer builds it
DepthLinears = Callable[[int], "tuple[int, int, list[tuple[int, int]]]"]
# (a dN model as one torch module whose forward(idx, targets) returns the mean loss, its vocabulary) at a --vocab (None:
# the family's default), for dev/torch_minimal_step.py
TorchMinimal = Callable[[int, "int | None"], "tuple[Any, int]"]


@dataclass(frozen=True, kw_only=True)
class Registered:
    """One family's row: its description and what the shared scripts need of it."""

    family: Family
    read_model: ModelReader
    depth_linears: DepthLinears
    depth_parameters: DepthParameters
    # V of a dN model; None where dN takes its vocabulary from the tokenizer (the test tokenizer's, in refs_dir)
    depth_vocab: int | None
    hf_export: HfExport | None  # dev/eval/export_hf.py's conversion; None where the family has none
    refs_dir: str  # llmc/families.h's "refs_dir": where make <name>-debug-states writes the reference files, "" none
    output_checks: OutputChecks  # its commands in dev/check_outputs.py's list
    torch_minimal: TorchMinimal  # dev/torch_minimal_step.py's model: PyTorch's fastest step of a dN
    gguf_export: GgufExport | None  # dev/eval/export_gguf.py's conversion for llama.cpp; None where the family has none

    @property
    def name(self) -> str:
        return self.family.name

    @property
    def reference(self) -> str:
        """Its PyTorch reference at the repository root."""
        return f"train_{self.name}.py"

    @property
    def module(self) -> str:
        """Its reference's module name (the package's py-modules list holds it)."""
        return f"train_{self.name}"

    @property
    def trainer(self) -> str:
        """Its CPU trainer's program (make train_<name>)."""
        return f"train_{self.name}"


# filled by field name: a row's behaviour is its family module's
REGISTRY: tuple[Registered, ...] = (
    Registered(family=gpt2.GPT2, read_model=gpt2.read_gpt2, depth_linears=gpt2.depth_linears,
               depth_parameters=gpt2.depth_parameters, depth_vocab=gpt2.VOCAB_SIZE, hf_export=gpt2.hf_export,
               refs_dir="", output_checks=gpt2.OUTPUT_CHECKS,
               torch_minimal=gpt2.torch_minimal_model,
               gguf_export=GgufExport(arch=gpt2.GGUF_ARCH, model_name="GPT-2 model", model=gpt2.gguf_model,
                                      prompt_tokens=gpt2.gguf_prompt_tokens, logits=gpt2.gguf_logits)),
    Registered(family=llama3.LLAMA3, read_model=llama3.read_llama3, depth_linears=llama3.depth_linears,
               depth_parameters=llama3.depth_parameters, depth_vocab=None, hf_export=None, refs_dir="build/llama3",
               output_checks=llama3.OUTPUT_CHECKS,
               torch_minimal=llama3.torch_minimal_model,
               gguf_export=GgufExport(arch=llama3.GGUF_ARCH, model_name="Llama 3 model", model=llama3.gguf_model,
                                      prompt_tokens=llama3.gguf_prompt_tokens, logits=llama3.gguf_logits)),
    Registered(family=nanochat.NANOCHAT, read_model=nanochat.read_nanochat, depth_linears=nanochat.depth_linears,
               depth_parameters=nanochat.depth_parameters, depth_vocab=nanochat.VOCAB_SIZE,
               hf_export=nanochat.hf_export, refs_dir="build/nanochat", output_checks=nanochat.OUTPUT_CHECKS,
               torch_minimal=nanochat.torch_minimal_model, gguf_export=None),
    Registered(family=qwen3.QWEN3, read_model=qwen3.read_qwen3, depth_linears=qwen3.depth_linears,
               depth_parameters=qwen3.depth_parameters, depth_vocab=None, hf_export=qwen3.hf_export,
               refs_dir="build/qwen3", output_checks=qwen3.OUTPUT_CHECKS,
               torch_minimal=qwen3.torch_minimal_model, gguf_export=None),
)
NAMES: tuple[str, ...] = tuple(row.name for row in REGISTRY)


def by_name(name: str) -> Registered:
    """The row of the family called `name` (a KeyError naming the known ones otherwise)."""
    for row in REGISTRY:
        if row.name == name:
            return row
    raise KeyError(f"no model family {name!r} (known: {', '.join(NAMES)})")


def by_magic(path: str | Path) -> Registered:
    """The row of the family whose model file `path` is, told by its magic (ModelFileError: one line otherwise)."""
    path = Path(path)
    magic = read_magic(path)
    for row in REGISTRY:
        if row.family.model_magic == magic:
            return row
    known = ", ".join(f"{row.family.model_magic} ({row.name})" for row in REGISTRY)
    raise ModelFileError(f"{path}: not a model file of a known family (magic {magic}; expected one of {known})")
