"""pyllmc: Python bindings to llmc's C core (train_gpt2.c and llmc/), compiled with cffi.

    from pyllmc import GPT2
    model = GPT2.from_checkpoint("gpt2_124M.bin")
    logits, loss = model.forward(x, y)

pyllmc.layers has every layer's forward and backward on numpy arrays; `python -m pyllmc.train`
trains with the C engine, data-parallel under mpirun (mpi4py). Build: `make pyllmc`.
"""

from pyllmc._core import LlmcError
from pyllmc.model import GPT2, GPT2Config, precision, read_checkpoint_header, set_precision

__all__ = ["GPT2", "GPT2Config", "LlmcError", "precision", "read_checkpoint_header", "set_precision", "layers"]

from pyllmc import layers  # noqa: E402
