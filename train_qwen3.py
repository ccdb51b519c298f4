"""
llmc's PyTorch reference for the Qwen3 family (transformers' Qwen3ForCausalLM): RMSNorm with weights, QK-norm (an
RMSNorm over each head's head_dim with a learned weight) before rotary positions, grouped-query attention whose width
NH * head_dim need not be C, SwiGLU, no biases, optionally tied embeddings; and the writers of the .bin files the C
trainers read: the Qwen3 model file (pyllmc/families/qwen3.py, doc/qwen3.md), its debug state and its tokenizer file.
The training loop, data loader, optimizers and schedule are the ones every family shares (pyllmc/reference/).

Examples:
    python dev/data/make_test_tokenizer.py --delimiter endoftext --out_dir dev/data/test_tokenizer_eot  # offline
    python dev/data/tinyshakespeare.py --model_desc llama-3 --tokenizer dev/data/test_tokenizer_eot \
        --data_dir dev/data/tinyshakespeare_qwen3       # (copy tiny_shakespeare.txt there to skip the download)
    python train_qwen3.py --model d2 --tokenizer dev/data/test_tokenizer_eot --num_iterations 20
    python train_qwen3.py --model Qwen/Qwen3-0.6B           # the hub's weights and tokenizer (or a local directory)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from pyllmc.families.qwen3 import HUB_MODEL, QWEN3
from pyllmc.reference.flags import decoder_cli, tokenizer_flag, trainer_parser

QWEN3_CLI = decoder_cli(__doc__, QWEN3, tokenizer_flag("tokenizer.json or a directory holding one; default: the model "
                                                       f"directory's, else the hub model's ({HUB_MODEL}'s for dN and .bin "
                                                       "files)"))
if __name__ == "__main__":  # the flags first: --help and a bad flag answer before torch's import (seconds)
    trainer_parser(QWEN3_CLI).parse_args()

import numpy as np
import torch

from pyllmc.families.qwen3 import (HF_BLOCK_TENSORS, Qwen3Config, depth_config, hf_config_fields,
                                   qwen3_config_problem, qwen3_header_bytes, read_qwen3)
from pyllmc.llama3_tokenizer import LlamaTokenizer, load_llama3_tokenizer
from pyllmc.reference.common import UserError, config_checker, huggingface_reachable, is_depth_name
from pyllmc.reference.data_loader import DistributedDataLoader
from pyllmc.reference.decoder import FileLayout, GroupedQueryAttention, PreNormBlock, StackedDecoder, SwiGLU
from pyllmc.reference.file_tensors import ModelFiles, hf_tensor_taker
from pyllmc.reference.tokenizer_files import bpe_tokenizer_file_bytes, write_bpe_tokenizer
from pyllmc.reference.training import ModelFamily, reference_main, seeded_sampler

# ----------------------------------------------------------------------------- the model


# check_config(config, where): the settings the model can be built with; a UserError naming `where` otherwise.
check_config = config_checker(qwen3_config_problem, "Qwen3")


def rope_inv_freq(c: Qwen3Config) -> torch.Tensor:
    """(HS/2,) float32 inverse frequencies theta^(-2i/HS) of the plain RoPE (no scaling), HS = head_dim."""
    HS = c.head_dim
    return 1.0 / (c.rope_theta ** (torch.arange(0, HS, 2, dtype=torch.int64).float() / HS))


# The model file's tensors between wte and lnfw, each stacked over layers, and the from-scratch init rule.
FILE_LAYOUT = FileLayout(
    block_tensors={"ln1w": "ln_1", "qkvw": "attn.c_attn", "qnormw": "attn.q_norm", "knormw": "attn.k_norm",
                   "attprojw": "attn.c_proj", "ln2w": "ln_2", "fcw": "mlp.c_fc", "fcw2": "mlp.c_fc2",
                   "fcprojw": "mlp.c_proj"},
    norm_tensors=("ln1w", "qnormw", "knormw", "ln2w", "lnfw"),
    residual_tensors=("attprojw", "fcprojw"),
)


class Qwen3(StackedDecoder):
    """Pre-norm blocks (pyllmc/reference/decoder.py) of grouped-query attention with QK-norm (q and k RMS-normalised
    per head with learned weights, eps norm_eps, before RoPE) whose width NH * head_dim may differ from C, and SwiGLU.

    init_weights(seed), from scratch (Llama 3's rule): one torch generator seeded with `seed` draws normal_ once per
    model-file tensor that is not a norm, in file order, over the whole tensor stacked across layers: wte, qkvw,
    attprojw, fcw, fcw2, fcprojw, lm_head; std 0.02, attprojw and fcprojw 0.02/sqrt(2L). RMSNorm weights (ln1w,
    qnormw, knormw, ln2w, lnfw) are 1."""

    def __init__(self, config: Qwen3Config, flash: bool = False):
        check_config(config, "model")
        c = config

        def make_block() -> PreNormBlock:
            return PreNormBlock(c.n_embd, c.norm_eps,
                                attn=lambda: GroupedQueryAttention(c.n_embd, c.n_head, c.n_kv_head, c.head_dim, flash,
                                                                   qk_norm_eps=c.norm_eps),
                                mlp=lambda: SwiGLU(c.n_embd, c.ffn_hidden))

        super().__init__(config, make_block, rope_inv_freq(config), FILE_LAYOUT)


# ----------------------------------------------------------------------------- Hugging Face import and export

# per layer: transformers' Qwen3ForCausalLM module (model.layers.{i}.<key>) -> ours (transformer.h.{i}.<value>), through
# the family's table of the model file's names; q_proj, k_proj and v_proj are stacked in our attn.c_attn
HF_BLOCK = {hf_name: FILE_LAYOUT.block_tensors[file_name] for hf_name, file_name in HF_BLOCK_TENSORS.items()}


def config_from_hf(c, where: str) -> Qwen3Config:
    """Our config from a transformers Qwen3Config; a UserError (one line) for what the reference cannot run."""
    if getattr(c, "model_type", "qwen3") != "qwen3":
        raise UserError(f"{where}: a {c.model_type!r} model, not Qwen3 (train_qwen3.py runs Qwen3ForCausalLM)")
    layer_types = getattr(c, "layer_types", None) or []
    if getattr(c, "use_sliding_window", False) or any(t != "full_attention" for t in layer_types):
        raise UserError(f"{where}: sliding-window attention is not supported (use_sliding_window must be false)")
    if getattr(c, "hidden_act", "silu") != "silu" or getattr(c, "attention_bias", False):
        raise UserError(f"{where}: unsupported Qwen3 variant (needs hidden_act silu and no attention bias)")
    rope = dict(getattr(c, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default":
        raise UserError(f"{where}: unsupported RoPE type {rope['rope_type']!r} (only the default, unscaled RoPE)")
    config = Qwen3Config(
        block_size=int(c.max_position_embeddings), vocab_size=int(c.vocab_size), n_layer=int(c.num_hidden_layers),
        n_head=int(c.num_attention_heads), n_kv_head=int(c.num_key_value_heads or c.num_attention_heads),
        n_embd=int(c.hidden_size), head_dim=int(getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads),
        ffn_hidden=int(c.intermediate_size), norm_eps=float(c.rms_norm_eps),
        rope_theta=float(rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))),
        tied_embeddings=bool(getattr(c, "tie_word_embeddings", False)))
    check_config(config, where)
    return config


def hf_config(c: Qwen3Config):
    """The transformers Qwen3Config of our config (full attention, default RoPE, no biases)."""
    from transformers import Qwen3Config as HFQwen3Config

    return HFQwen3Config(**hf_config_fields(c))  # the fields dev/eval/export_hf.py's config.json holds


def hf_state_dict_of(model: Qwen3, get: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
    """get(parameter) of every weight under transformers' Qwen3ForCausalLM names (c_attn's split back into q_proj,
    k_proj, v_proj); lm_head.weight is listed also when it is tied to the embedding."""
    c = model.config
    sd = {"model.embed_tokens.weight": get(model.transformer.wte.weight),
          "model.norm.weight": get(model.transformer.ln_f.weight), "lm_head.weight": get(model.lm_head.weight)}
    for i, block in enumerate(model.transformer.h):
        prefix = f"model.layers.{i}."
        kv_width = c.n_kv_head * c.head_dim
        q, k, v = get(block.attn.c_attn.weight).split([c.attention_width, kv_width, kv_width])
        sd.update({prefix + "self_attn.q_proj.weight": q, prefix + "self_attn.k_proj.weight": k,
                   prefix + "self_attn.v_proj.weight": v})
        sd.update({prefix + hf_name + ".weight": get(block.get_submodule(ours).weight)
                   for hf_name, ours in HF_BLOCK.items()})
    return sd


def hf_state_dict(model: Qwen3) -> dict[str, torch.Tensor]:
    """Our weights (copies) under transformers' Qwen3ForCausalLM names."""
    return hf_state_dict_of(model, lambda p: p.detach().clone())


def from_hf_model(hf, where: str, flash: bool = False) -> Qwen3:
    """Our Qwen3 from a transformers Qwen3ForCausalLM, through hf_state_dict_of's table: q_proj, k_proj and v_proj
    copied into their rows of c_attn, nothing permuted."""
    model = Qwen3(config_from_hf(hf.config, where), flash)
    take = hf_tensor_taker(hf.state_dict(), where)
    with torch.no_grad():
        for name, ours in hf_state_dict_of(model, lambda p: p).items():  # parameters, and views of c_attn's rows
            if name == "lm_head.weight" and model.config.tied_embeddings:
                continue  # the embedding itself
            ours.copy_(take(name))
    return model


def to_hf_model(model: Qwen3):
    """A transformers Qwen3ForCausalLM holding our weights (float32, eval mode): the converter back."""
    from transformers import Qwen3ForCausalLM

    hf = Qwen3ForCausalLM(hf_config(model.config)).eval()
    hf.load_state_dict(hf_state_dict(model), strict=True)
    return hf


def one_line(e: Exception) -> str:
    """An exception's message on one line, cut to 200 characters."""
    return " ".join(str(e).split())[:200]


def from_hub_or_dir(load: Callable[..., object], name: str, what: str):
    """load(name, ...) from a local directory, else the Hugging Face cache, else the hub when it answers; one
    UserError line otherwise."""
    if Path(name).is_dir():
        try:
            return load(name)
        except (OSError, ValueError) as e:
            raise UserError(f"--model {name}: not a Hugging Face {what} directory ({one_line(e)})") from None
    try:
        return load(name, local_files_only=True)
    except (OSError, ValueError):
        if not huggingface_reachable(timeout=3.0):
            raise UserError(f"--model {name}: not a directory, not in the Hugging Face cache, and huggingface.co "
                            "cannot be reached (offline? download it elsewhere and pass its directory)") from None
    try:
        return load(name)
    except (OSError, ValueError) as e:
        raise UserError(f"--model {name}: cannot load it from the hub ({one_line(e)})") from None


def load_hf_qwen3(name: str, flash: bool) -> Qwen3:
    """A Qwen3ForCausalLM from a local directory or a hub name: its config checked before the weights are read."""
    from transformers import AutoConfig, Qwen3ForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    where = f"--model {name}"
    config_from_hf(from_hub_or_dir(AutoConfig.from_pretrained, name, "Qwen3"), where)
    hf = from_hub_or_dir(lambda n, **kw: Qwen3ForCausalLM.from_pretrained(n, dtype=torch.float32, **kw), name, "Qwen3")
    return from_hf_model(hf, where, flash)


# the model file and the debug state (pyllmc.reference.file_tensors.ModelFiles)
FILES = ModelFiles(Qwen3, QWEN3, qwen3_header_bytes, read_qwen3, global_names=("wte", "lnfw", "lm_head"))
stacked, write_model, read_model = FILES.stacked, FILES.write_model, FILES.read_model
reference_steps, write_debug_state = FILES.reference_steps, FILES.write_debug_state


def load_model(name: str, seed: int, vocab_size: int, flash: bool = False) -> tuple[Qwen3, str]:
    """Model from a name: dN from scratch (vocab from the tokenizer), one of our qwen3 .bin files, or a Hugging Face
    Qwen3 (directory or hub name). Returns it and the stem of the files written for it."""
    return FILES.load_model(name, seed, lambda depth: depth_config(depth, vocab_size), load_hf_qwen3, flash)


# ----------------------------------------------------------------------------- llmc .bin files


def tokenizer_file_bytes(tok: LlamaTokenizer) -> list[bytes]:
    """Header and body of the tokenizer file (Llama 3's layout, version 3; end-of-text and BOS both <|endoftext|> for
    Qwen3's tokenizer)."""
    return bpe_tokenizer_file_bytes(QWEN3, tok)


def write_tokenizer(tok: LlamaTokenizer, filename: str | Path) -> None:
    write_bpe_tokenizer(QWEN3, tok, filename)


# ----------------------------------------------------------------------------- tokenizer and data


def hub_tokenizer_json(repo: str) -> str:
    """tokenizer.json of a hub model: from the Hugging Face cache, else downloaded when the hub answers."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    try:
        return hf_hub_download(repo, "tokenizer.json", local_files_only=True)
    except Exception:
        if not huggingface_reachable(timeout=3.0):
            raise UserError(f"cannot load the tokenizer of {repo}: it is not in the Hugging Face cache and "
                            "huggingface.co cannot be reached (offline? pass --tokenizer with a local tokenizer.json "
                            "or directory, e.g. one made by dev/data/make_test_tokenizer.py --delimiter endoftext)"
                            ) from None
    try:
        return hf_hub_download(repo, "tokenizer.json")
    except Exception as e:
        raise UserError(f"cannot load the tokenizer of {repo}: {one_line(e)}") from None


def resolve_tokenizer(args: argparse.Namespace) -> LlamaTokenizer:
    """--tokenizer; else the model directory's tokenizer.json; else the hub's: --model's when it is a hub name,
    Qwen/Qwen3-0.6B's for dN and our .bin files."""
    if args.tokenizer:
        return load_llama3_tokenizer(args.tokenizer)
    if Path(args.model).is_dir():
        if not (Path(args.model) / "tokenizer.json").is_file():
            raise UserError(f"--model {args.model}: the directory has no tokenizer.json (pass --tokenizer)")
        return load_llama3_tokenizer(args.model)
    hub = HUB_MODEL if is_depth_name(args.model) or args.model.endswith(".bin") else args.model
    return load_llama3_tokenizer(hub_tokenizer_json(hub))


class Qwen3DataLoader(DistributedDataLoader):
    """The references' loader on llama-3 shards only (uint32 ids, below the model's vocab size): a gpt-2 shard's
    uint16 ids would read as valid ids of another tokenizer."""

    def _load(self, shard: int) -> None:
        path = Path(self.files[shard])
        head = np.fromfile(path, dtype="<i4", count=1) if path.stat().st_size >= 4 else np.zeros(1, dtype="<i4")
        if int(head[0]) != QWEN3.shards.magic:
            desc = QWEN3.shards.model_desc
            raise UserError(f"{path}: not a {desc} token shard (magic {int(head[0])}); make them with e.g. "
                            f"python dev/data/tinyshakespeare.py --model_desc {desc} --tokenizer DIR")
        super()._load(shard)


# ----------------------------------------------------------------------------- training


def qwen3_family(args: argparse.Namespace) -> ModelFamily:
    tok = resolve_tokenizer(args)
    model, stem = load_model(args.model, args.seed, tok.vocab_size, bool(args.flash))
    c = model.config
    if tok.vocab_size > c.vocab_size:  # a hub Qwen3's vocab is padded past its tokenizer's 151,669 ids
        raise UserError(f"the tokenizer has {tok.vocab_size} tokens, more than the model's vocab {c.vocab_size}")
    write_files = FILES.file_writer(args, model, stem, lambda: write_tokenizer(tok, QWEN3.tokenizer_file))
    return ModelFamily(model=model, description=f"L={c.n_layer} NH={c.n_head} NKV={c.n_kv_head} HS={c.head_dim} "
                       f"C={c.n_embd} FFN={c.ffn_hidden} V={c.vocab_size} tied={int(c.tied_embeddings)}",
                       loader=Qwen3DataLoader, write_files=write_files,
                       make_sampler=seeded_sampler(args, tok.bos, tok.decode), write_model=write_model)


def main(argv: list[str] | None = None) -> int:
    return reference_main(QWEN3_CLI, qwen3_family, argv)


if __name__ == "__main__":
    sys.exit(main())
