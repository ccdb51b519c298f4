"""
What the decoder families (Llama 3, nanochat's GPT, Qwen3: the pre-norm decoders of llmc/decoder.h) share in their
Python descriptions: the sizes every one of their configs has, and those sizes in Hugging Face's config names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(kw_only=True)
class DecoderSizes:
    """The sizes every decoder family's config has (llmc/decoder.h's maxT, V, L, NH, NKV, C and FFN, in the references'
    names); a family's config adds its own hyperparameters. Keyword-only: the families' fields follow in any order."""

    block_size: int = 1024  # maxT
    vocab_size: int  # V (no padding)
    n_layer: int  # L
    n_head: int  # NH query heads
    n_kv_head: int  # NKV key/value heads (GQA: NH / NKV query heads share one)
    n_embd: int  # C
    ffn_hidden: int  # FFN, the MLP's hidden size

    def smallest_size(self) -> int:
        """The least of maxT, V, L, NH, NKV, C and FFN: a model that can be built has every one at least 1."""
        return min(self.block_size, self.vocab_size, self.n_layer, self.n_head, self.n_kv_head, self.n_embd,
                   self.ffn_hidden)


def round_to_float32(config: DecoderSizes, *names: str) -> None:
    """Rounds the named float fields of a config to float32: the model file stores them so, and the reference computes
    with exactly what the C side reads."""
    for name in names:
        setattr(config, name, float(np.float32(getattr(config, name))))


def torch_minimal_decoder(model_class: type, config: DecoderSizes) -> tuple[object, int]:
    """(the reference's model of this class at config, SDPA attention, init at seed 42, as a module returning the loss;
    its vocabulary): a decoder family's torch_minimal_model (dev/torch_minimal_step.py)."""
    from pyllmc.reference.causal_lm import LossOnly

    model = model_class(config, flash=True)
    model.init_weights(42)
    return LossOnly(model), config.vocab_size


def hf_size_fields(c: DecoderSizes) -> dict:
    """A decoder's sizes as transformers' configs name them (LlamaConfig, Qwen3Config, NanoChatConfig alike)."""
    return {"vocab_size": c.vocab_size, "hidden_size": c.n_embd, "intermediate_size": c.ffn_hidden,
            "num_hidden_layers": c.n_layer, "num_attention_heads": c.n_head, "num_key_value_heads": c.n_kv_head}
