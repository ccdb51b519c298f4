"""Train GPT-2 from Python: ./train_gpt2's own main() run in this process through cffi; data-parallel under mpirun.

    python -m pyllmc.train -e d12 -i "dev/data/tinyshakespeare/*train.bin" -b 4 -t 64 -x 40
    mpirun -np 2 python -m pyllmc.train -e d12 -b 2 -t 64 -x 40      # same tokens per step as -b 4

Everything is the C trainer's (llmc/cpu/cpu_trainer.h's cpu_trainer_main_in_group, then llmc/trainer.h's
trainer_run): the flags (the same C table, llmc/args.h), the data, the model, the optimizer (AdamW or -op muon,
ZeRO-1), the schedule, validation, HellaSwag, samples, checkpoints and resume (-y, -nk, -nm), signals, the progress
line and main.log; a run prints and writes what ./train_gpt2 does with the same flags. Python does only what the
extension, built without MPI, cannot: under mpirun the C trainer's collectives (llmc/mpi_utils.h's ProcessComm: a
barrier, an in-place sum and a broadcast of floats) are mpi4py calls on numpy views of the C buffers. The GPU and
OpenCL trainers' flags are refused in one line, as ./train_gpt2 refuses them.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from pyllmc._core import LlmcError, check_rc, ffi, float_view, lib

PROG = "python -m pyllmc.train"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class UserError(Exception):
    """Bad flags: reported as one line, exit status 1."""


class TrainerFailed(Exception):
    """The C trainer stopped with llmc_die; its one error line is on stderr already."""


class Args:
    """The C TrainArgs filled by llmc/args.h's parser; argv (with the program name first) stays alive for C."""

    def __init__(self, argv: list[str]):
        self._strings = [ffi.new("char[]", os.fsencode(s)) for s in [PROG, *argv]]
        self.argc = len(self._strings)
        self.argv = ffi.new("char*[]", self._strings)
        self.c = ffi.new("TrainArgs*")
        check_rc(lib.pyllmc_parse_train_args(self.c, self.argc, self.argv))

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.c, name)
        return ffi.string(value).decode() if isinstance(value, ffi.CData) else value


def mpi_world() -> Any:
    """mpi4py's COMM_WORLD when launched by mpirun/srun, else None (no MPI at all)."""
    launched = any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"))
    if not launched:
        return None
    from mpi4py import MPI
    return MPI.COMM_WORLD


# ----------------------------------------------------------------------------
# the C trainer's collectives (llmc/mpi_utils.h's ProcessComm), called from C with ctx = a handle to the communicator

def comm_failed(exc_type: type, exc: BaseException, tb: Any) -> None:
    """An exception in a collective: C cannot go on without its result, so every process stops."""
    print(f"error: mpi4py: {exc_type.__name__}: {exc}", file=sys.stderr, flush=True)
    from mpi4py import MPI
    MPI.COMM_WORLD.Abort(1)


@ffi.def_extern(onerror=comm_failed)
def pyllmc_comm_barrier(ctx: Any) -> None:
    ffi.from_handle(ctx).Barrier()


@ffi.def_extern(onerror=comm_failed)
def pyllmc_comm_sum_floats(ctx: Any, buf: Any, n: int) -> None:
    from mpi4py import MPI
    ffi.from_handle(ctx).Allreduce(MPI.IN_PLACE, float_view(buf, n), op=MPI.SUM)  # in place on the C buffer


@ffi.def_extern(onerror=comm_failed)
def pyllmc_comm_bcast_floats(ctx: Any, buf: Any, n: int, root: int) -> None:
    ffi.from_handle(ctx).Bcast(float_view(buf, n), root=root)


def process_comm(world: Any) -> tuple[Any, Any]:
    """The ProcessComm over an mpi4py communicator, and the handle that must outlive it."""
    from mpi4py import MPI
    handle = ffi.new_handle(world)
    local_size = world.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
    comm = ffi.new("ProcessComm*", {"ctx": handle, "local_size": local_size, "barrier": lib.pyllmc_comm_barrier,
                                    "sum_floats": lib.pyllmc_comm_sum_floats,
                                    "bcast_floats": lib.pyllmc_comm_bcast_floats})
    return comm, handle


def run_trainer(args: Args, world: Any) -> int:
    """./train_gpt2's main() on args' argv; returns its exit status. Python's signal handlers come back after it
    (the C trainer takes SIGINT / SIGTERM while it runs)."""
    rank, nproc = (world.Get_rank(), world.Get_size()) if world is not None else (0, 1)
    comm, keepalive = process_comm(world) if world is not None else (ffi.NULL, None)  # C holds comm.ctx
    failed = ffi.new("int*")
    saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    sys.stdout.flush()
    try:
        status = lib.pyllmc_train_main(args.argc, args.argv, comm, rank, nproc, failed)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    if failed[0]:
        raise TrainerFailed()
    return int(status)


def main(argv: list[str] | None = None) -> int:
    world = mpi_world()
    try:
        args = Args(sys.argv[1:] if argv is None else argv)
        return run_trainer(args, world)
    except (UserError, LlmcError, TrainerFailed) as e:
        if not isinstance(e, TrainerFailed):
            print(f"error: {e}", file=sys.stderr, flush=True)
        if world is not None and world.Get_size() > 1:
            world.Abort(1)  # the other processes may wait in a collective
        return 1


if __name__ == "__main__":
    sys.exit(main())
