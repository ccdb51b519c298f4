"""
GPT-2's description as data (pyllmc/family.py says what each field is): its model checkpoint, token shards, tokenizer
file and debug state, the reference's defaults, and the checkpoint's tensor table. llm.c's formats, byte for byte;
llmc/checkpoint.h and llmc/model_config.h hold the same numbers for the C programs.
"""

from __future__ import annotations

import numpy as np

from pyllmc.family import Family, ShardFormat

VOCAB_SIZE = 50257  # tiktoken's gpt2 encoding
EOT = 50256  # <|endoftext|>: starts every document
VOCAB_PADDING = 128  # the checkpoint's wte has Vp rows: V rounded up to a multiple of this

# the per-layer tensors in file order -> the parameter of a block each one stacks (our GPT's names are Hugging
# Face's: transformer.h.{l}.<name>); the 3-D ones (qkvw, attprojw, fcw, fcprojw) are (out, in) matrices
LAYER_PARAMETERS: dict[str, str] = {
    "ln1w": "ln_1.weight", "ln1b": "ln_1.bias", "qkvw": "attn.c_attn.weight", "qkvb": "attn.c_attn.bias",
    "attprojw": "attn.c_proj.weight", "attprojb": "attn.c_proj.bias", "ln2w": "ln_2.weight", "ln2b": "ln_2.bias",
    "fcw": "mlp.c_fc.weight", "fcb": "mlp.c_fc.bias", "fcprojw": "mlp.c_proj.weight", "fcprojb": "mlp.c_proj.bias",
}

GPT2 = Family(
    name="gpt2",
    model_magic=20240326,
    model_header_bytes=1024,
    tensor_names=("wte", "wpe", *LAYER_PARAMETERS, "lnfw", "lnfb"),
    shards=ShardFormat("gpt-2", 20240520, 1, np.dtype("<u2"), VOCAB_SIZE),
    tokenizer_file="gpt2_tokenizer.bin",
    tokenizer_magic=20240328,
    tokenizer_version=2,  # version 2 carries the EOT id
    debug_state_magic=20240327,
    debug_state_version=2,
    default_model="gpt2",
    model_help="gpt2|gpt2-medium|gpt2-large|gpt2-xl (pretrained), dN (from scratch), or a HF directory",
    default_input_bin="dev/data/tinyshakespeare/tiny_shakespeare_val.bin",
    input_bin_help="train token shards (glob)",
    learning_rate=3e-4,
)
