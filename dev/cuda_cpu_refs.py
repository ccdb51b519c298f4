"""Small reference data for test_gpt2cu on the CPU execution target, and the bf16 noise behind its BF16 bounds.

    python dev/cuda_cpu_refs.py                       # build/cuda_cpu_refs/gpt2_d2{,_bf16,_debug_state}.bin, gpt2{,_chat}_tokenizer.bin
    python dev/cuda_cpu_refs.py --model d4 -o DIR     # another small model
    python dev/cuda_cpu_refs.py --model d12 --steps 4 -o build/refs_d12   # test_gpt2's d12 reference (make test-refs)
    python dev/cuda_cpu_refs.py --noise               # also print the measured bf16 / fp32 noise per tensor
    python dev/cuda_cpu_refs.py --vocab_size 509 --muon -o build/cuda_cpu_refs/vocab509   # the small-vocabulary set

--vocab_size V (below GPT-2's 50,257) makes the same d2 with a V-token vocabulary (padded as GPT-2's, to a multiple
of 128), its batch the tinyshakespeare tokens modulo V, and writes train/val shards of the first tokens of each
split modulo V for the trainers (no tokenizer: GPT-2's does not fit). GPT-2's token embedding (the classifier's
weights) is over 90% of d2's parameters and most of a step on the CPU execution target; the GPU target's variant
runs use this set (the plain FP32 and BF16 test_gpt2cu runs keep GPT-2's vocabulary, whose 50,257 columns take the
fused classifier's loops through many passes). --muon also writes the debug state of Muon steps ({stem}_muon_debug_state.bin, train_gpt2.py's defaults).

The checkpoints (fp32, bf16), tokenizer and debug state are written by train_gpt2.py's own writers (load_model,
write_model, write_gpt2_tokenizer, write_debug_state), exactly as `python train_gpt2.py --model d2 --write_tensors 1`
writes them (the tests' d2 reference is this directory: tests/conftest.py d2_reference), on the
first B x T batch of the tinyshakespeare train shard. B = 4, T = 64 by default: B splits evenly for
every variant test_gpt2cu runs (-a 2, -a 4, two processes, two processes with -a 2); T = 64 suits the
attention kernels and keeps the (B, T, Vp) logits at 12.9 M floats.

test_gpt2cu then runs on them:
    ./test_gpt2cu -e build/cuda_cpu_refs/gpt2_d2.bin -s build/cuda_cpu_refs/gpt2_d2_debug_state.bin [-a 2 -r 1 -ge 1]
    mpirun -np 2 ./test_gpt2cu -e ... -s ... -z 1

--noise measures what an honest computation in lower precision gives on the same batch, per tensor:
the relative L2 error ||got - ref|| / ||ref|| of (a) the reference in float32 against the same model in
float64 (the float32 noise) and (b) the model run entirely in bfloat16 (parameters, activations and
gradients, fp32 accumulation inside the GEMMs, as train_gpt2cu's BF16 build) against the float32
reference. For dwte it also splits the rows of the tokens in the batch (encoder and classifier) from the
others (classifier only: a heavy tail of small rows that holds 1e-4..1.6e-3 of the tensor's energy).
llmc/tensor_check.h's BF16 bounds are set from these numbers with a stated margin.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from pyllmc.families.gpt2 import GPT2

if TYPE_CHECKING:  # torch is imported once the flags are parsed: --help and a bad flag answer at once
    import torch

REPO = Path(__file__).resolve().parent.parent
SHARDS = REPO / "dev" / "data" / "tinyshakespeare"
NAMES = list(GPT2.tensor_names)


def load_reference() -> ModuleType:
    """train_gpt2.py as a module (its writers, model and data loader)."""
    import train_gpt2
    return train_gpt2


def shard_path(split: str) -> Path:
    """The tinyshakespeare shard, made by dev/data/tinyshakespeare.py when it is missing."""
    path = SHARDS / f"tiny_shakespeare_{split}.bin"
    if not path.exists():
        subprocess.run([sys.executable, str(REPO / "dev" / "data" / "tinyshakespeare.py")], check=True)
    return path


def write_reference(ref: ModuleType, model: torch.nn.Module, stem: str, x: torch.Tensor, y: torch.Tensor,
                    out_dir: Path, steps: int, muon: bool = False) -> None:
    from pyllmc.reference.tokenizer_files import write_gpt2_tokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    ref.write_model(model, out_dir / f"{stem}.bin", "float32")
    ref.write_model(model, out_dir / f"{stem}_bf16.bin", "bfloat16")
    if model.config.vocab_size == ref.GPT2_VOCAB:
        write_gpt2_tokenizer(out_dir / "gpt2_tokenizer.bin")
    ref.write_debug_state(model, x, y, out_dir / f"{stem}_debug_state.bin", ref.DebugOptimizer(steps=steps))
    if muon:
        ref.write_debug_state(model, x, y, out_dir / f"{stem}_muon_debug_state.bin",
                              ref.DebugOptimizer(steps=steps, name="muon"))


SMALL_VOCAB_SHARD_TOKENS = 1 << 15  # per split: the trainers' tests read at most a few thousand


def write_small_vocab_shards(out_dir: Path, vocab_size: int) -> None:
    """tinyshakespeare_{train,val}.bin: the first tokens of each split modulo vocab_size, in the GPT-2 shard format."""
    from pyllmc.token_shards import read_datafile, write_datafile

    for split in ("train", "val"):
        tokens = read_datafile(str(shard_path(split)))[:SMALL_VOCAB_SHARD_TOKENS].astype("int64") % vocab_size
        write_datafile(out_dir / f"tinyshakespeare_{split}.bin", tokens)


def logits_and_grads(ref: ModuleType, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                     dtype: torch.dtype) -> list[torch.Tensor]:
    """[logits, the 16 gradients in checkpoint order] of one forward/backward with everything in `dtype`
    (the loss in float32 from the logits, as the fused classifier computes it), as float64."""
    import torch.nn.functional as F

    m = copy.deepcopy(model).cpu().to(dtype)
    logits, _ = m(x, y)
    loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
    loss.backward()
    grads = ref.llmc_tensors(m, lambda p: p.grad.detach().clone())
    return [logits.detach().double()] + [g.double() for g in grads]


def rel_l2(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


def print_noise(ref: ModuleType, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, label: str) -> None:
    import torch

    f64 = logits_and_grads(ref, model, x, y, torch.float64)
    f32 = logits_and_grads(ref, model, x, y, torch.float32)
    b16 = logits_and_grads(ref, model, x, y, torch.bfloat16)
    V = model.config.vocab_size
    in_batch = torch.zeros(V, dtype=torch.bool)
    in_batch[x.flatten()] = True
    print(f"{label}: relative L2 error per tensor (fp32 vs fp64 | bf16 vs fp32)")
    for name, a64, a32, a16 in zip(["logits"] + [f"d{n}" for n in NAMES], f64, f32, b16):
        print(f"  {name:12s} {rel_l2(a32, a64):9.2e} | {rel_l2(a16, a32):9.2e}")
    rows32, rows16 = f32[1][:V], b16[1][:V]
    tail = ~in_batch
    share = float((rows32[tail] ** 2).sum() / (rows32 ** 2).sum())
    print(f"  dwte rows of the {int(in_batch.sum())} tokens in the batch: {rel_l2(rows16[in_batch], rows32[in_batch]):9.2e}; "
          f"the other {int(tail.sum())} rows (classifier only, {share:.1e} of the energy): {rel_l2(rows16[tail], rows32[tail]):9.2e}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("-o", "--out_dir", type=Path, default=REPO / "build" / "cuda_cpu_refs", help="output directory")
    p.add_argument("--model", default="d2", help="dN: a from-scratch model of depth N (seed --seed)")
    p.add_argument("-B", "--batch_size", type=int, default=4, help="batch size of the debug state")
    p.add_argument("-T", "--sequence_length", type=int, default=64, help="sequence length of the debug state")
    p.add_argument("--steps", type=int, default=10, help="reference optimizer steps recorded in the debug state")
    p.add_argument("--split", choices=["train", "val"], default="train", help="tinyshakespeare shard of the batch")
    p.add_argument("--seed", type=int, default=42, help="seed of the from-scratch init")
    p.add_argument("--vocab_size", type=int, default=50257, help="vocabulary size (below 50257: tokens modulo it)")
    p.add_argument("--muon", action="store_true", help="also write the debug state of Muon steps")
    p.add_argument("--noise", action="store_true", help="also print the measured fp32 and bf16 noise per tensor")
    p.add_argument("--no_write", action="store_true", help="write nothing (with --noise: only measure)")
    args = p.parse_args(argv)
    if not (args.model.startswith("d") and args.model[1:].isdigit()):
        p.error(f"--model {args.model}: use dN (a small from-scratch model, e.g. d2)")
    if args.batch_size < 1 or args.sequence_length < 1 or args.steps < 0:
        p.error("-B and -T must be at least 1, --steps at least 0")
    if not 2 <= args.vocab_size <= 50257:
        p.error(f"--vocab_size {args.vocab_size}: use 2..50257")
    import torch

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    ref = load_reference()
    model, stem = ref.load_model(args.model, args.seed, False)
    x, y = ref.DistributedDataLoader(str(shard_path(args.split)), args.batch_size, args.sequence_length, 0, 1).next_batch()
    if args.vocab_size != ref.GPT2_VOCAB:
        model = ref.GPT(dataclasses.replace(model.config, vocab_size=args.vocab_size), False)
        model.init_weights(args.seed)
        x, y = x % args.vocab_size, y % args.vocab_size
    if not args.no_write:
        write_reference(ref, model, stem, x, y, args.out_dir, args.steps, args.muon)
        if args.vocab_size != ref.GPT2_VOCAB:
            write_small_vocab_shards(args.out_dir, args.vocab_size)
    if args.noise:
        print_noise(ref, model, x, y, f"{args.model} {args.split} B={args.batch_size} T={args.sequence_length}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
