"""
nanochat's GPT as data (pyllmc/family.py says what each field is): its model file, the token shards it trains on
(GPT-2's), its tokenizer file and debug state, the reference's defaults, and the model file's tensor table.
llmc/nanochat.h holds the same numbers for the C programs; model_file.py describes the model file's header.
"""

from __future__ import annotations

from pyllmc.family import Family
from pyllmc.families.gpt2 import GPT2

VOCAB_SIZE = 50304  # dN's vocabulary: GPT-2's 50257 padded to a multiple of 64 (trains on GPT-2 token shards)
BOS_NAMES = ("<|bos|>", "<|endoftext|>")  # a checkpoint tokenizer's document delimiter, the first one it knows

NANOCHAT = Family(
    name="nanochat",
    model_magic=20251013,
    model_header_bytes=2048,  # 256 int32, then 256 float32
    # no norm weights (RMSNorm is weightless), lm_head always stored (never tied to wte)
    tensor_names=("wte", "qkvw", "attprojw", "fcw", "fcprojw", "lm_head"),
    shards=GPT2.shards,
    tokenizer_file="nanochat_tokenizer.bin",
    tokenizer_magic=GPT2.tokenizer_magic,
    tokenizer_version=GPT2.tokenizer_version,  # GPT-2's tokenizer file: version 2 carries the end-of-text id
    debug_state_magic=20251013,
    debug_state_version=3,  # the Llama 3 layout: grad norms per step
    default_model="d2",
    model_help="dN (from scratch), a Hugging Face NanoChat directory or hub name, or one of our nanochat .bin files",
    default_input_bin=GPT2.default_input_bin,
    input_bin_help="train token shards (glob; GPT-2's format, ids below the model's vocab size)",
    learning_rate=3e-4,
)
