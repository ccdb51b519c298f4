"""The Qwen3 GPU trainer, executed on the CPU execution target (dev/cuda_cpu): test_qwen3cu (FP32 with the tight
tolerances, BF16 with the BF16 rules) against train_qwen3.py's debug states, including the models whose attention width
NH * head_dim differs from C, and its failure on corrupted copies of them; train_qwen3cu training from scratch as the CPU
trainer ./train_qwen3 does, and its checkpoints passed both ways between the two.

The references are dev/qwen3_refs.py's (`make qwen3-debug-states`, build/qwen3/): qwen3_d2 (GQA 2:1, head_dim 128: width
256 = 2C, untied), qwen3_mha (MHA, head_dim 48 at C = 64: width 192, tied), qwen3_mqa (MQA, head_dim 16 at C = 96: width
64 < C, untied, rope_theta 1e4) with 10 AdamW steps each, and in muon/ the d2 state of torch's Muon defaults and the MQA
state of other Muon settings; the <|endoftext|> test tokenizer's shards in ts/.
`make cuda-cpu-build` builds the programs (`make test` does it before pytest).
"""

from __future__ import annotations

import math
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, make
from test_cuda_cpu import (BASE_ENV, binary, check_test_program, debug_state_layout, failing_rows, run, state_span,
                           step_losses, write_corrupted_state)
from test_cuda_cpu_llama3 import continued_losses

QWEN3_MAGIC = 20250429


def model_header(model: Path) -> dict[str, int]:
    """llmc/qwen3.h's int header: maxT, V, L, NH, NKV, C, HS, FFN, tied."""
    h = np.fromfile(model, dtype="<i4", count=11)
    return dict(zip(("maxT", "V", "L", "NH", "NKV", "C", "HS", "FFN", "tied"), (int(v) for v in h[2:11])))


def grad_offsets(model: Path) -> dict[str, tuple[int, int]]:
    """(offset, count) in floats of each gradient tensor in a debug state's gradients: llmc/qwen3.h's table."""
    h = model_header(model)
    V, L, C, HS, FFN = h["V"], h["L"], h["C"], h["HS"], h["FFN"]
    AW, QKV = h["NH"] * HS, (h["NH"] + 2 * h["NKV"]) * HS
    out, pos = {}, 0
    for name, n in [("wte", V * C), ("ln1w", L * C), ("qkvw", L * QKV * C), ("qnormw", L * HS), ("knormw", L * HS),
                    ("attprojw", L * C * AW), ("ln2w", L * C), ("fcw", L * FFN * C), ("fcw2", L * FFN * C),
                    ("fcprojw", L * C * FFN), ("lnfw", C), ("lm_head", 0 if h["tied"] else V * C)]:
        out[name] = (pos, n)
        pos += n
    return out


def state_layout(model: Path, state: bytes) -> dict[str, int]:
    """Byte offsets in a debug state (test_cuda_cpu.debug_state_layout) of this model."""
    return debug_state_layout(state, model_header(model)["V"], sum(n for _, n in grad_offsets(model).values()))


def test_the_grad_layout_is_the_debug_states_size(qwen3_references: Path) -> None:
    """The table above against the files: after the gradients, each step's loss and gradient norm, then each step's
    loss noise (llmc/debug_state.h: header[11] of them) end the debug state."""
    for model in ("qwen3_d2", "qwen3_mha", "qwen3_mqa"):
        data = (qwen3_references / f"{model}_debug_state.bin").read_bytes()
        lay = state_layout(qwen3_references / f"{model}.bin", data)
        nnoise = struct.unpack_from("<i", data, 4 * 11)[0]
        assert lay["losses"] + 4 * (2 * lay["nsteps"] + nnoise) == len(data), model


# "precision [where/]model flags": FP32 with the tight tolerances on the d2 (width 2C), MHA (width 3C, tied) and MQA
# (width 2C/3) models, BF16 with the BF16 rules; between them AdamW and both Muon settings (muon/), recompute,
# accumulation, and with -z 1 two processes with ZeRO-1
TEST_QWEN3CU = ["fp32 qwen3_d2", "fp32 qwen3_mha -r 1", "fp32 qwen3_mqa -r 2 -a 2", "fp32 muon/qwen3_mqa", "bf16 qwen3_d2 -r 2",
                "bf16 qwen3_mha", "bf16 qwen3_mqa -a 2", "bf16 muon/qwen3_d2 -z 1"]


@pytest.mark.parametrize("case", TEST_QWEN3CU)
def test_test_qwen3cu_passes_on_the_reference_states(qwen3_references: Path, tmp_path: Path, case: str) -> None:
    precision, path, *flags = case.split()
    where, model = Path(path).parent, Path(path).name
    out = check_test_program(f"test_qwen3cu_{precision}", qwen3_references / where, tmp_path, model, *flags,
                             processes=2 if "-z" in flags else 1)
    for row in ("logits", "loss", "dwte", "dln1w", "dqkvw", "dqnormw", "dknormw", "dattprojw", "dln2w", "dfcw", "dfcw2",
                "dfcprojw", "dlnfw", "dwte unseen", "grad norm", "loss step 9", "resume params"):
        assert re.search(rf"^\| {row} +\|.*ok", out, re.M), f"no passing row {row}:\n{out[-3000:]}"
    tied = model_header(qwen3_references / where / f"{model}.bin")["tied"]
    assert ("dlm_head" in out) == (not tied), out[-3000:]
    assert ("optimizer: Muon" in out) == (str(where) == "muon"), out[-3000:]


# what is corrupted in which model's state, and in which precision: a tensor's gradient scaled by 1.1, one logit off by
# 1e-2, one step loss off by 1e-3
CORRUPTED = {"fp32": [("qwen3_d2", "logit"), ("qwen3_mqa", "dknormw"), ("qwen3_mqa", "step loss")],
             "bf16": [("qwen3_mha", "dattprojw")]}


@pytest.mark.parametrize("precision,model,what", [(p, m, w) for p, cases in CORRUPTED.items() for m, w in cases])
def test_test_qwen3cu_fails_on_a_corrupted_state(qwen3_references: Path, tmp_path: Path, precision: str, model: str,
                                                 what: str) -> None:
    """The row of what was corrupted fails, and no other but the gradient norm (the reference's, from its corrupted
    gradients)."""
    src, row = qwen3_references, {"logit": "logits", "step loss": "loss step 5"}.get(what, what)
    lay = state_layout(src / f"{model}.bin", (src / f"{model}_debug_state.bin").read_bytes())
    start, count = state_span(lay, what, grad_offsets(src / f"{model}.bin"))
    shift = {"logit": 1e-2, "step loss": 1e-3}.get(what, 0.0)
    write_corrupted_state(src, tmp_path, model, start, count, shift, 1.0 if shift else 1.1)
    failing = failing_rows(check_test_program(f"test_qwen3cu_{precision}", tmp_path, tmp_path, model, passes=False))
    assert row in failing and set(failing) <= {row, "grad norm"}, failing


def train_args(refs: Path, load: str, steps: int) -> list[object]:
    """steps of B=4, T=64 on the references' shards (run in refs, where -e d2 finds qwen3_tokenizer.bin)."""
    return ["-e", load, "-i", refs / "ts" / "tiny_shakespeare_train.bin", "-j", refs / "ts" / "tiny_shakespeare_val.bin",
            "-b", 4, "-t", 64, "-x", steps, "-v", 0, "-s", 0, "-l", "1e-3"]


def train(program: Path, refs: Path, *args: object) -> str:
    r = run([str(a) for a in (program, *args)], cwd=refs, env={**BASE_ENV, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def test_train_qwen3cu_from_scratch_trains_as_train_qwen3(qwen3_references: Path, tmp_path: Path) -> None:
    """-e d2 (head_dim 128: width 2C): the GPU trainer's init from scratch (llmc/qwen3.h) and its first 3 AdamW steps
    are the CPU trainer's (FP32: float32 noise); its checkpoint is a Qwen3 model file."""
    make("train_qwen3")
    gpu = step_losses(train(binary("train_qwen3cu_fp32"), qwen3_references, *train_args(qwen3_references, "d2", 3),
                            "-n", 3, "-o", tmp_path / "gpu"))
    cpu = step_losses(train(REPO / "train_qwen3", qwen3_references, *train_args(qwen3_references, "d2", 3)))
    assert len(gpu) == len(cpu) == 3 and all(math.isfinite(x) for x in gpu), (gpu, cpu)
    assert max(abs(a - b) for a, b in zip(gpu, cpu)) <= 1e-5 * cpu[0], (gpu, cpu)
    assert (tmp_path / "gpu" / "model_00000003.bin").read_bytes()[:4] == QWEN3_MAGIC.to_bytes(4, "little")


def test_train_qwen3cu_bf16_trains_with_muon(qwen3_references: Path, tmp_path: Path) -> None:
    """BF16 with -op muon and -r 1 on the MHA model (tied, width 3C): the first step's loss is the reference's within 1 %
    (the debug state's batch is the first of the train shard), the next ones finite."""
    ref = qwen3_references
    out = train(binary("train_qwen3cu_bf16"), ref, *train_args(ref, str(ref / "qwen3_mha.bin"), 3), "-op", "muon", "-r", 1)
    losses = step_losses(out)
    data = (ref / "qwen3_mha_debug_state.bin").read_bytes()
    want = struct.unpack_from("<f", data, state_layout(ref / "qwen3_mha.bin", data)["losses"])[0]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses), out[-3000:]
    assert abs(losses[0] - want) <= 1e-2 * want, (losses, want)
    assert re.search(r"^-op +muon ", out, re.M), out[-3000:]


@pytest.mark.parametrize("first", ["train_qwen3cu", "train_qwen3"])
def test_a_checkpoint_continues_in_the_other_trainer(qwen3_references: Path, tmp_path: Path, first: str) -> None:
    """The step-2 checkpoint (model and AdamW state) of train_qwen3cu (FP32) on the MQA model (width 2C/3) resumed by
    the CPU trainer, and the other way: steps 3 and 4 are the first run's within float32 noise."""
    make("train_qwen3")
    ref = qwen3_references
    gpu, cpu = binary("train_qwen3cu_fp32"), REPO / "train_qwen3"
    one, two = (gpu, cpu) if first == "train_qwen3cu" else (cpu, gpu)
    args = [*train_args(ref, str(ref / "qwen3_mqa.bin"), 4), "-n", 2]
    a, b = continued_losses(tmp_path, lambda out: train(one, ref, *args, "-o", out),
                            lambda out: train(two, ref, *args, "-o", out, "-y", 1))
    assert max(abs(x - y) for x, y in zip(a[2:], b)) <= 5e-5 * a[2], (a, b)


def test_another_familys_model_file_is_refused_in_one_line(qwen3_references: Path, tmp_path: Path) -> None:
    """A nanochat model file's headers (magic 20251013) given to test_qwen3cu and to train_qwen3cu: one line naming the
    file, from each."""
    other = tmp_path / "nanochat.bin"
    other.write_bytes(struct.pack("<256i", 20251013, 3, *[0] * 254) + bytes(2048))
    ts = qwen3_references / "ts" / "tiny_shakespeare_val.bin"
    for program, args in (("test_qwen3cu_fp32", ["-s", qwen3_references / "qwen3_mqa_debug_state.bin"]),
                          ("train_qwen3cu_bf16", ["-i", ts, "-j", ts, "-x", "1"])):
        r = run([binary(program), "-e", other, *args], cwd=tmp_path, env=BASE_ENV)
        line = f"error: {other}: not a Qwen3 model file (magic 20251013, expected {QWEN3_MAGIC})"
        assert r.returncode != 0 and r.stderr.strip() == line, (program, r.stdout[-2000:] + r.stderr)
