"""pyllmc: llmc's Python side.

Pure Python (numpy, and torch for the references), importable as soon as the package is installed
(`pip install -r requirements.txt`):

    pyllmc.family, pyllmc.families.<name>                   each model family's description: its files' numbers,
                                                            its model file's header, checks and reader, its dN rule
    pyllmc.families                                         the registry of the families (llmc/families.h's rows)
    pyllmc.model_file                                       the model files' mechanism: header bytes, atomic writes,
                                                            tensors in fp32/bf16, length checks
    pyllmc.token_shards                                     token shards, chat shards and the data files' errors
    pyllmc.chat                                             the chat formats: a conversation to ids and a loss mask
    pyllmc.llama3_tokenizer                                 Llama 3 style tokenizer.json files (`tokenizers`)
    pyllmc.reference                                        the PyTorch references' shared framework: training loop,
                                                            command line, optimizers, debug states, data loader

and bindings to llmc's C core (train_gpt2.c and llmc/), compiled with cffi by `make pyllmc`:

    from pyllmc import GPT2
    model = GPT2.from_checkpoint("gpt2_124M.bin")
    logits, loss = model.forward(x, y)

pyllmc.layers has every layer's forward and backward on numpy arrays; `python -m pyllmc.train` trains with the C
engine, data-parallel under mpirun (mpi4py). The bindings' names below load on first use, so that the pure Python
modules import without the compiled extension; without it they raise one ImportError naming `make pyllmc`.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module of the bindings that defines it (each needs the compiled extension pyllmc/_llmc)
_BINDINGS = {
    "GPT2": "pyllmc.model",
    "GPT2Config": "pyllmc.model",
    "precision": "pyllmc.model",
    "read_checkpoint_header": "pyllmc.model",
    "set_precision": "pyllmc.model",
    "LlmcError": "pyllmc._core",
    "layers": None,  # the submodule itself
}

__all__ = sorted(_BINDINGS)


def __getattr__(name: str) -> Any:
    """The bindings' names, imported on first use (PEP 562); ImportError naming `make pyllmc` without the extension."""
    if name not in _BINDINGS:
        raise AttributeError(f"module 'pyllmc' has no attribute {name!r}")
    module_name = _BINDINGS[name]
    if module_name is None:
        return importlib.import_module(f"pyllmc.{name}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value
