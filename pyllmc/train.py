"""Train GPT-2 from Python with the C engine; data-parallel under mpirun (mpi4py).

    python -m pyllmc.train -e d12 -i "dev/data/tinyshakespeare/*train.bin" -b 4 -t 64 -x 40
    mpirun -np 2 python -m pyllmc.train -e d12 -b 2 -t 64 -x 40      # same tokens per step as -b 4

The flags are ./train_gpt2's, parsed by the same C table (llmc/args.h), and every rule of training is
llmc/trainer.h's, called through cffi: gradient accumulation, -x -1, what runs at the top of a step
(validation, sample, checkpoint), clipping, the -sl / -sg skip rule, the AdamW constants, the progress
line. What this file does itself is the loop, in Python, and the gradient average over processes: one
mpi4py Allreduce on the flat gradient buffer (a numpy view into C memory, no copies). It writes model
checkpoints (-n) but no training state: the table's rows say which flags this program takes (TRAIN_PYLLMC
in llmc/args.h), and the parser refuses the others in one error line naming the programs that take them
(the training state's -y, -nk, -nm, ZeRO, HellaSwag, Muon, the GPU and OpenCL trainers' flags).
"""

from __future__ import annotations

import glob
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pyllmc._core import LlmcError, check_rc, ffi, lib
from pyllmc.data import DataLoader, LRScheduler, Tokenizer
from pyllmc.model import GPT2

PROG = "python -m pyllmc.train"
TOKENIZER_PATH = "gpt2_tokenizer.bin"


class UserError(Exception):
    """Bad flags or files: reported as one line, exit status 1."""


class Args:
    """The C TrainArgs filled by llmc/args.h's parser (its strings point into argv, kept alive here)."""

    def __init__(self, argv: list[str]):
        self._strings = [ffi.new("char[]", os.fsencode(s)) for s in [PROG, *argv]]
        self._argv = ffi.new("char*[]", self._strings)
        self.c = ffi.new("TrainArgs*")
        check_rc(lib.pyllmc_parse_train_args(self.c, len(self._strings), self._argv))

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.c, name)
        return ffi.string(value).decode() if isinstance(value, ffi.CData) else value


def mpi_setup() -> tuple[Any, int, int]:
    """(communicator or None, rank, number of processes); MPI only when launched by mpirun/srun."""
    launched = any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"))
    if not launched:
        return None, 0, 1
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    return comm, comm.Get_rank(), comm.Get_size()


def require_files(pattern: str, flag: str) -> None:
    if not glob.glob(pattern):
        raise UserError(f"{pattern}: no such file (flag {flag}; run python dev/data/tinyshakespeare.py to create it)")


def build_model(spec: str) -> GPT2:
    """A descriptor (dN, gpt2:dN, gpt3:cN) inits from scratch with the trainers' seed, anything else is a checkpoint."""
    cfg = ffi.new("GPT2Config*")
    why = ffi.new("char[256]")
    kind = lib.pyllmc_config_from_descriptor(spec.encode(), cfg, why, 256)
    if kind < 0:
        raise UserError(f"-e {spec}: bad model descriptor: {ffi.string(why).decode()}")
    if kind == 1:
        return GPT2.from_scratch(spec, seed=lib.TRAINER_INIT_SEED)
    if not Path(spec).is_file():
        raise UserError(f"{spec}: no such checkpoint (flag -e; python train_gpt2.py writes gpt2_124M.bin, "
                        "or use -e d12 to init from scratch)")
    return GPT2.from_checkpoint(spec)


def choose_precision(value: str, comm: Any, say: Callable[..., None]) -> None:
    """-p fp32 | bf16 as the C trainers take it: bf16 only where every process's CPU gains from it, in one line."""
    if lib.pyllmc_set_precision(value.encode()) != 0:
        raise UserError(f'flag -p: bad value "{value}": use fp32 or bf16 (run {PROG} --help to list the flags)')
    if value != "bf16":
        return
    pays, why, line = ffi.new("int*"), ffi.new("char[256]"), ffi.new("char[320]")
    check_rc(lib.pyllmc_bf16_pays(pays, why, 256))
    all_pay = pays[0]
    if comm is not None:
        from mpi4py import MPI
        all_pay = comm.allreduce(pays[0], op=MPI.MIN)
    lib.pyllmc_precision_outcome(int(all_pay), pays[0], why, line, 320)
    if line[0] != b"\0":
        say(ffi.string(line).decode())


def checked(value: int, why: Any, message: str) -> int:
    """A trainer.h rule's result, or its reason as a UserError."""
    if value < 0:
        raise UserError(f"{message}: {ffi.string(why[0]).decode()}")
    return value


def mean_over(comm: Any, x: float) -> float:
    return x if comm is None else comm.allreduce(x) / comm.Get_size()


def val_loss(model: GPT2, loader: DataLoader, batches: int, comm: Any) -> float:
    loader.reset()
    total = 0.0
    for _ in range(batches):
        x, y = loader.next_batch()
        total += model.forward(x, y, return_logits=False)[1]
    return mean_over(comm, total / batches)


def average_gradients(model: GPT2, comm: Any) -> None:
    if comm is None or comm.Get_size() == 1:
        return
    from mpi4py import MPI
    comm.Allreduce(MPI.IN_PLACE, model.grads_flat, op=MPI.SUM)  # in place on the C buffer
    model.grads_flat *= np.float32(1.0 / comm.Get_size())


def progress_line(step: int, max_steps: int, loss: float, lr: float, norm: float, dt: float, tokens: int,
                  eta: float, decision: Any) -> str:
    buf = ffi.new("char[512]")
    d = ffi.new("UpdateDecision*")
    d[0] = decision
    lib.trainer_progress_line(buf, 512, step, max_steps, loss, lr, norm, dt, tokens, eta, b"", d)
    return ffi.string(buf).decode()


def train(args: Args, comm: Any, rank: int, nproc: int) -> None:
    say: Callable[..., None] = print if rank == 0 else (lambda *a, **k: None)
    out_dir = args.output_log_dir
    if args.checkpoint_every > 0 and not out_dir:
        raise UserError("flag -n needs an output directory (-o)")
    have_val = args.val_loss_every > 0 and bool(args.val_data_pattern)
    require_files(args.train_data_pattern, "-i")
    if have_val:
        require_files(args.val_data_pattern, "-j")
    choose_precision(args.precision, comm, say)
    model = build_model(args.load_filename)
    cfg = model.config
    B, T = args.B, args.T
    if T > cfg.max_seq_len:
        raise UserError(f"flag -t: T = {T} is larger than the model's max sequence length {cfg.max_seq_len}")
    why = ffi.new("char*[1]")
    accum = checked(lib.trainer_grad_accum_steps(args.total_batch_size, B, T, nproc, why), why,
                    f"flag -d: {args.total_batch_size}")
    total_batch = accum * B * T * nproc
    train_loader = DataLoader(args.train_data_pattern, B, T, rank, nproc, shuffle=bool(args.shuffle),
                              vocab_size=cfg.vocab_size)
    val_loader = DataLoader(args.val_data_pattern, B, T, rank, nproc, vocab_size=cfg.vocab_size) if have_val else None
    max_steps = checked(lib.trainer_max_steps(args.max_steps, train_loader.num_tokens, total_batch, why), why,
                        args.train_data_pattern)
    schedule = LRScheduler(args.lr_scheduler_type, args.learning_rate, args.warmup_iterations, max_steps,
                           args.final_learning_rate_frac)
    tokenizer = Tokenizer(TOKENIZER_PATH) if rank == 0 and args.sample_every > 0 else None
    log = None
    if out_dir and rank == 0:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        log = open(Path(out_dir) / "main.log", "w")
    say(f"model: {args.load_filename} L={cfg.num_layers} NH={cfg.num_heads} C={cfg.channels} maxT={cfg.max_seq_len} "
        f"V={cfg.vocab_size} Vp={cfg.padded_vocab_size}, {model.num_parameters} parameters")
    say(f"train: {train_loader.num_tokens} tokens; batch {total_batch} tokens = {nproc} processes x B={B} x T={T} "
        f"x {accum} accumulation steps; {max_steps} steps")

    detectors = ffi.new("TrainerDetectors*")
    lib.trainer_detectors_init(detectors)
    step_times: list[float] = []
    for step in itertools.count():
        due = lib.trainer_due(args.c, step, max_steps, -1, int(have_val), int(bool(out_dir)), 0)
        if due.val:
            loss = val_loss(model, val_loader, args.val_max_steps, comm)
            say(f"step {step}: val loss {loss:.6f}")
            if log:
                log.write(f"s:{step} tel:{loss:f}\n")
                log.flush()
        if due.sample and tokenizer is not None:
            tokens = model.generate([tokenizer.eot_token], min(args.gen_tokens, cfg.max_seq_len - 1),
                                    temperature=1.0, seed=lib.TRAINER_SAMPLER_SEED + step)
            say(f"generating:\n---\n{tokenizer.decode(tokens[1:])}\n---")
        if due.checkpoint and rank == 0:
            path = ffi.new("char[4200]")
            lib.trainer_checkpoint_path(path, 4200, out_dir.encode(), b"model", step, -1)
            model.save(ffi.string(path).decode())
            say(f"wrote checkpoint for step {step} to {out_dir}")
        if due.stop:
            break

        t0 = time.perf_counter()
        model.zero_grad()
        loss_sum = 0.0
        for _ in range(accum):
            if args.overfit_single_batch:
                train_loader.reset()
            x, y = train_loader.next_batch()
            loss_sum += model.forward(x, y, return_logits=False)[1]
            model.backward(1.0 / accum)
        loss = mean_over(comm, loss_sum / accum)
        average_gradients(model, comm)
        norm = model.grad_norm()
        decision = lib.trainer_judge_update(detectors, loss, norm, args.skip_update_lossz, args.skip_update_gradz)
        lr = schedule(step)
        if not decision.skip:
            check_rc(lib.pyllmc_model_ensure_optimizer(model._c))
            lib.pyllmc_model_update(model._c, lr, args.weight_decay, lib.grad_clip_scale(norm, lib.TRAINER_GRAD_CLIP),
                                    step + 1)
        dt = time.perf_counter() - t0
        step_times.append(dt)
        timed = step_times[1:] or step_times  # the first step warms up
        eta = sum(timed) / len(timed) * (max_steps - step - 1)
        say(progress_line(step, max_steps, loss, lr, norm, dt, total_batch, eta, decision), flush=True)
        if log:
            log.write(f"s:{step} trl:{loss:f} lr:{lr:f} norm:{norm:f}\n")
            log.flush()
    if step_times:
        timed = step_times[1:] or step_times
        say(f"average step time {1000 * sum(timed) / len(timed):.1f} ms")
    if log:
        log.close()


def main(argv: list[str] | None = None) -> int:
    comm, rank, nproc = mpi_setup()
    try:
        args = Args(sys.argv[1:] if argv is None else argv)
        train(args, comm, rank, nproc)
    except (UserError, LlmcError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        if comm is not None and nproc > 1:
            comm.Abort(1)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
