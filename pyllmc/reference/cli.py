"""
The references' command line: the settings the parsed flags give the optimizers and the debug state, and run_main,
which turns a user's error into one line. The parser itself is pyllmc.reference.flags' (no torch).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

import torch

from pyllmc.reference.debug_state import DebugOptimizer, mask_half
from pyllmc.reference.optimizers import OptimizerSettings


def optimizer_settings(args: argparse.Namespace) -> OptimizerSettings:
    return OptimizerSettings(name=args.optimizer, lr=args.learning_rate, weight_decay=args.weight_decay, betas=(0.9, 0.95),
                             eps=1e-8, fused=bool(args.fused_adamw), muon_lr=args.muon_lr, muon_momentum=args.muon_momentum,
                             muon_nesterov=bool(args.muon_nesterov), muon_ns_steps=args.muon_ns_steps,
                             muon_adjust_lr=args.muon_adjust_lr)


def debug_optimizer(args: argparse.Namespace) -> DebugOptimizer:
    """The debug state's optimizer: the fixed AdamW settings, and with --optimizer muon the Muon flags."""
    return DebugOptimizer(steps=args.debug_steps, name=args.optimizer, muon_lr=args.muon_lr, muon_momentum=args.muon_momentum,
                          muon_nesterov=bool(args.muon_nesterov), muon_ns_steps=args.muon_ns_steps,
                          muon_adjust_lr=args.muon_adjust_lr)


def debug_targets(args: argparse.Namespace, y: torch.Tensor) -> torch.Tensor:
    """The debug state's targets: the batch's, with --mask_half 1 about half of them -1 (debug_state.mask_half)."""
    return mask_half(y) if args.mask_half else y


def run_main(train: Callable[[argparse.Namespace], None], args: argparse.Namespace,
             errors: tuple[type[Exception], ...], message: Callable[[Exception], str] = str) -> int:
    """train(args) as a command: one of `errors` prints one `error: message(e)` line and exits 1, Ctrl-C 130."""
    try:
        train(args)
    except errors as e:
        print(f"error: {message(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0
