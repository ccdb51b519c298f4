"""
llmc's PyTorch reference for the Llama 3 family: the model in one file (RMSNorm, rotary positions with
Llama 3.1's frequency scaling, grouped-query attention, SwiGLU) and the writers of the .bin files the
C trainer reads: the Llama 3 model file, its debug state and the Llama 3 tokenizer file. The training loop,
data loader, optimizers and schedule are the ones every family shares (pyllmc/reference/).

Examples:
    python dev/data/make_test_tokenizer.py                      # a small local BPE tokenizer (offline)
    python dev/data/tinyshakespeare.py --model_desc llama-3 --tokenizer dev/data/test_tokenizer \
        --data_dir dev/data/tinyshakespeare_llama3              # (copy tiny_shakespeare.txt there to skip the download)
    python train_llama3.py --model d2 --tokenizer dev/data/test_tokenizer --num_iterations 20
    python train_llama3.py --model meta-llama/Llama-3.2-1B       # needs the gated hub weights (or a local directory)
    torchrun --nproc_per_node 2 train_llama3.py --device cpu --model d2 --tokenizer dev/data/test_tokenizer ...
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from pyllmc.families.llama3 import HUB_TOKENIZER, LLAMA3
from pyllmc.reference.flags import decoder_cli, tokenizer_flag, trainer_parser

LLAMA3_CLI = decoder_cli(__doc__, LLAMA3, tokenizer_flag("tokenizer.json or a directory holding one; default: the model "
                                                         f"directory's, else the hub's {HUB_TOKENIZER}"))
if __name__ == "__main__":  # the flags first: --help and a bad flag answer before torch's import (seconds)
    trainer_parser(LLAMA3_CLI).parse_args()

import numpy as np
import torch

from pyllmc.families.gpt2 import GPT2
from pyllmc.families.llama3 import (LlamaConfig, depth_config, llama3_header_bytes, llama_config_problem,
                                    llama_ffn_hidden, read_llama3)
from pyllmc.llama3_tokenizer import LlamaTokenizer, huggingface_reachable, load_llama3_tokenizer
from pyllmc.reference.common import UserError, config_checker
from pyllmc.reference.data_loader import DistributedDataLoader
from pyllmc.reference.decoder import FileLayout, GroupedQueryAttention, PreNormBlock, StackedDecoder, SwiGLU, rope_cos_sin
from pyllmc.reference.file_tensors import ModelFiles, hf_tensor_taker
from pyllmc.reference.tokenizer_files import bpe_tokenizer_file_bytes, write_bpe_tokenizer
from pyllmc.reference.training import ModelFamily, reference_main, seeded_sampler

# ----------------------------------------------------------------------------- the model


# check_config(config, where): the shapes the model can be built with; a UserError naming `where` otherwise.
check_config = config_checker(llama_config_problem, "Llama")


def rope_inv_freq(c: LlamaConfig) -> torch.Tensor:
    """(HS/2,) float32 inverse frequencies theta^(-2i/HS), with Llama 3.1's scaling when use_scaled_rope:
    long wavelengths divided by `factor`, short ones kept, the band between interpolated smoothly."""
    HS = c.head_size
    inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, HS, 2, dtype=torch.int64).float() / HS))
    if not c.use_scaled_rope:
        return inv_freq
    low_wavelen = c.original_max_position / c.low_freq_factor
    high_wavelen = c.original_max_position / c.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / c.rope_factor, inv_freq)
    smooth = (c.original_max_position / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor)
    smoothed = (1 - smooth) * scaled / c.rope_factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_tables(c: LlamaConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, each (block_size, HS) float32: angle t * inv_freq[i] in columns i and i + HS/2."""
    return rope_cos_sin(rope_inv_freq(c), c.block_size)


# The model file's tensors between wte and lnfw, each stacked over layers, and the from-scratch init rule.
FILE_LAYOUT = FileLayout(
    block_tensors={"ln1w": "ln_1", "qkvw": "attn.c_attn", "attprojw": "attn.c_proj", "ln2w": "ln_2", "fcw": "mlp.c_fc",
                   "fcw2": "mlp.c_fc2", "fcprojw": "mlp.c_proj"},
    norm_tensors=("ln1w", "ln2w", "lnfw"),
    residual_tensors=("attprojw", "fcprojw"),
)


class Llama(StackedDecoder):
    """Pre-norm blocks of grouped-query attention (head size C/NH) and SwiGLU (pyllmc/reference/decoder.py), with
    Llama 3.1's RoPE scaling when the config asks for it.

    init_weights(seed), from scratch: one torch generator seeded with `seed` drawing normal_ once per model-file
    tensor, in file order, over the whole tensor stacked across layers: wte, qkvw, attprojw, fcw, fcw2, fcprojw,
    lm_head. std 0.02, the residual projections (attprojw, fcprojw) 0.02/sqrt(2L); RMSNorm weights 1."""

    def __init__(self, config: LlamaConfig, flash: bool = False):
        check_config(config, "model")
        C, HS = config.n_embd, config.head_size

        def make_block() -> PreNormBlock:
            return PreNormBlock(C, config.norm_eps,
                                attn=lambda: GroupedQueryAttention(C, config.n_head, config.n_kv_head, HS, flash),
                                mlp=lambda: SwiGLU(C, config.ffn_hidden))

        super().__init__(config, make_block, rope_inv_freq(config), FILE_LAYOUT)


# ----------------------------------------------------------------------------- Hugging Face import


def ffn_rule_for(n_embd: int, hidden: int) -> tuple[float, int]:
    """(ffn_dim_multiplier, multiple_of) whose Llama rule gives `hidden`: Meta's published pairs first, then
    the largest power of two dividing `hidden` with no multiplier, then `hidden` itself as the multiple."""
    candidates = [(1.5, 256), (1.0, 256), (1.3, 1024), (1.3, 256), (0.0, 256)]
    candidates += [(0.0, 1 << k) for k in range(12, -1, -1)]
    for mult, multiple in candidates:
        if llama_ffn_hidden(n_embd, multiple, mult) == hidden:
            return mult, multiple
    h0 = int(2 * (4 * n_embd) / 3)
    mult = float(np.float32(hidden / h0))
    while llama_ffn_hidden(n_embd, hidden, mult) != hidden:  # int(mult * h0) overshot `hidden` by rounding
        mult = float(np.nextafter(np.float32(mult), np.float32(0)))
    return mult, hidden


def config_from_hf(c, where: str) -> LlamaConfig:
    """Our config from a transformers LlamaConfig (rope_parameters as transformers 5 normalises them)."""
    if getattr(c, "hidden_act", "silu") != "silu" or getattr(c, "attention_bias", False) or getattr(c, "mlp_bias", False):
        raise UserError(f"{where}: unsupported Llama variant (needs silu, no attention or MLP biases)")
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if head_dim * c.num_attention_heads != c.hidden_size:
        raise UserError(f"{where}: head_dim {head_dim} x {c.num_attention_heads} heads != hidden size {c.hidden_size}")
    rope = dict(getattr(c, "rope_parameters", None) or {})
    theta = float(rope.get("rope_theta", getattr(c, "rope_theta", 10000.0)))
    rope_type = rope.get("rope_type", "default")
    if rope_type not in ("default", "llama3"):
        raise UserError(f"{where}: unsupported RoPE type {rope_type!r} (default or llama3)")
    scaled = rope_type == "llama3"
    mult, multiple = ffn_rule_for(c.hidden_size, c.intermediate_size)
    tied = bool(getattr(c, "tie_word_embeddings", False))
    return LlamaConfig(
        block_size=int(c.max_position_embeddings), vocab_size=int(c.vocab_size), n_layer=int(c.num_hidden_layers),
        n_head=int(c.num_attention_heads), n_kv_head=int(c.num_key_value_heads or c.num_attention_heads),
        n_embd=int(c.hidden_size), ffn_dim_multiplier=mult, multiple_of=multiple, norm_eps=float(c.rms_norm_eps),
        rope_theta=theta, use_scaled_rope=scaled,
        rope_factor=float(rope["factor"]) if scaled else 0.0,
        low_freq_factor=float(rope["low_freq_factor"]) if scaled else 0.0,
        high_freq_factor=float(rope["high_freq_factor"]) if scaled else 0.0,
        original_max_position=float(rope["original_max_position_embeddings"]) if scaled else 0.0,
        tied_embeddings=tied, version_minor=2 if tied else (1 if scaled else 0),
    )


def from_hf_model(hf, where: str, flash: bool = False) -> Llama:
    """Our Llama from a transformers LlamaForCausalLM: q, k, v concatenated into c_attn, nothing permuted."""
    model = Llama(config_from_hf(hf.config, where), flash)
    take = hf_tensor_taker(hf.state_dict(), where)
    with torch.no_grad():
        model.transformer.wte.weight.copy_(take("model.embed_tokens.weight"))
        for i, block in enumerate(model.transformer.h):
            p = f"model.layers.{i}."
            block.ln_1.weight.copy_(take(p + "input_layernorm.weight"))
            block.attn.c_attn.weight.copy_(torch.cat([take(p + f"self_attn.{n}_proj.weight") for n in "qkv"]))
            block.attn.c_proj.weight.copy_(take(p + "self_attn.o_proj.weight"))
            block.ln_2.weight.copy_(take(p + "post_attention_layernorm.weight"))
            block.mlp.c_fc.weight.copy_(take(p + "mlp.gate_proj.weight"))
            block.mlp.c_fc2.weight.copy_(take(p + "mlp.up_proj.weight"))
            block.mlp.c_proj.weight.copy_(take(p + "mlp.down_proj.weight"))
        model.transformer.ln_f.weight.copy_(take("model.norm.weight"))
        if not model.config.tied_embeddings:
            model.lm_head.weight.copy_(take("lm_head.weight"))
    return model


def load_hf_llama(name: str, flash: bool) -> Llama:
    """A LlamaForCausalLM from a local directory or a hub name (the cache first; one error line offline)."""
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    if Path(name).is_dir():
        try:
            hf = LlamaForCausalLM.from_pretrained(name, dtype=torch.float32)
        except (OSError, ValueError) as e:
            raise UserError(f"--model {name}: not a Hugging Face Llama directory ({' '.join(str(e).split())[:200]})") from None
        return from_hf_model(hf, f"--model {name}", flash)
    try:
        hf = LlamaForCausalLM.from_pretrained(name, dtype=torch.float32, local_files_only=True)
    except OSError:
        if not huggingface_reachable(timeout=3.0):
            raise UserError(f"--model {name}: not a directory, not in the Hugging Face cache, and huggingface.co cannot be "
                            "reached (offline? download it elsewhere and pass its directory)") from None
        try:
            hf = LlamaForCausalLM.from_pretrained(name, dtype=torch.float32)
        except (OSError, ValueError) as e:
            raise UserError(f"--model {name}: cannot load it from the hub ({' '.join(str(e).split())[:200]}; "
                            "gated models need their licence accepted and `hf auth login`)") from None
    return from_hf_model(hf, f"--model {name}", flash)


def load_model(name: str, seed: int, vocab_size: int, flash: bool = False) -> tuple[Llama, str]:
    """Model from a name: dN from scratch (vocab from the tokenizer), one of our llama3 .bin files, or a Hugging Face
    Llama (directory or hub name). Returns it and the stem of the files written for it."""
    return FILES.load_model(name, seed, lambda depth: depth_config(depth, vocab_size), load_hf_llama, flash)


# ----------------------------------------------------------------------------- llmc .bin files


# the model file and the debug state (pyllmc.reference.file_tensors.ModelFiles)
FILES = ModelFiles(Llama, LLAMA3, llama3_header_bytes, read_llama3, global_names=("wte", "lnfw", "lm_head"))
stacked, write_model, read_model = FILES.stacked, FILES.write_model, FILES.read_model
reference_steps, write_debug_state = FILES.reference_steps, FILES.write_debug_state


def tokenizer_file_bytes(tok: LlamaTokenizer) -> list[bytes]:
    """Header and body of the Llama 3 tokenizer file (version 3)."""
    return bpe_tokenizer_file_bytes(LLAMA3, tok)


def write_tokenizer(tok: LlamaTokenizer, filename: str | Path) -> None:
    write_bpe_tokenizer(LLAMA3, tok, filename)


# ----------------------------------------------------------------------------- training


class LlamaDataLoader(DistributedDataLoader):
    """The references' loader, taking llama-3 shards only (uint32, magic 20240801): gpt-2 ids would read as valid."""

    def _load(self, shard: int) -> None:
        magic = int(np.fromfile(self.files[shard], dtype="<i4", count=1)[0]) if Path(self.files[shard]).stat().st_size >= 4 else 0
        if magic == GPT2.shards.magic:
            raise UserError(f"{self.files[shard]}: a gpt-2 token shard; make llama-3 shards with e.g. "
                            "python dev/data/tinyshakespeare.py --model_desc llama-3 --tokenizer PATH")
        super()._load(shard)


def resolve_tokenizer(args: argparse.Namespace) -> LlamaTokenizer:
    if args.tokenizer:
        return load_llama3_tokenizer(args.tokenizer)
    if Path(args.model).is_dir() and (Path(args.model) / "tokenizer.json").exists():
        return load_llama3_tokenizer(args.model)
    return load_llama3_tokenizer("")


def llama_family(args: argparse.Namespace) -> ModelFamily:
    tok = resolve_tokenizer(args)
    model, stem = load_model(args.model, args.seed, tok.vocab_size, bool(args.flash))
    c = model.config
    if c.vocab_size != tok.vocab_size:
        raise UserError(f"the tokenizer has {tok.vocab_size} tokens but the model's vocab is {c.vocab_size}")
    write_files = FILES.file_writer(args, model, stem, lambda: write_tokenizer(tok, LLAMA3.tokenizer_file))
    return ModelFamily(model=model, description=f"L={c.n_layer} NH={c.n_head} NKV={c.n_kv_head} C={c.n_embd} "
                       f"FFN={c.ffn_hidden} V={c.vocab_size}", loader=LlamaDataLoader, write_files=write_files,
                       make_sampler=seeded_sampler(args, tok.bos, tok.decode), write_model=write_model)


def main(argv: list[str] | None = None) -> int:
    return reference_main(LLAMA3_CLI, llama_family, argv)


if __name__ == "__main__":
    sys.exit(main())
