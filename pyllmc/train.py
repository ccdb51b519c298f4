"""Train GPT-2 from Python with the C engine; data-parallel under mpirun (mpi4py).

    python -m pyllmc.train -e d12 -i "dev/data/tinyshakespeare/*train.bin" -b 4 -t 64 -x 40
    mpirun -np 2 python -m pyllmc.train -e d12 -b 2 -t 64 -x 40      # same tokens per step as -b 4

The flags are ./train_gpt2's (a subset: no resume, HellaSwag, ZeRO or outlier skipping). Each process
reads its own slice of every batch exactly like the C data loader; after the backward passes the
gradients are averaged in place with one MPI Allreduce on the flat gradient buffer (a numpy view into
C memory, no copies), then every process takes the same AdamW step.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from pyllmc._core import LlmcError, ffi, lib
from pyllmc.data import LR_SCHEDULES, DataLoader, LRScheduler, Tokenizer
from pyllmc.model import GPT2

INIT_SEED = 42
SAMPLER_SEED = 1337
TS = "dev/data/tinyshakespeare"


class UserError(Exception):
    """Bad flags or files: reported as one line, exit status 1."""


class Parser(argparse.ArgumentParser):
    """An unknown or malformed flag is one `error:` line (exit 2), not a usage dump."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m pyllmc.train", add_help=False,
                                description="Trains GPT-2 with llmc's C engine from Python; "
                                            "data-parallel under mpirun (gradients averaged with mpi4py).",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = p.add_argument
    a("--help", action="help", help="show this help and exit")
    a("-i", dest="train_data", default=f"{TS}/tiny_shakespeare_train.bin", help="train token shards (glob)")
    a("-j", dest="val_data", default=f"{TS}/tiny_shakespeare_val.bin", help="validation token shards (glob; '' = none)")
    a("-e", dest="model", default="gpt2_124M.bin", help="checkpoint to start from, or dN / gpt2:dN / gpt3:cN from scratch")
    a("-o", dest="output_dir", default="", help="output directory for main.log and checkpoints ('' = none)")
    a("-b", dest="B", type=int, default=4, help="micro-batch size B (per process)")
    a("-t", dest="T", type=int, default=64, help="sequence length T")
    a("-d", dest="total_batch", type=int, default=-1, help="total batch in tokens (-1 = B*T*processes; more = gradient accumulation)")
    a("-x", dest="max_steps", type=int, default=40, help="optimizer steps (-1 = one epoch of -i)")
    a("-k", dest="schedule", default="cosine", choices=LR_SCHEDULES, help="learning rate schedule")
    a("-l", dest="lr", type=float, default=3e-4, help="peak learning rate")
    a("-u", dest="warmup", type=int, default=0, help="warmup steps")
    a("-q", dest="final_frac", type=float, default=1.0, help="final learning rate as a fraction of the peak")
    a("-c", dest="weight_decay", type=float, default=0.0, help="AdamW weight decay (2-D weights only)")
    a("-v", dest="val_every", type=int, default=10, help="validation loss every N steps (0 = never)")
    a("-m", dest="val_steps", type=int, default=10, help="validation batches per evaluation")
    a("-s", dest="sample_every", type=int, default=20, help="print a text sample every N steps (0 = never)")
    a("-g", dest="gen_tokens", type=int, default=64, help="tokens per sample")
    a("-n", dest="checkpoint_every", type=int, default=0, help="write model_%%08d.bin to -o every N steps and at the end (0 = never)")
    a("-a", dest="overfit", type=int, default=0, choices=(0, 1), help="1 = train on the first batch only")
    a("--grad_clip", type=float, default=1.0, help="clip gradients to this global norm (0 = off)")
    a("--tokenizer", default="gpt2_tokenizer.bin", help="tokenizer for decoding samples")
    return p


def check_args(args: argparse.Namespace) -> None:
    for flag, value, lo in (("-b", args.B, 1), ("-t", args.T, 1), ("-m", args.val_steps, 1), ("-g", args.gen_tokens, 1),
                            ("-u", args.warmup, 0), ("-v", args.val_every, 0), ("-s", args.sample_every, 0),
                            ("-n", args.checkpoint_every, 0)):
        if value < lo:
            raise UserError(f"flag {flag}: must be >= {lo}, got {value}")
    if args.max_steps < -1 or args.max_steps == 0:
        raise UserError(f"flag -x: must be >= 1 or -1 (one epoch), got {args.max_steps}")
    if not (math.isfinite(args.lr) and args.lr >= 0):
        raise UserError(f"flag -l: learning rate must be a finite number >= 0, got {args.lr}")
    if not 0.0 <= args.final_frac <= 1.0:
        raise UserError(f"flag -q: must be in [0, 1], got {args.final_frac}")
    if args.checkpoint_every > 0 and not args.output_dir:
        raise UserError("flag -n needs an output directory (-o)")


def mpi_setup() -> tuple[Any, int, int]:
    """(communicator or None, rank, number of processes); MPI only when launched by mpirun/srun."""
    launched = any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"))
    if not launched:
        return None, 0, 1
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    return comm, comm.Get_rank(), comm.Get_size()


def build_model(spec: str) -> GPT2:
    """A descriptor (dN, gpt2:dN, gpt3:cN) inits from scratch with seed 42, anything else is a checkpoint."""
    cfg = ffi.new("GPT2Config*")
    why = ffi.new("char[256]")
    kind = lib.pyllmc_config_from_descriptor(spec.encode(), cfg, why, 256)
    if kind < 0:
        raise UserError(f"-e {spec}: bad model descriptor: {ffi.string(why).decode()}")
    if kind == 1:
        return GPT2.from_scratch(spec, seed=INIT_SEED)
    if not Path(spec).is_file():
        raise UserError(f"{spec}: no such checkpoint (flag -e; python train_gpt2.py writes gpt2_124M.bin, "
                        "or use -e d12 to init from scratch)")
    return GPT2.from_checkpoint(spec)


def allreduce_mean(x: float, comm: Any) -> float:
    return x if comm is None else comm.allreduce(x) / comm.Get_size()


def evaluate(model: GPT2, loader: DataLoader, steps: int, comm: Any) -> float:
    loader.reset()
    total = 0.0
    for _ in range(steps):
        x, y = loader.next_batch()
        total += model.forward(x, y, return_logits=False)[1]
    return allreduce_mean(total / steps, comm)


def train(args: argparse.Namespace, comm: Any, rank: int, nproc: int) -> None:
    say = print if rank == 0 else (lambda *a, **k: None)
    for flag, pattern in (("-i", args.train_data), ("-j", args.val_data if args.val_every > 0 else "")):
        if pattern and not __import__("glob").glob(pattern):
            raise UserError(f"{pattern}: no such file (flag {flag}; run python dev/data/tinyshakespeare.py to create it)")
    model = build_model(args.model)
    cfg = model.config
    B, T = args.B, args.T
    if T > cfg.max_seq_len:
        raise UserError(f"flag -t: T = {T} is larger than the model's max sequence length {cfg.max_seq_len}")
    micro_tokens = B * T * nproc
    total_batch = micro_tokens if args.total_batch == -1 else args.total_batch
    if total_batch <= 0 or total_batch % micro_tokens != 0:
        raise UserError(f"flag -d: total batch {total_batch} tokens is not a positive multiple of "
                        f"B*T*processes = {B}*{T}*{nproc} = {micro_tokens}")
    accum = total_batch // micro_tokens
    train_loader = DataLoader(args.train_data, B, T, rank, nproc, vocab_size=cfg.vocab_size)
    use_val = args.val_every > 0 and bool(args.val_data)
    val_loader = DataLoader(args.val_data, B, T, rank, nproc, vocab_size=cfg.vocab_size) if use_val else None
    max_steps = args.max_steps if args.max_steps != -1 else train_loader.num_tokens // total_batch
    if max_steps < 1:
        raise UserError(f"{args.train_data}: smaller than one total batch of {total_batch} tokens (flag -x -1)")
    schedule = LRScheduler(args.schedule, args.lr, args.warmup, max_steps, args.final_frac)
    tokenizer = Tokenizer(args.tokenizer) if rank == 0 and args.sample_every > 0 else None
    log = None
    if args.output_dir:
        out = Path(args.output_dir)
        if rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            log = open(out / "main.log", "w")
    say(f"model: {args.model} L={cfg.num_layers} NH={cfg.num_heads} C={cfg.channels} maxT={cfg.max_seq_len} "
        f"V={cfg.vocab_size} Vp={cfg.padded_vocab_size}, {model.num_parameters} parameters")
    say(f"train: {train_loader.num_tokens} tokens; batch {total_batch} tokens = {nproc} processes x B={B} x T={T} "
        f"x {accum} accumulation steps; {max_steps} steps")

    step_times: list[float] = []
    for step in range(max_steps + 1):
        last = step == max_steps
        if val_loader is not None and (step % args.val_every == 0 or last):
            val_loss = evaluate(model, val_loader, args.val_steps, comm)
            say(f"val loss {val_loss:.6f}")
            if log:
                log.write(f"s:{step} tel:{val_loss:f}\n")
                log.flush()
        if tokenizer is not None and ((step > 0 and step % args.sample_every == 0) or last):
            tokens = model.generate([tokenizer.eot_token], min(args.gen_tokens, cfg.max_seq_len - 1),
                                    temperature=1.0, seed=SAMPLER_SEED + step)
            say(f"generating:\n---\n{tokenizer.decode(tokens[1:])}\n---")
        if args.checkpoint_every > 0 and ((step > 0 and step % args.checkpoint_every == 0) or last):
            if rank == 0:
                model.save(Path(args.output_dir) / f"model_{step:08d}.bin")
                say(f"wrote checkpoint for step {step} to {args.output_dir}")
        if last:
            break

        t0 = time.perf_counter()
        model.zero_grad()
        loss_sum = 0.0
        for _ in range(accum):
            if args.overfit:
                train_loader.reset()
            x, y = train_loader.next_batch()
            loss_sum += model.forward(x, y, return_logits=False)[1]
            model.backward(1.0 / accum)
        loss = loss_sum / accum
        if comm is not None and nproc > 1:
            from mpi4py import MPI
            comm.Allreduce(MPI.IN_PLACE, model.grads_flat, op=MPI.SUM)  # in place on the C buffer
            model.grads_flat *= np.float32(1.0 / nproc)
            loss = allreduce_mean(loss, comm)
        lr = schedule(step)
        norm = model.step(lr, weight_decay=args.weight_decay, grad_clip=args.grad_clip)
        dt = time.perf_counter() - t0
        step_times.append(dt)
        say(f"step {step + 1}/{max_steps} | loss {loss:.6f} | lr {lr:.2e} | norm {norm:.4f} | "
            f"{1000 * dt:.1f} ms | {total_batch / dt:.0f} tok/s", flush=True)
        if log:
            log.write(f"s:{step} trl:{loss:f} lr:{lr:f} norm:{norm:f}\n")
            log.flush()
    timed = step_times[1:] or step_times  # the first step warms up
    say(f"average step time {1000 * sum(timed) / len(timed):.1f} ms")
    if log:
        log.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    comm, rank, nproc = mpi_setup()
    try:
        check_args(args)
        train(args, comm, rank, nproc)
    except (UserError, LlmcError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        if comm is not None and nproc > 1:
            comm.Abort(1)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
