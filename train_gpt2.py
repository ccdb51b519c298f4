"""
llmc's PyTorch reference: a GPT-2 in one file, and the writers of every .bin file the C and CUDA
trainers read (model checkpoint, tokenizer, debug state). The training loop, command line, optimizers
and data loader every family shares are the package's (pyllmc/reference/).

Examples:
    python train_gpt2.py                                   # pretrained GPT-2 124M (d12 from scratch offline)
    python train_gpt2.py --model d12 --num_iterations 0    # just write gpt2_124M*.bin and the tokenizer
    torchrun --nproc_per_node 2 train_gpt2.py --device cpu --model d2 --batch_size 2
    python train_gpt2.py --model gpt2_124M.bin --input_bin "chat/*train*.bin" --sequence_length 256 \
        --write_tensors 0                                  # fine-tune a model file on chat shards (loss mask)
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pyllmc.families.gpt2 import GPT2
from pyllmc.reference.flags import TrainerCli, trainer_parser

GPT2_CLI = TrainerCli(description=__doc__, family=GPT2)
if __name__ == "__main__":  # the flags first: --help and a bad flag answer before torch's import (seconds)
    trainer_parser(GPT2_CLI).parse_args()

import torch
import torch.nn as nn
import torch.nn.functional as F

from pyllmc.families.gpt2 import EOT as GPT2_EOT, LAYER_PARAMETERS, VOCAB_SIZE as GPT2_VOCAB
# nanochat's chat tokens after GPT-2's 50,257 ids (the "nanochat" chat format): a GPT-2 model's V grows to 50,261
# (CHAT_VOCAB) when it meets chat shards
from pyllmc.families.gpt2 import CHAT_TOKENS, CHAT_VOCAB_SIZE as CHAT_VOCAB
from pyllmc.families.gpt2 import Gpt2Header, depth_shape, gpt2_header_bytes, gpt2_padded_vocab, read_gpt2
from pyllmc.model_file import VERSIONS, atomic_write, write_model_file
from pyllmc.reference.causal_lm import CausalLM, causal_attention
from pyllmc.reference.cli import debug_optimizer, debug_targets, run_main
from pyllmc.reference.common import UserError, huggingface_reachable, print0
from pyllmc.reference.data_loader import DistributedDataLoader, pattern_is_masked
from pyllmc.reference.debug_state import (
    DebugOptimizer,
    debug_state_chunks,
    debug_state_name,
    debug_state_summary,
    is_masked,
    reference_loss_noise,
    reference_steps as family_reference_steps,
)
from pyllmc.reference.file_tensors import read_model_file
from pyllmc.reference.optimizers import OptimizerSettings, is_block_matrix, make_optimizer
from pyllmc.reference.tokenizer_files import gpt2_encoding, write_gpt2_tokenizer
from pyllmc.reference.training import ModelFamily, train_loop
from pyllmc.token_shards import DataFormatError

PRETRAINED = {"gpt2": "124M", "gpt2-medium": "355M", "gpt2-large": "774M", "gpt2-xl": "1558M"}
DEPTH_SIZES = {12: "124M", 24: "355M", 36: "774M", 48: "1558M"}


# ----------------------------------------------------------------------------- the model


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = GPT2_VOCAB
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, flash: bool):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.n_head, self.n_embd, self.flash = config.n_head, config.n_embd, flash

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, HS)
        return self.c_proj(causal_attention(q, k, v, self.flash))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig, flash: bool):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config, flash)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(CausalLM):
    def __init__(self, config: GPTConfig, flash: bool = False):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                h=nn.ModuleList([Block(config, flash) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in GPT-2

    def init_weights(self, seed: int) -> None:
        """GPT-2's init, drawn from one generator in checkpoint order so the C trainer can reproduce it bit for bit."""
        g = torch.Generator().manual_seed(seed)
        std_residual = 0.02 / math.sqrt(2 * self.config.n_layer)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                    p.fill_(1.0)
                else:
                    p.zero_()
            self.transformer.wte.weight.normal_(0.0, 0.02, generator=g)
            self.transformer.wpe.weight.normal_(0.0, 0.02, generator=g)
            for block in self.transformer.h:
                block.attn.c_attn.weight.normal_(0.0, 0.02, generator=g)
                block.attn.c_proj.weight.normal_(0.0, std_residual, generator=g)
                block.mlp.c_fc.weight.normal_(0.0, 0.02, generator=g)
                block.mlp.c_proj.weight.normal_(0.0, std_residual, generator=g)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, return_logits: bool = True,
                reduction: str = "mean"):
        B, T = idx.size()
        if T > self.config.block_size:
            raise UserError(f"sequence length {T} exceeds the model's block size {self.config.block_size}")
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T, C)
        for block in self.transformer.h:
            x = block(x)
        return self.head_and_loss(self.transformer.ln_f(x), targets, return_logits, reduction)

    def configure_optimizers(self, weight_decay: float, lr: float, betas: tuple[float, float], eps: float,
                             zero_stage: int = 0, fused: bool = False) -> torch.optim.Optimizer:
        """AdamW on every parameter (make_optimizer with --optimizer adamw)."""
        settings = OptimizerSettings(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps, fused=fused)
        return make_optimizer(self, settings, is_block_matrix, zero_stage=zero_stage)


def depth_config(depth: int) -> GPTConfig:
    C, NH = depth_shape(depth)  # the family's dN rule
    return GPTConfig(n_layer=depth, n_head=NH, n_embd=C)


def from_hf_model(hf, flash: bool) -> GPT:
    """Our GPT from a transformers GPT2LMHeadModel (Conv1D weights are transposed)."""
    c = hf.config
    if getattr(c, "activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        raise UserError(f"unsupported activation {c.activation_function!r}: llmc's GPT-2 uses tanh GELU")
    config = GPTConfig(block_size=c.n_positions, vocab_size=c.vocab_size, n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd)
    model = GPT(config, flash)
    sd_hf = {k: v for k, v in hf.state_dict().items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    transposed = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    sd = model.state_dict()
    for k, v in sd_hf.items():
        if k not in sd:
            raise UserError(f"unexpected tensor {k!r} in the Hugging Face model")
        with torch.no_grad():
            sd[k].copy_(v.t() if k.endswith(transposed) else v)
    return model


def load_model(name: str, seed: int, flash: bool) -> tuple[GPT, str]:
    """Model from a name (gpt2*, dN, one of our .bin model files, or a local Hugging Face directory); returns it and
    its file-name stem."""
    if name.startswith("d") and name[1:].isdigit():
        depth = int(name[1:])
        if depth < 1:
            raise UserError(f"--model {name}: the depth must be at least 1 (e.g. d12)")
        model = GPT(depth_config(depth), flash)
        model.init_weights(seed)
        return model, f"{GPT2.name}_{DEPTH_SIZES.get(depth, name)}"
    if name.endswith(".bin"):
        return read_model(name, flash), Path(name).stem
    if Path(name).is_dir():
        from transformers import GPT2LMHeadModel

        try:
            hf = GPT2LMHeadModel.from_pretrained(name)
        except (OSError, ValueError) as e:
            raise UserError(f"--model {name}: not a Hugging Face GPT-2 directory ({' '.join(str(e).split())[:200]})") from None
        model = from_hf_model(hf, flash)
        return model, f"{GPT2.name}_{Path(name).name}"
    if name not in PRETRAINED:
        raise UserError(f"unknown model {name!r}: use gpt2, gpt2-medium, gpt2-large, gpt2-xl, dN (e.g. d12), a .bin "
                        "model file or a directory")
    depth = {"gpt2": 12, "gpt2-medium": 24, "gpt2-large": 36, "gpt2-xl": 48}[name]
    try:
        from transformers import GPT2LMHeadModel
    except ImportError:
        print0(f"warning: pretrained '{name}' weights need the transformers package, which is not installed: "
               f"initialising d{depth} from scratch instead")
        return load_model(f"d{depth}", seed, flash)
    try:
        hf = GPT2LMHeadModel.from_pretrained(name, local_files_only=True)
    except OSError:
        hf = GPT2LMHeadModel.from_pretrained(name) if huggingface_reachable() else None
    if hf is None:
        print0(f"warning: pretrained '{name}' weights cannot be downloaded (no connection to huggingface.co): "
               f"initialising d{depth} from scratch instead")
        return load_model(f"d{depth}", seed, flash)
    return from_hf_model(hf, flash), f"{GPT2.name}_{PRETRAINED[name]}"


# ----------------------------------------------------------------------------- llmc .bin files


def llmc_tensors(model: GPT, get: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
    """The 16 tensors of the checkpoint, in order, stacked over layers; wte padded with zero rows to Vp."""
    tr, h = model.transformer, model.transformer.h
    wte = get(tr.wte.weight)
    wte = torch.cat([wte, torch.zeros(gpt2_padded_vocab(wte.size(0)) - wte.size(0), wte.size(1), dtype=wte.dtype)])
    stacked = [torch.stack([get(b.get_parameter(path)) for b in h]) for path in LAYER_PARAMETERS.values()]
    return [wte, get(tr.wpe.weight), *stacked, get(tr.ln_f.weight), get(tr.ln_f.bias)]


def write_model(model: GPT, filename: str | Path, dtype: str) -> None:
    """Checkpoint: header (version 3 fp32, 5 bf16) then the 16 tensors."""
    c = model.config
    header = Gpt2Header(VERSIONS[dtype], c.block_size, c.vocab_size, c.n_layer, c.n_head, c.n_embd,
                        gpt2_padded_vocab(c.vocab_size))
    write_model_file(filename, gpt2_header_bytes(header), llmc_tensors(model, lambda p: p.detach().cpu().float()), dtype)
    print0(f"wrote {filename}")


def read_model(filename: str | Path, flash: bool = False) -> GPT:
    """A GPT from one of our checkpoints (fp32 or bf16), validated like the C loader: UserError otherwise."""
    h, t = read_model_file(read_gpt2, filename)
    model = GPT(GPTConfig(block_size=h.maxT, vocab_size=h.V, n_layer=h.L, n_head=h.NH, n_embd=h.C), flash)
    tr = model.transformer
    with torch.no_grad():
        tr.wte.weight.copy_(torch.from_numpy(t["wte"][: h.V]))
        tr.wpe.weight.copy_(torch.from_numpy(t["wpe"]))
        for name, path in LAYER_PARAMETERS.items():
            for l, block in enumerate(tr.h):
                block.get_parameter(path).copy_(torch.from_numpy(t[name][l]))
        tr.ln_f.weight.copy_(torch.from_numpy(t["lnfw"]))
        tr.ln_f.bias.copy_(torch.from_numpy(t["lnfb"]))
    return model


def reference_steps(model: GPT, x: torch.Tensor, y: torch.Tensor, opt: DebugOptimizer,
                    dtype: torch.dtype = torch.float32):
    """The reference steps of the debug state on the GPT (AdamW, or Muon on the blocks' matrices + AdamW):
    (logits, loss, grads in the checkpoint's order, losses, grad norms before clipping)."""
    return family_reference_steps(model, x, y, opt, dtype, is_block_matrix, llmc_tensors)


def write_debug_state(model: GPT, x: torch.Tensor, y: torch.Tensor, filename: str | Path,
                      opt: DebugOptimizer = DebugOptimizer()) -> None:
    """Debug state: one batch, its logits, loss and every gradient, the losses of `opt.steps` reference
    steps, then each step loss's float32 noise (header[11] = their count; after everything llm.c reads).
    header[12..17] name the optimizer of the steps (DebugOptimizer.header_fields); header[18] = 1 when y holds -1
    (a masked state: the losses are means over the supervised positions)."""
    x, y = x.cpu(), y.cpu()
    logits, loss, grads, losses, _ = reference_steps(model, x, y, opt)
    noise = reference_loss_noise(model, x, y, opt, losses, reference_steps)
    atomic_write(filename, debug_state_chunks(GPT2.debug_state_magic, GPT2.debug_state_version, opt, x, y, logits, loss,
                                              grads, [losses, noise]))
    print0(f"wrote {filename} ({debug_state_summary(x, y, opt, losses, noise)})")


# ----------------------------------------------------------------------------- training


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return trainer_parser(GPT2_CLI).parse_args(argv)


def grow_vocab_for_chat(model: GPT, pattern: str) -> None:
    """A model of GPT-2's 50,257 ids meeting chat shards: V becomes 50,261 (CHAT_TOKENS; Vp stays 50,304), the new rows
    of wte (the tied lm_head) the mean of its first 50,257 rows, as ./train_gpt2 grows it."""
    if model.config.vocab_size != GPT2_VOCAB or not pattern_is_masked(pattern):
        return
    model.grow_vocab(CHAT_VOCAB)
    print0(f"chat shards: vocab size {GPT2_VOCAB} -> {CHAT_VOCAB} for {', '.join(CHAT_TOKENS)}; their rows of wte "
           f"(the tied lm_head) start as the mean of its first {GPT2_VOCAB} rows")


def decode_with_chat_tokens(ids: list[int]) -> str:
    """GPT-2's decoding, with the chat tokens (ids 50,257 .. 50,260) as their names."""
    enc, out, run = gpt2_encoding(), [], []
    for i in ids:
        if GPT2_VOCAB <= i < CHAT_VOCAB:
            out += [enc.decode(run), CHAT_TOKENS[i - GPT2_VOCAB]]
            run = []
        else:
            run.append(i)
    return "".join(out) + enc.decode(run)


def gpt2_family(args: argparse.Namespace) -> ModelFamily:
    model, stem = load_model(args.model, args.seed, bool(args.flash))
    grow_vocab_for_chat(model, args.input_bin)

    def write_files(x: torch.Tensor, y: torch.Tensor) -> None:
        # the tokenizer first: tiktoken's encoding may need a download, and a failure must leave no model file that
        # `make` would take for a finished step
        write_gpt2_tokenizer(GPT2.tokenizer_file)
        write_model(model, f"{stem}.bin", "float32")
        write_model(model, f"{stem}_bf16.bin", "bfloat16")
        debug_opt = debug_optimizer(args)
        y = debug_targets(args, y)
        name = debug_state_name(stem, is_masked(y), "" if debug_opt.name == "adamw" else debug_opt.name)
        write_debug_state(model, x, y, name, debug_opt)

    def make_sampler(device: str) -> Callable[[nn.Module], str]:
        def sample(raw_model: nn.Module) -> str:
            start = torch.tensor([[GPT2_EOT]], dtype=torch.long, device=device)
            out = raw_model.generate(start, args.gen_tokens, temperature=1.0, top_k=40)
            return decode_with_chat_tokens(out[0, 1:].tolist())
        return sample

    c = model.config
    return ModelFamily(model=model, description=f"L={c.n_layer} NH={c.n_head} C={c.n_embd}", loader=DistributedDataLoader,
                       write_files=write_files,
                       make_optimizer=lambda m, s, zero: make_optimizer(m, s, is_block_matrix, zero_stage=zero),
                       make_sampler=make_sampler, write_model=write_model)


# ----------------------------------------------------------------------------- the compact GPT-2 of dev/torch_minimal_step.py


class MinimalBlock(nn.Module):
    """LayerNorm, causal self-attention (SDPA), residual; LayerNorm, MLP with tanh-GELU, residual."""

    def __init__(self, C: int, NH: int):
        super().__init__()
        self.NH = NH
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.qkv(self.ln_1(x)).view(B, T, 3, self.NH, C // self.NH).permute(2, 0, 3, 1, 4)  # (B, NH, T, HS)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class MinimalGPT2(nn.Module):
    """GPT-2 dN as PyTorch's fastest step wants it (dev/torch_minimal_step.py): token and position embeddings, L
    blocks, final LayerNorm, the tied lm_head; returns the mean loss."""

    def __init__(self, L: int, C: int, NH: int, V: int, max_T: int = 1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(max_T, C)
        self.blocks = nn.ModuleList([MinimalBlock(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        for name, p in self.named_parameters():  # GPT-2's init: N(0, 0.02), the residual projections scaled
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # (B, T, V): the lm_head is wte
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


def minimal_model(depth: int, V: int) -> MinimalGPT2:
    """The compact GPT-2 dN (this reference's dN shapes) at vocabulary V."""
    C, NH = depth_shape(depth)
    return MinimalGPT2(depth, C, NH, V)


def train(args: argparse.Namespace) -> None:
    train_loop(args, gpt2_family)


def main(argv: list[str] | None = None) -> int:
    # OSError: e.g. --output_dir is a file
    return run_main(train, parse_args(argv), (UserError, DataFormatError, OSError))


if __name__ == "__main__":
    sys.exit(main())
