"""The chat half of a GPU visit (issue 47's masked loss): what `make gpu-pack` writes here into $(GPU_CACHE)/chat/, and
what `make test-gpu` (dev/test_gpu.sh) checks with it on the GPU.

    python dev/gpu_visit_chat.py pack -o .gpu/chat           # here (make gpu-pack): needs the reference sets below
    python dev/gpu_visit_chat.py check --pack .gpu/chat --trainer build/gpu/bin/fp32/train_nanochatcu    # there

pack writes, from the reference sets make builds here (make cuda-cpu-refs' small-vocabulary d2 and make
<name>-debug-states), for every family with a GPU trainer (llmc/families.h's GPU column, MASKED_SOURCES):
    <name>.bin, <name>_masked_debug_state.bin   one small model of the family's set and its reference's masked debug state
                                                (train_<name>.py's write_debug_state on the batch of that model's debug
                                                state with mask_half's targets -1: header[18] = 1; 4 AdamW steps), which
                                                test_<name>cu checks in FP32 and BF16 as test_<name> does here
and, for the chat trainer (CHAT_FAMILY, nanochat: its GQA model is the smallest of the sets):
    chat_train.bin, chat_val.bin               chat shards of that model's vocabulary (pyllmc.token_shards.
                                                write_chat_datafile): 16 and 8 conversations of T tokens, each a prompt
                                                (mask 0), a reply (mask 1) and padding (mask 0); the second train batch
                                                has nothing supervised, so both trainers skip step 2 in the same line
    train_nanochat.txt                         ./train_nanochat's output on them (chat_flags): the step and val losses
                                                the GPU trainer must give
check runs the GPU trainer with the same flags on the packed files, prints its losses beside the CPU trainer's and
exits 1 unless it skipped the same step and every step and val loss is within LOSS_BOUND of the first CPU loss (the
bound tests/test_cuda_cpu_chat.py holds the GPU trainer to on the CPU execution target: TF32 GEMMs, float32 updates).
The GPU machine's Python has no pyllmc: check uses the standard library alone.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# family -> (its reference set's folder under the checkout, the model whose debug state's batch the masked state takes):
# the small models tests/test_cuda_cpu_chat.py masks (GPT-2's d2 at a 509-token vocabulary, Llama 3's GQA 4:1,
# nanochat's GQA with softcap 5, Qwen3's MQA of width 2C/3): a few MB each, so the carried folder stays small
MASKED_SOURCES: dict[str, tuple[str, str]] = {
    "gpt2": ("build/cuda_cpu_refs/vocab509", "gpt2_d2"),
    "llama3": ("build/llama3", "llama3_gqa"),
    "nanochat": ("build/nanochat", "nanochat_gqa"),
    "qwen3": ("build/qwen3", "qwen3_mqa"),
}
MASKED_STEPS = 4  # AdamW steps recorded in each masked state
CHAT_FAMILY = "nanochat"  # the family whose trainers train on the chat shard (its masked state's model)
B, T, STEPS = 4, 64, 4  # the chat run: micro-batch, conversation length (the shards' T), steps (one epoch of 16)
LOSS_BOUND = 5e-5  # of the first CPU step loss: how far a GPU step or val loss may be from the CPU trainer's
CHAT_LINE = "train: chat shards: a step's loss is the mean over its supervised (mask 1) positions"
STEP_LOSS = re.compile(r"^step (\d+)/\d+ \| loss ([0-9.]+)", re.M)
VAL_LOSS = re.compile(r"^step (\d+): val loss ([0-9.]+)", re.M)
SKIPPED_STEP = re.compile(r"^step (\d+)/\d+ \| no supervised position in this step's batches: nothing trained$", re.M)


def cpu_log(pack: Path) -> Path:
    return pack / f"train_{CHAT_FAMILY}.txt"


def chat_flags(pack: Path) -> list[str]:
    """The chat run's flags, the same for both trainers: the packed model and shards, B x T, STEPS steps, the val loss
    (2 batches) before training and after steps 2 and 4, no sampling, no checkpoint."""
    return ["-e", str(pack / f"{CHAT_FAMILY}.bin"), "-i", str(pack / "chat_train.bin"), "-j", str(pack / "chat_val.bin"),
            "-b", str(B), "-t", str(T), "-x", str(STEPS), "-v", "2", "-m", "2", "-s", "0", "-l", "1e-3"]


# ---------------------------------------------------------------------------- pack (here)


def write_masked_state(family: str, source: Path, out: Path) -> None:
    """out/<family>.bin (a copy of source's model) and out/<family>_masked_debug_state.bin: the family's reference's
    debug state of that model on the batch of source's debug state, with mask_half's targets -1."""
    import importlib

    import numpy as np
    import torch

    from pyllmc.reference.debug_state import DebugOptimizer, debug_state_name, mask_half

    reference = importlib.import_module(f"train_{family}")
    state = source.parent / f"{source.name}_debug_state.bin"
    data = state.read_bytes()
    batch, seq = (int(v) for v in np.frombuffer(data, "<i4", 2, 8))
    # x, y (B, T): after the 256-int header, as int32 (llmc/debug_state.h)
    xy = np.frombuffer(data, "<i4", 2 * batch * seq, 1024).astype(np.int64).reshape(2, batch, seq)
    model = out / f"{family}.bin"
    shutil.copy(source.parent / f"{source.name}.bin", model)
    reference.write_debug_state(reference.read_model(model), torch.from_numpy(xy[0].copy()),
                                mask_half(torch.from_numpy(xy[1].copy())), out / debug_state_name(family, masked=True),
                                DebugOptimizer(steps=MASKED_STEPS))


def write_chat_shard(path: Path, vocab_size: int, seed: int, conversations: int, unsupervised: range = range(0)) -> None:
    """A chat shard of CHAT_FAMILY's format: `conversations` of T random ids below vocab_size, each a prompt (mask 0), a
    reply (mask 1) of random lengths and padding (mask 0); those in `unsupervised` have no reply (mask 0 throughout)."""
    import numpy as np

    from pyllmc.families import by_name
    from pyllmc.token_shards import write_chat_datafile

    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab_size, size=conversations * T)
    mask = np.zeros(conversations * T, dtype=np.uint8)
    for c in range(conversations):
        prompt = int(rng.integers(4, T // 2))
        reply = int(rng.integers(1, T - prompt))
        if c not in unsupervised:
            mask[c * T + prompt:c * T + prompt + reply] = 1
    write_chat_datafile(path, tokens, mask, T, by_name(CHAT_FAMILY).family.shards.model_desc, vocab_size)


def model_vocab(model: Path) -> int:
    """V: header[3] of every family's model file."""
    import numpy as np

    return int(np.fromfile(model, dtype="<i4", count=4)[3])


def pack(out: Path, cpu_trainer: Path) -> None:
    sys.path.insert(0, str(REPO))  # the references and pyllmc from this checkout, whichever Python runs this
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for family, (folder, stem) in MASKED_SOURCES.items():
        source = REPO / folder / stem
        if not (source.parent / f"{stem}_debug_state.bin").exists():
            raise SystemExit(f"error: {source}_debug_state.bin is missing: make gpu-pack builds it first (make "
                             f"{'cuda-cpu-refs' if family == 'gpt2' else family + '-debug-states'})")
        write_masked_state(family, source, out)
        print(f"gpu-pack: {out / f'{family}_masked_debug_state.bin'} (from {folder}/{stem})")
    vocab = model_vocab(out / f"{CHAT_FAMILY}.bin")
    write_chat_shard(out / "chat_train.bin", vocab, 1, 4 * B, unsupervised=range(B, 2 * B))
    write_chat_shard(out / "chat_val.bin", vocab, 2, 2 * B)
    proc = subprocess.run([str(cpu_trainer), *chat_flags(out)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"error: {cpu_trainer} on the chat shards exited {proc.returncode}: "
                         f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    losses = ChatRun.of(proc.stdout)
    if losses.problem(STEPS):
        raise SystemExit(f"error: {cpu_trainer} on the chat shards: {losses.problem(STEPS)}")
    cpu_log(out).write_text(proc.stdout)
    print(f"gpu-pack: {cpu_log(out)}: {cpu_trainer.name}'s step losses {losses.steps}, val losses {losses.vals}, "
          f"step {losses.skipped} skipped")


# ---------------------------------------------------------------------------- check (on the GPU)


class ChatRun:
    """The losses a trainer printed on the chat shards: {step: loss}, {step: val loss}, the steps it skipped."""

    def __init__(self, steps: dict[int, float], vals: dict[int, float], skipped: list[int], chat: bool) -> None:
        self.steps, self.vals, self.skipped, self.chat = steps, vals, skipped, chat

    @staticmethod
    def of(stdout: str) -> ChatRun:
        return ChatRun({int(s): float(v) for s, v in STEP_LOSS.findall(stdout)},
                       {int(s): float(v) for s, v in VAL_LOSS.findall(stdout)},
                       [int(s) for s in SKIPPED_STEP.findall(stdout)], CHAT_LINE in stdout)

    def problem(self, steps: int) -> str:
        """What is wrong with a run of `steps` steps on the packed shards ('' for nothing): it must have read them as
        chat shards, skipped step 2 alone, printed the other steps' losses and three val losses."""
        if not self.chat:
            return f"no line '{CHAT_LINE}'"
        if self.skipped != [2]:
            return f"skipped steps {self.skipped}, not [2] (the second batch has nothing supervised)"
        if sorted(self.steps) != [s for s in range(1, steps + 1) if s != 2] or len(self.vals) != 3:
            return f"step losses at {sorted(self.steps)} and {len(self.vals)} val losses, not steps 1, 3, 4 and 3"
        return ""


def compare(cpu: ChatRun, gpu: ChatRun) -> bool:
    """Prints the two runs' losses side by side; True when the GPU run is the CPU run within LOSS_BOUND."""
    bound = LOSS_BOUND * next(iter(cpu.steps.values()))
    print("| loss       | CPU (make gpu-pack) | GPU                 | difference |      |")
    print("|------------|---------------------|---------------------|------------|------|")
    ok = True
    for label, ours, theirs in [("step", cpu.steps, gpu.steps), ("val", cpu.vals, gpu.vals)]:
        for step in sorted(set(ours) | set(theirs)):
            a, b = ours.get(step), theirs.get(step)
            diff = abs(a - b) if a is not None and b is not None else None
            good = diff is not None and diff <= bound
            ok &= good
            print(f"| {f'{label} {step}':<10} | {a if a is not None else '-':>19} | {b if b is not None else '-':>19} | "
                  f"{'-' if diff is None else f'{diff:.2e}':>10} | {'ok' if good else 'FAIL':<4} |")
    same_skips = cpu.skipped == gpu.skipped
    print(f"skipped steps: CPU {cpu.skipped}, GPU {gpu.skipped}: {'ok' if same_skips else 'FAIL'}")
    print(f"bound: {LOSS_BOUND:g} of the first CPU step loss = {bound:.2e}")
    return ok and same_skips


def check(pack_dir: Path, trainer: Path, timeout: float) -> int:
    log = cpu_log(pack_dir)
    if not log.exists():
        print(f"error: {log} is missing: run make gpu-pack where the CPU trainer is, and carry its folder")
        return 2
    cpu = ChatRun.of(log.read_text())
    command = [str(trainer), *chat_flags(pack_dir)]
    print("gpu: " + " ".join(command))
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"FAIL: {trainer} ran past {timeout:g} s")
        return 1
    print(proc.stdout + proc.stderr, end="")  # one stream: the check's log keeps the trainer's lines in order
    gpu = ChatRun.of(proc.stdout)
    if proc.returncode != 0:
        print(f"FAIL: {trainer} exited {proc.returncode}: see its output above")
        return 1
    if gpu.problem(STEPS):
        print(f"FAIL: {trainer}: {gpu.problem(STEPS)}")
        return 1
    same = compare(cpu, gpu)
    print(f"chat shard: {Path(trainer).name} {'PASS' if same else 'FAIL'} against ./train_{CHAT_FAMILY}")
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    sub = p.add_subparsers(dest="command", required=True)
    p_pack = sub.add_parser("pack", help="here: the masked states, the chat shards and the CPU trainer's losses")
    p_pack.add_argument("-o", "--out", type=Path, default=Path(".gpu") / "chat", help="the folder to fill")
    p_pack.add_argument("--cpu_trainer", type=Path, default=REPO / f"train_{CHAT_FAMILY}",
                        help=f"the CPU trainer that records the losses (./train_{CHAT_FAMILY})")
    p_check = sub.add_parser("check", help="on the GPU: the GPU trainer on the packed chat shards against the CPU's losses")
    p_check.add_argument("--pack", type=Path, default=Path(".gpu") / "chat", help="the folder pack filled")
    p_check.add_argument("--trainer", type=Path, default=Path("build") / "gpu" / "bin" / "fp32" / f"train_{CHAT_FAMILY}cu",
                         help="the GPU trainer (FP32)")
    p_check.add_argument("--timeout", type=float, default=120, help="seconds the GPU trainer may run")
    args = p.parse_args(argv)
    if args.command == "pack":
        pack(args.out, args.cpu_trainer)
        return 0
    return check(args.pack, args.trainer, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
