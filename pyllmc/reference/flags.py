"""
The references' command line, without torch: one parser for every family's train_*.py (trainer_parser, the family's
defaults from its description). A script parses its flags with it before it imports torch, so --help and a bad
flag answer at once rather than after torch's import (3-4 s on a small cloud CPU).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

from pyllmc.family import Family

OPTIMIZERS = ("adamw", "muon")
MUON_ADJUST_LR = ("original", "match_rms_adamw")


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad flags give one `error:` line (and a pointer to --help) instead of a usage dump."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def add_optimizer_args(p: argparse.ArgumentParser) -> None:
    """--optimizer and the --muon_* flags (every train_*.py): torch.optim.Muon's defaults."""
    a = p.add_argument
    a("--optimizer", default="adamw", choices=list(OPTIMIZERS),
      help="adamw, or muon: torch.optim.Muon on the blocks' 2-D weights, AdamW (--learning_rate) on the rest")
    a("--muon_lr", type=float, default=1e-3, help="Muon peak learning rate (the schedule scales it like --learning_rate)")
    a("--muon_momentum", type=float, default=0.95, help="Muon momentum")
    a("--muon_nesterov", type=int, default=1, choices=[0, 1], help="1 = Nesterov momentum for Muon")
    a("--muon_ns_steps", type=int, default=5, help="Newton-Schulz iterations per Muon update (1..99)")
    a("--muon_adjust_lr", default="original", choices=list(MUON_ADJUST_LR),
      help="Muon lr adjustment: original = sqrt(max(1, rows/cols)), match_rms_adamw = 0.2 sqrt(max(rows, cols))")


def add_run_args(p: argparse.ArgumentParser, learning_rate: float) -> None:
    """The flags from --seed to --flash (every train_*.py): batch, schedule, evaluation, device."""
    a = p.add_argument
    a("--seed", type=int, default=42, help="seed of the from-scratch init and of sampling")
    a("--batch_size", type=int, default=4, help="micro-batch size B")
    a("--sequence_length", type=int, default=64, help="sequence length T")
    a("--total_batch_size", type=int, default=-1, help="tokens per optimizer step (-1 = B*T*processes, no accumulation)")
    a("--num_iterations", type=int, default=10, help="optimizer steps")
    a("--inference_only", type=int, default=0, help="forward only, no training")
    a("--learning_rate", type=float, default=learning_rate)
    a("--warmup_iters", type=int, default=0)
    a("--learning_rate_decay_frac", type=float, default=1.0, help="final LR as a fraction of --learning_rate")
    a("--weight_decay", type=float, default=0.0)
    a("--grad_clip", type=float, default=1.0, help="clip gradients to this global norm (0 = off)")
    a("--val_loss_every", type=int, default=0, help="every how many steps to evaluate val loss (0 = never)")
    a("--val_max_steps", type=int, default=20, help="batches per validation")
    a("--sample_every", type=int, default=0, help="every how many steps to print a sample (0 = never)")
    a("--gen_tokens", type=int, default=64, help="tokens per sample")
    a("--overfit_single_batch", type=int, default=0, help="train on the first batch only")
    a("--tensorcores", type=int, default=0, help="allow TF32 matmuls on CUDA")
    a("--device", default="", help="cpu|cuda|cuda:N|mps; default: the best available")
    a("--compile", type=int, default=0, help="torch.compile the model")
    a("--flash", type=int, default=0, help="scaled_dot_product_attention (flash) instead of explicit attention")


@dataclass(frozen=True)
class TrainerCli:
    """The trainers' command line (trainer_parser): the family's defaults (--input_bin, --model, --learning_rate)
    from its description, GPT-2's wording of the rest; train_llama3.py and train_nanochat.py override what they change."""

    description: str | None  # the script's docstring, shown by --help
    family: Family
    fused_adamw_help: str = "1 = torch's fused AdamW kernel (AdamW(fused=True)), CPU or CUDA"
    write_tensors_help: str = "write the checkpoints, tokenizer and debug state"
    add_family_args: Callable[[argparse.ArgumentParser], None] | None = None  # the family's own flags, after --model
    dtype_before_optimizer: bool = False  # --dtype listed before the --optimizer flags instead of after them


def decoder_cli(description: str | None, family: Family,
                add_family_args: Callable[[argparse.ArgumentParser], None] | None) -> TrainerCli:
    """The command line of the references after GPT-2's: their wording of --fused_adamw and --write_tensors (a
    tokenizer file among the written files), --dtype before the optimizer's flags."""
    return TrainerCli(description=description, family=family,
                      fused_adamw_help="1 = torch's fused AdamW kernel (AdamW(fused=True))",
                      write_tensors_help="write the model files, tokenizer file and debug state",
                      add_family_args=add_family_args, dtype_before_optimizer=True)


def add_dtype_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"], help="autocast dtype")


def trainer_parser(cli: TrainerCli) -> OneLineErrorParser:
    """The command line of every train_*.py: every flag once, the family's parts from `cli`."""
    p = OneLineErrorParser(description=cli.description, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--input_bin", default=cli.family.default_input_bin, help=cli.family.input_bin_help)
    a("--input_val_bin", default="", help="validation token shards (glob); empty = no validation")
    a("--output_dir", default="", help="directory for main.log and the final checkpoint")
    a("--model", default=cli.family.default_model, help=cli.family.model_help)
    if cli.add_family_args is not None:
        cli.add_family_args(p)
    add_run_args(p, learning_rate=cli.family.learning_rate)
    a("--fused_adamw", type=int, default=0, help=cli.fused_adamw_help)
    if cli.dtype_before_optimizer:
        add_dtype_arg(p)
    add_optimizer_args(p)
    if not cli.dtype_before_optimizer:
        add_dtype_arg(p)
    a("--zero_stage", type=int, default=0, choices=[0, 1], help="1 = shard the optimizer state across ranks (DDP)")
    a("--write_tensors", type=int, default=1, help=cli.write_tensors_help)
    a("--debug_steps", type=int, default=10, help="reference optimizer steps recorded in the debug state")
    a("--mask_half", type=int, default=0, choices=[0, 1],
      help="1 = a masked debug state (<stem>_masked_debug_state.bin): about half of the batch's targets -1 (not "
           "supervised), its losses the means over the rest")
    return p


def tokenizer_flag(help: str) -> Callable[[argparse.ArgumentParser], None]:
    """A TrainerCli's add_family_args for the families that read a tokenizer.json: --tokenizer, after --model."""
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("--tokenizer", default="", help=help)
    return add
