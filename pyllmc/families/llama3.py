"""
Llama 3's description as data (pyllmc/family.py says what each field is): its model file, token shards, tokenizer file
and debug state, the reference's defaults, and the model file's tensor table. llmc/llama3_config.h holds the same
numbers for the C programs.
"""

from __future__ import annotations

import numpy as np

from pyllmc.family import Family, ShardFormat

VOCAB_SIZE = 128256  # Meta's Llama 3 tokenizer: the largest id a llama-3 shard may hold, plus one
HUB_TOKENIZER = "meta-llama/Meta-Llama-3-8B"  # the hub's Llama 3 tokenizer (gated), used when no --tokenizer is given
BOS, EOT = "<|begin_of_text|>", "<|end_of_text|>"  # BOS starts every document

LLAMA3 = Family(
    name="llama3",
    model_magic=20240803,
    model_header_bytes=2048,  # 256 int32, then 256 float32
    # lm_head is left out of the file when the embeddings are tied
    tensor_names=("wte", "ln1w", "qkvw", "attprojw", "ln2w", "fcw", "fcw2", "fcprojw", "lnfw", "lm_head"),
    shards=ShardFormat("llama-3", 20240801, 7, np.dtype("<u4"), VOCAB_SIZE),
    tokenizer_file="llama3_tokenizer.bin",
    tokenizer_magic=20240328,
    tokenizer_version=3,  # version 3 carries the end-of-text and BOS ids
    debug_state_magic=20240803,
    debug_state_version=3,
    default_model="meta-llama/Llama-3.2-1B",
    model_help="dN (from scratch), a Hugging Face Llama directory or hub name, or one of our llama3 .bin files",
    default_input_bin="dev/data/tinyshakespeare_llama3/tiny_shakespeare_val.bin",
    input_bin_help="train token shards (glob; llama-3 shards: dev/data/*.py --model_desc llama-3)",
    learning_rate=1e-4,
)
