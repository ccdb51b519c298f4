"""The nanochat GPU trainer, executed on the CPU execution target (dev/cuda_cpu): test_nanochatcu (FP32 with the tight
tolerances, BF16 with the BF16 rules) against train_nanochat.py's debug states of random tiny Hugging Face NanoChat
models, and its failure on corrupted copies of them; train_nanochatcu training a few steps, from scratch as the
reference does, and its checkpoints passed both ways between it and the CPU trainer ./train_nanochat.

The references are dev/nanochat_refs.py's (`make nanochat-debug-states`, build/nanochat/): nanochat_mha (MHA,
softcap 15, V=50304), nanochat_gqa (GQA 2:1, softcap 5, FFN not 4C), nanochat_mqa (MQA, HS 16, no softcap,
rope_theta 500, eps 1e-5) with 10 AdamW steps each, and in muon/ the GQA state of torch's Muon defaults and the MQA
state of other Muon settings; their shards (GPT-2 ids modulo 512) in ts/.
`make cuda-cpu-build` builds the programs (`make test` does it before pytest).
"""

from __future__ import annotations

import math
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, make, shared_dir
from test_cuda_cpu import (BASE_ENV, binary, check_test_program, debug_state_layout, failing_rows, run, state_span,
                           step_losses, write_corrupted_state)
from test_cuda_cpu_llama3 import continued_losses


@pytest.fixture(scope="session")
def nanochat_refs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dev/nanochat_refs.py's files, built once in build/nanochat; each test run gets its own copy."""
    def copy(out: Path) -> None:
        make("nanochat-debug-states")
        shutil.copytree(REPO / "build" / "nanochat", out, dirs_exist_ok=True)

    return shared_dir(tmp_path_factory, "nanochat_cuda_refs", copy)


def test_nanochatcu(refs: Path, tmp_path: Path, precision: str, model: str, *flags: str, passes: bool = True,
                    processes: int = 1) -> str:
    """test_nanochatcu_<precision> on refs/<model>.bin and its debug state (test_cuda_cpu.check_test_program)."""
    return check_test_program(f"test_nanochatcu_{precision}", refs, tmp_path, model, *flags, passes=passes, processes=processes)


test_nanochatcu.__test__ = False  # a helper, not a test


def model_header(model: Path) -> dict[str, int]:
    h = np.fromfile(model, dtype="<i4", count=9)
    return dict(zip(("maxT", "V", "L", "NH", "NKV", "C", "FFN"), (int(v) for v in h[2:9])))


def grad_offsets(model: Path) -> dict[str, tuple[int, int]]:
    """(offset, count) in floats of each gradient tensor in a debug state's gradients: llmc/nanochat.h's table."""
    h = model_header(model)
    V, L, C, FFN = h["V"], h["L"], h["C"], h["FFN"]
    QKV = (h["NH"] + 2 * h["NKV"]) * (C // h["NH"])
    out, pos = {}, 0
    for name, n in [("wte", V * C), ("qkvw", L * QKV * C), ("attprojw", L * C * C), ("fcw", L * FFN * C),
                    ("fcprojw", L * C * FFN), ("lm_head", V * C)]:
        out[name] = (pos, n)
        pos += n
    return out


def state_layout(model: Path, state: bytes) -> dict[str, int]:
    """Byte offsets in a debug state (test_cuda_cpu.debug_state_layout) of this model."""
    return debug_state_layout(state, model_header(model)["V"], sum(n for _, n in grad_offsets(model).values()))


# precision, references (build/nanochat or its muon/), model, flags: FP32 with the tight tolerances on GQA and MQA,
# BF16 with the BF16 rules on MHA, GQA and MQA; between them softcap 15, 5 and none, AdamW and both Muon settings,
# recompute, accumulation, and two processes with ZeRO-1 (each rank its rows, Muon's matrices owned whole by one rank
# or the other)
TEST_NANOCHATCU = [
    ("fp32", "", "nanochat_gqa", [], 1),
    ("fp32", "", "nanochat_mqa", ["-r", "2", "-a", "2"], 1),
    ("fp32", "muon", "nanochat_mqa", [], 1),
    ("bf16", "", "nanochat_mha", ["-r", "1"], 1),
    ("bf16", "", "nanochat_gqa", [], 1),
    ("bf16", "", "nanochat_mqa", ["-a", "2"], 1),
    ("bf16", "muon", "nanochat_gqa", ["-z", "1"], 2),
]


@pytest.mark.parametrize("precision,where,model,flags,processes", TEST_NANOCHATCU,
                         ids=[f"{p}-{w + '/' if w else ''}{m}{''.join(f)}{'-2procs' if n > 1 else ''}"
                              for p, w, m, f, n in TEST_NANOCHATCU])
def test_test_nanochatcu_passes_on_the_reference_states(nanochat_refs: Path, tmp_path: Path, precision: str, where: str,
                                                         model: str, flags: list[str], processes: int) -> None:
    out = test_nanochatcu(nanochat_refs / where, tmp_path, precision, model, *flags, processes=processes)
    for row in ("logits", "loss", "dwte", "dqkvw", "dattprojw", "dfcw", "dfcprojw", "dlm_head", "dwte unseen", "grad norm",
                "loss step 9", "resume params"):
        assert re.search(rf"^\| {row} +\|.*ok", out, re.M), f"no passing row {row}:\n{out[-3000:]}"
    assert ("optimizer: Muon" in out) == (where == "muon"), out[-3000:]


def test_test_nanochatcu_bf16_refuses_a_head_size_not_a_multiple_of_8(nanochat_refs: Path, tmp_path: Path) -> None:
    """BF16 moves heads in packets of 8 values: a model of head size 12 (C=48, NH=4, MQA) is refused in one line
    naming the sizes (FP32 runs any even head size)."""
    from pyllmc.families.nanochat import NanoChatConfig
    from train_nanochat import NanoChat, write_model

    model = NanoChat(NanoChatConfig(block_size=64, vocab_size=512, n_layer=1, n_head=4, n_kv_head=1, n_embd=48,
                                    ffn_hidden=128, softcap=0.0))
    model.init_weights(1)
    write_model(model, tmp_path / "hs12.bin", "float32")
    shard = nanochat_refs / "ts" / "tiny_shakespeare_train.bin"
    r = run([binary("train_nanochatcu_bf16"), "-e", tmp_path / "hs12.bin", "-i", shard, "-j", "", "-b", "2", "-t", "32",
             "-x", "1"], env=BASE_ENV, cwd=tmp_path)
    assert r.returncode != 0 and r.stderr.strip().count("\n") == 0, r.stdout[-2000:] + r.stderr
    assert "head size C/NH = 48/4" in r.stderr and "multiples of 8 in this build (BF16)" in r.stderr, r.stderr


# precision, references, model, what is corrupted, the one row that must fail: a corrupted copy of every state
# TEST_NANOCHATCU passes in each precision
CORRUPTED = [
    ("fp32", "", "nanochat_gqa", "logit", "logits"),
    ("fp32", "", "nanochat_mqa", "dqkvw k rows", "dqkvw"),
    ("fp32", "", "nanochat_mqa", "step loss", "loss step 5"),
    ("bf16", "", "nanochat_gqa", "dqkvw k rows", "dqkvw"),
    ("fp32", "muon", "nanochat_mqa", "dfcprojw", "dfcprojw"),
    ("bf16", "", "nanochat_mha", "dfcprojw", "dfcprojw"),
    ("bf16", "", "nanochat_mqa", "dqkvw k rows", "dqkvw"),
    ("bf16", "muon", "nanochat_gqa", "dfcprojw", "dfcprojw"),
]


@pytest.mark.parametrize("precision,where,model,what,row", CORRUPTED,
                         ids=[f"{p}-{w + '/' if w else ''}{m}-{what.replace(' ', '_')}" for p, w, m, what, _ in CORRUPTED])
def test_test_nanochatcu_fails_on_a_corrupted_state(nanochat_refs: Path, tmp_path: Path, precision: str, where: str,
                                                    model: str, what: str, row: str) -> None:
    """One logit off by 1e-2 (FP32: the issue's rule), layer 0's key rows of dqkvw 25 % off (as if the gradient of one
    of a key head's query heads were lost: GQA's and MQA's sums), dfcprojw 10 % off (beyond BF16's L2 bound), one step loss off by 1e-3: the
    row of what was corrupted fails, and no other but the gradient norm."""
    src = nanochat_refs / where
    lay = state_layout(src / f"{model}.bin", (src / f"{model}_debug_state.bin").read_bytes())
    h = model_header(src / f"{model}.bin")
    if what == "dqkvw k rows":
        off, _ = grad_offsets(src / f"{model}.bin")["qkvw"]
        start, count = lay["grads"] + 4 * (off + h["C"] * h["C"]), h["NKV"] * (h["C"] // h["NH"]) * h["C"]
    else:
        start, count = state_span(lay, what, grad_offsets(src / f"{model}.bin"))
    shift = {"logit": 1e-2, "step loss": 1e-3}.get(what, 0.0)
    write_corrupted_state(src, tmp_path, model, start, count, shift, 1.0 if shift else 1.25 if what == "dqkvw k rows" else 1.1)
    failing = failing_rows(test_nanochatcu(tmp_path, tmp_path, precision, model, passes=False))
    # the global gradient norm is the reference's from its (corrupted) gradients: it may fail with a gradient
    assert row in failing and set(failing) <= {row, "grad norm"}, failing


def reference_losses(model: Path, state: Path) -> list[float]:
    data = state.read_bytes()
    lay = state_layout(model, data)
    return list(struct.unpack_from(f"<{lay['nsteps']}f", data, lay["losses"]))


@pytest.mark.parametrize("precision,flags", [("fp32", []), ("bf16", ["-op", "muon", "-r", "1"])])
def test_train_nanochatcu_trains_from_the_reference_model(nanochat_refs: Path, tmp_path: Path, precision: str,
                                                          flags: list[str]) -> None:
    """3 steps of the GQA model on its validation shard, whose first batch is the debug state's: the first step's loss
    is the reference's (FP32: float32 noise; BF16: 1 %), the next ones finite, and a checkpoint a nanochat model file."""
    ref = nanochat_refs
    ts = ref / "ts" / "tiny_shakespeare_val.bin"
    r = run([binary(f"train_nanochatcu_{precision}"), "-e", ref / "nanochat_gqa.bin", "-i", ts, "-j", ts, "-b", "4", "-t", "64",
             "-x", "3", "-v", "0", "-s", "0", "-l", "1e-3", "-n", "3", "-o", tmp_path / "out", *flags], cwd=tmp_path, env=BASE_ENV)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    losses = step_losses(r.stdout)
    want = reference_losses(ref / "nanochat_gqa.bin", ref / "nanochat_gqa_debug_state.bin")[0]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses), r.stdout[-3000:]
    assert abs(losses[0] - want) <= (1e-5 if precision == "fp32" else 1e-2) * want, (losses, want)
    assert re.search(rf"^-op +{'muon' if 'muon' in flags else 'adamw'} ", r.stdout, re.M), r.stdout[-3000:]
    saved = tmp_path / "out" / "model_00000003.bin"
    assert saved.read_bytes()[:4] == (20251013).to_bytes(4, "little"), "the checkpoint is not a nanochat model file"


@pytest.mark.parametrize("program", ["test_nanochatcu_fp32", "train_nanochatcu_bf16"])
def test_another_familys_model_file_is_refused_in_one_line(nanochat_refs: Path, tmp_path: Path, program: str) -> None:
    """A Llama 3 model file (its header: magic 20240803) given to the nanochat programs: one line naming the file."""
    llama = tmp_path / "llama3.bin"
    llama.write_bytes(struct.pack("<256i", 20240803, 3, *[0] * 254) + bytes(2048))
    ts = nanochat_refs / "ts" / "tiny_shakespeare_val.bin"
    args = ["-s", nanochat_refs / "nanochat_gqa_debug_state.bin"] if program.startswith("test") else ["-i", ts, "-j", ts, "-x", "1"]
    r = run([binary(program), "-e", llama, *args], cwd=tmp_path, env=BASE_ENV)
    assert r.returncode != 0 and r.stderr.strip() == f"error: {llama}: not a nanochat model file (magic 20240803, expected 20251013)", \
        r.stdout[-2000:] + r.stderr


def test_train_nanochatcu_from_scratch_is_the_references_d2(nanochat_refs: Path, tmp_path: Path) -> None:
    """-e d2: the GPU trainer's init from scratch (llmc/nanochat.h, seed 42) is train_nanochat.py's: one step on the
    first batch of the GPT-2 validation shard, the batch of the d2 debug state, has its loss and gradient norm
    (FP32: float32 noise; the norm as printed, 4 decimals)."""
    ts = REPO / "dev" / "data" / "tinyshakespeare" / "tiny_shakespeare_val.bin"
    r = run([binary("train_nanochatcu_fp32"), "-e", "d2", "-i", ts, "-j", ts, "-b", "4", "-t", "64", "-x", "1", "-v", "0",
             "-s", "0"], cwd=tmp_path, env=BASE_ENV)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    step = re.search(r"^step 1/1 \| loss ([0-9.]+) \| lr [^|]+\| norm ([0-9.]+) ", r.stdout, re.M)
    assert step, r.stdout[-3000:]
    model = tmp_path / "d2.bin"  # the reference's model file gives the state's layout
    shutil.copy(nanochat_refs / "nanochat_d2.bin", model)
    data = (nanochat_refs / "nanochat_d2_debug_state.bin").read_bytes()
    lay = state_layout(model, data)
    loss, norm = struct.unpack_from("<f", data, lay["losses"])[0], struct.unpack_from("<f", data, lay["losses"] + 4 * lay["nsteps"])[0]
    assert abs(float(step.group(1)) - loss) <= 1e-5 * loss and abs(float(step.group(2)) - norm) <= 1e-4 + 1e-4 * norm, \
        (step.groups(), loss, norm)


def train_args(refs: Path) -> list[object]:
    """4 AdamW steps of the GQA model on its shards, checkpoints at steps 2 and 4."""
    return ["-e", refs / "nanochat_gqa.bin", "-i", refs / "ts" / "tiny_shakespeare_train.bin", "-j",
            refs / "ts" / "tiny_shakespeare_val.bin", "-b", 4, "-t", 64, "-x", 4, "-v", 0, "-s", 0, "-l", "1e-3", "-n", 2]


def train(program: Path, refs: Path, out: Path, *flags: object) -> str:
    r = run([str(a) for a in (program, *train_args(refs), "-o", out, *flags)], cwd=refs, env={**BASE_ENV, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


@pytest.mark.parametrize("first", ["train_nanochatcu", "train_nanochat"])
def test_a_checkpoint_continues_in_the_other_trainer(nanochat_refs: Path, tmp_path: Path, first: str) -> None:
    """The step-2 checkpoint (model and AdamW state) of train_nanochatcu (FP32) resumed by the CPU trainer, and the
    other way: steps 3 and 4 are the first run's within float32 noise (AdamW's update of near-zero gradients, about
    1e-5 of the loss after one step)."""
    make("train_nanochat")
    gpu, cpu = binary("train_nanochatcu_fp32"), REPO / "train_nanochat"
    one, two = (gpu, cpu) if first == "train_nanochatcu" else (cpu, gpu)
    a, b = continued_losses(tmp_path, lambda out: train(one, nanochat_refs, out),
                            lambda out: train(two, nanochat_refs, out, "-y", 1))
    assert max(abs(x - y) for x, y in zip(a[2:], b)) <= 5e-5 * a[2], (a, b)
