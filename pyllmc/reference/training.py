"""
The references' training loop, shared by every family (train_loop): DDP and ZeRO-1 under torchrun, gradient
accumulation, clipping, the learning-rate schedule of llmc/schedulers.h, validation loss, samples and main.log.
A family hands it a ModelFamily: its model, data loader, writers, optimizer and sampler.

On chat shards (a loss mask; the loader's targets are -1 where not supervised) the loss of an optimizer step is the
sum of the cross-entropies of its supervised positions over all its micro-batches and ranks, divided by their count
N_step (counted and all-reduced before the first backward); the val loss likewise over all val batches. A step with
no supervised position trains nothing and says so. Plain shards keep the mean over every position, as before.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn

from pyllmc.reference.cli import optimizer_settings, run_main
from pyllmc.reference.flags import TrainerCli, trainer_parser
from pyllmc.reference.common import UserError, print0
from pyllmc.reference.data_loader import DistributedDataLoader
from pyllmc.reference.optimizers import OptimizerSettings, skip_step
from pyllmc.token_shards import DataError, DataFormatError


def get_lr(step: int, lr: float, warmup: int, total: int, final_frac: float) -> float:
    """Linear warmup, then cosine decay from lr to lr * final_frac (the rule of llmc/schedulers.h)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    ratio = min(max((step - warmup) / (total - warmup), 0.0), 1.0) if total > warmup else 1.0
    lr_min = lr * final_frac
    return lr_min + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - lr_min)


def format_eta(seconds: float) -> str:
    s = int(max(seconds, 0))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def setup_distributed(device_arg: str) -> tuple[int, int, int, str]:
    """(rank, local_rank, world_size, device), initialising torch.distributed under torchrun."""
    if "RANK" not in os.environ:
        if device_arg:
            return 0, 0, 1, device_arg
        if torch.cuda.is_available():
            return 0, 0, 1, "cuda"
        return 0, 0, 1, "mps" if torch.backends.mps.is_available() else "cpu"
    rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    use_cuda = device_arg.startswith("cuda") or (not device_arg and torch.cuda.is_available())
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    device = f"cuda:{local_rank}" if use_cuda else (device_arg or "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    return rank, local_rank, world, device


def model_optimizer(model: nn.Module, settings: OptimizerSettings, zero_stage: int) -> object:
    """The ModelFamily.make_optimizer of a model that builds its own: model.configure_optimizers(settings, zero_stage)."""
    return model.configure_optimizers(settings, zero_stage)


@dataclass(kw_only=True)
class ModelFamily:
    """What train_loop needs from a model family (each train_*.py builds one); the rest is shared."""

    # .config.block_size and .config.vocab_size; forward(idx, targets, return_logits, reduction) -> (logits, loss)
    model: nn.Module
    description: str  # the shape, printed after "model NAME:"
    loader: type[DistributedDataLoader]  # the family's token shards
    write_files: Callable[[torch.Tensor, torch.Tensor], None]  # model files, tokenizer and debug state from one batch
    # (model, settings, zero stage) -> the optimizer; by default the model's configure_optimizers
    make_optimizer: Callable[[nn.Module, OptimizerSettings, int], object] = model_optimizer
    make_sampler: Callable[[str], Callable[[nn.Module], str]]  # device -> (model -> sample text)
    write_model: Callable[[nn.Module, str | Path, str], None]  # (model, file, dtype): the final checkpoint


def seeded_sampler(args: argparse.Namespace, start_id: int,
                   decode: Callable[[list[int]], str]) -> Callable[[str], Callable[[nn.Module], str]]:
    """A ModelFamily.make_sampler whose samples (--gen_tokens after start_id, top-k 40) draw from one generator
    seeded with --seed (train_llama3.py's and train_nanochat.py's)."""
    def make_sampler(device: str) -> Callable[[nn.Module], str]:
        sample_rng = torch.Generator(device=device).manual_seed(args.seed)

        def sample(raw_model: nn.Module) -> str:
            start = torch.tensor([[start_id]], dtype=torch.long, device=device)
            out = raw_model.generate(start, args.gen_tokens, temperature=1.0, top_k=40, generator=sample_rng)
            return decode(out[0, 1:].tolist())
        return sample
    return make_sampler


def reference_main(cli: TrainerCli, build: Callable[[argparse.Namespace], ModelFamily], argv: list[str] | None) -> int:
    """A decoder reference's main: its command line, then train_loop; a user's error (its tokenizer's and transformers'
    messages can span lines) is one `error:` line."""
    args = trainer_parser(cli).parse_args(argv)
    return run_main(lambda a: train_loop(a, build), args, (UserError, DataError, DataFormatError, OSError),
                    lambda e: " ".join(str(e).split()))


Batch = tuple[torch.Tensor, torch.Tensor]  # (inputs, targets), each (B, T); target -1: not supervised


def supervised_count(batches: list[Batch], world: int, device: str) -> int:
    """N_step: the supervised positions (target != -1) of a step's micro-batches, summed over the ranks."""
    n = torch.tensor(sum(int((y != -1).sum()) for _, y in batches), dtype=torch.int64, device=device)
    if world > 1:
        dist.all_reduce(n, op=dist.ReduceOp.SUM)
    return int(n.item())


def masked_step_gradients(model: nn.Module, batches: list[Batch], n_step: int, ctx, world: int,
                          device: str) -> torch.Tensor:
    """Backward of the step's masked loss: each micro-batch's summed cross-entropy over its supervised positions,
    divided by N_step (every micro-batch and rank). Returns the step loss (their sum over micro-batches and ranks)."""
    loss_acc = torch.zeros((), device=device)
    for micro, (x, y) in enumerate(batches):
        if world > 1:
            model.require_backward_grad_sync = micro == len(batches) - 1
        with ctx:
            _, loss_sum = model(x.to(device), y.to(device), return_logits=False, reduction="sum")
        loss = loss_sum / n_step
        loss_acc += loss.detach()
        (loss * world).backward()  # DDP averages the ranks' gradients, where the step's loss is their sum
    if world > 1:
        dist.all_reduce(loss_acc, op=dist.ReduceOp.SUM)
    return loss_acc


def masked_val_loss(model: nn.Module, loader: DistributedDataLoader, batches: int, ctx, world: int,
                    device: str) -> float | None:
    """The val loss on chat shards: the cross-entropies of every supervised position of `batches` val batches on
    every rank, summed, over their count; None when there is none."""
    total = torch.zeros(2, dtype=torch.float64, device=device)  # (loss sum, supervised count)
    for _ in range(batches):
        x, y = loader.next_batch()
        with ctx:
            _, loss_sum = model(x.to(device), y.to(device), return_logits=False, reduction="sum")
        total[0] += loss_sum.double()
        total[1] += int((y != -1).sum())
    if world > 1:
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return None if total[1].item() == 0 else (total[0] / total[1]).item()


def train_loop(args: argparse.Namespace, build: Callable[[argparse.Namespace], ModelFamily]) -> None:
    """The reference's training: DDP/ZeRO-1, accumulation, clipping, one schedule, val loss, samples, main.log."""
    rank, _, world, device = setup_distributed(args.device)
    master = rank == 0
    device_type = "cuda" if device.startswith("cuda") else device.split(":")[0]
    print0(f"device {device}, {world} process(es)")
    torch.manual_seed(args.seed + rank)
    if args.tensorcores:
        torch.backends.cuda.matmul.allow_tf32 = True

    B, T = args.batch_size, args.sequence_length
    if B < 1 or T < 1:
        raise UserError(f"--batch_size {B} and --sequence_length {T} must both be at least 1")
    tokens_per_step = B * T * world
    total_batch = args.total_batch_size if args.total_batch_size > 0 else tokens_per_step
    if total_batch % tokens_per_step:
        raise UserError(f"--total_batch_size {total_batch} is not a multiple of B*T*processes = {tokens_per_step}")
    grad_accum = total_batch // tokens_per_step
    print0(f"total batch {total_batch} tokens, {grad_accum} micro-step(s) of {B} x {T} per process")

    family = build(args)
    model = family.model
    if T > model.config.block_size:
        raise UserError(f"--sequence_length {T} exceeds the model's block size {model.config.block_size}")
    n_params = sum(p.numel() for p in model.parameters())
    print0(f"model {args.model}: {family.description}, {n_params:,} parameters")

    vocab_size = model.config.vocab_size
    train_loader = family.loader(args.input_bin, B, T, rank, world, vocab_size)
    val_loader = family.loader(args.input_val_bin, B, T, rank, world, vocab_size) if args.input_val_bin else None
    if train_loader.masked:
        print0("chat shards: the loss is over the positions their loss mask supervises")

    if args.write_tensors and master and not args.inference_only:
        x, y = train_loader.next_batch()
        train_loader.reset()
        family.write_files(x, y)

    model.to(device)
    model.train()
    raw_model = model
    if args.compile:
        model = torch.compile(model)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device] if device_type == "cuda" else None)
    autocast_dtype = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}[args.dtype]
    ctx = torch.amp.autocast(device_type=device_type, dtype=autocast_dtype) if autocast_dtype else nullcontext()
    optimizer = family.make_optimizer(raw_model, optimizer_settings(args), args.zero_stage)

    logfile = None
    if args.output_dir and master:
        os.makedirs(args.output_dir, exist_ok=True)
        logfile = open(os.path.join(args.output_dir, "main.log"), "w")

    def log(line: str) -> None:
        if logfile:
            logfile.write(line + "\n")
            logfile.flush()

    sample = family.make_sampler(device)
    first_batch = train_loader.next_batch() if args.overfit_single_batch else None
    step_times: list[float] = []
    for step in range(args.num_iterations + 1):
        last_step = step == args.num_iterations

        if val_loader and args.val_loss_every > 0 and (step % args.val_loss_every == 0 or last_step):
            model.eval()
            val_loader.reset()
            if val_loader.masked:
                with torch.no_grad():
                    masked_val = masked_val_loss(model, val_loader, args.val_max_steps, ctx, world, device)
                if masked_val is None:
                    print0(f"step {step}: no val loss: no supervised position in the val batches")
                else:
                    print0(f"step {step}: val loss {masked_val:.6f}")
                    log(f"s:{step} tel:{masked_val:.6f}")
            else:
                with torch.no_grad():
                    val_loss = torch.zeros((), device=device)
                    for _ in range(args.val_max_steps):
                        x, y = val_loader.next_batch()
                        with ctx:
                            _, loss = model(x.to(device), y.to(device), return_logits=False)
                        val_loss += loss.float() / args.val_max_steps
                if world > 1:
                    dist.all_reduce(val_loss, op=dist.ReduceOp.AVG)
                print0(f"step {step}: val loss {val_loss.item():.6f}")
                log(f"s:{step} tel:{val_loss.item():.6f}")
            model.train()

        if master and args.sample_every > 0 and (step % args.sample_every == 0 or last_step):
            print0("---\n" + sample(raw_model) + "\n---")

        if last_step or args.inference_only:
            break

        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        if train_loader.masked:
            # the step's micro-batches first: N_step divides every one of their losses
            batches = [first_batch if first_batch is not None else train_loader.next_batch() for _ in range(grad_accum)]
            n_step = supervised_count(batches, world, device)
            if n_step == 0:
                skip_step(optimizer)
                print0(f"step {step + 1:4d}/{args.num_iterations} | no supervised position in this step's batches: "
                       "nothing trained")
                continue
            loss_acc = masked_step_gradients(model, batches, n_step, ctx, world, device)
        else:
            loss_acc = torch.zeros((), device=device)
            for micro in range(grad_accum):
                x, y = first_batch if first_batch is not None else train_loader.next_batch()
                if world > 1:
                    model.require_backward_grad_sync = micro == grad_accum - 1
                with ctx:
                    _, loss = model(x.to(device), y.to(device), return_logits=False)
                loss = loss / grad_accum
                loss_acc += loss.detach()
                loss.backward()
            if world > 1:
                dist.all_reduce(loss_acc, op=dist.ReduceOp.AVG)
        max_norm = args.grad_clip if args.grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        lr = get_lr(step, args.learning_rate, args.warmup_iters, args.num_iterations, args.learning_rate_decay_frac)
        for group in optimizer.param_groups:  # AdamW's and Muon's peak lr, one schedule
            group["lr"] = get_lr(step, group["initial_lr"], args.warmup_iters, args.num_iterations,
                                 args.learning_rate_decay_frac)
        optimizer.step()
        if device_type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        step_times.append(dt)
        recent = sorted(step_times[-10:])[len(step_times[-10:]) // 2]
        eta = recent * (args.num_iterations - step - 1)
        print0(f"step {step + 1:4d}/{args.num_iterations} | loss {loss_acc.item():.6f} | lr {lr:.2e} | norm {norm.item():.4f} "
               f"| {dt * 1000:.1f} ms | {total_batch / dt:.0f} tok/s | ETA {format_eta(eta)}")
        log(f"s:{step} trl:{loss_acc.item():.6f} lr:{lr:.6e} norm:{norm.item():.4f}")

    if args.output_dir and master and args.num_iterations > 0 and not args.inference_only:
        family.write_model(raw_model, os.path.join(args.output_dir, f"model_{args.num_iterations:08d}.bin"), "float32")
    if logfile:
        logfile.close()
    if world > 1:
        # Every rank waits for the master's checkpoint write before tearing the group down:
        # gloo aborts a rank whose peer closes its connections while it is still leaving.
        dist.barrier()
        # DDP's reducer and ZeroRedundancyOptimizer hold the group: released first, its gloo threads end here
        # rather than at interpreter exit (a rank once aborted there: "terminate called without an active exception")
        del model, optimizer
        gc.collect()
        dist.destroy_process_group()
