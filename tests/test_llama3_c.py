"""The C side of Llama 3: test_llama3 against train_llama3.py's debug states (a d2 state, GQA 2:1, and a GQA
4:1 state with a tied head and Llama 3.1 RoPE scaling; Muon states of both), its failure on corrupted states,
train_llama3's init, resume, MPI + ZeRO-1 (AdamW and -op muon), bad input, training on tinyshakespeare with the
local test tokenizer, and ./generate.

The reference files are dev/llama3_refs.py's, from `make llama3-debug-states` (tests/conftest.py llama3_references).
"""

from __future__ import annotations

import re
import shutil
import struct
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import (BF16_INJECTED_DECISIONS, REPO, assert_one_error_line,  # noqa: E402
                      bf16_decision, killed_after, run)
from decoder_c import (MPI_ENV, MPIRUN, MUON, ONE_THREAD, bad_state_test,  # noqa: E402
                       assert_corrupted_state_fails, assert_mutated_headers_load_or_fail_in_one_line, assert_resume_is_bit_identical,
                       assert_training_lowered_the_loss, assert_two_processes_equal_one, family_fixtures,
                       run_test_program, run_trainer, running_offsets, train_losses)


# ---------------------------------------------------------------------------- reference files


binaries, ref = family_fixtures("llama3")
train = partial(run_trainer, "llama3")  # train(ref, cwd, *flags, mpi_ranks=0, check=True, env=None)
test_llama3 = partial(run_test_program, "llama3")  # test_llama3(ref, model, *flags, check=True)
test_llama3.__test__ = False  # a helper, not a test


# ---------------------------------------------------------------------------- test_llama3 vs PyTorch


@pytest.mark.parametrize("model", ["llama3_d2", "llama3_gqa"])
def test_test_llama3_passes_on_the_reference_states(binaries, ref: Path, model: str) -> None:
    out = test_llama3(ref, model).stdout
    assert re.search(r"^\d+ passed, 0 failed$", out, re.M), out
    for name in ["logits", "loss", "dwte", "dqkvw", "dfcw2", "dfcprojw", "dlnfw", "loss step 9", "norm step 9"]:
        assert re.search(rf"^\| {re.escape(name)} .*\| ok +\|$", out, re.M), (name, out)
    assert ("dlm_head" in out) == (model == "llama3_d2")  # the GQA model's head is tied to wte


def test_test_llama3_passes_with_bf16_matmuls_and_reads_bf16_model_files(binaries, ref: Path, tmp_path: Path) -> None:
    out = test_llama3(ref, "llama3_d2", "-p", "bf16").stdout
    assert "bf16 (GEMM inputs rounded to bf16)" in out and re.search(r"^\d+ passed, 0 failed$", out, re.M), out
    # the bf16 model file is the fp32 one rounded: widened on load, the bf16 table holds
    shutil.copy(ref / "llama3_d2_debug_state.bin", tmp_path / "llama3_d2_bf16_debug_state.bin")
    shutil.copy(ref / "llama3_d2_bf16.bin", tmp_path / "llama3_d2_bf16.bin")
    test_llama3(tmp_path, "llama3_d2_bf16", "-p", "bf16")


def param_offsets(model: Path) -> dict[str, tuple[int, int]]:
    """(offset, count) in floats of each gradient tensor in the debug state's grads, from the model header."""
    h = np.fromfile(model, dtype="<i4", count=256)
    V, L, NH, NKV, C, tied, FFN = (int(h[i]) for i in (3, 4, 5, 6, 7, 16, 17))
    QKV = (NH + 2 * NKV) * (C // NH)
    sizes = [("wte", V * C), ("ln1w", L * C), ("qkvw", L * QKV * C), ("attprojw", L * C * C), ("ln2w", L * C),
             ("fcw", L * FFN * C), ("fcw2", L * FFN * C), ("fcprojw", L * C * FFN), ("lnfw", C),
             ("lm_head", 0 if tied else V * C)]
    return running_offsets(sizes)


@pytest.mark.parametrize("what", ["logits", "dqkvw k rows", "dfcw2", "dln1w", "step loss"])
def test_test_llama3_fails_on_a_corrupted_state(binaries, ref: Path, tmp_path: Path, what: str) -> None:
    # the key rows of layer 0 (4 query heads of 32 rows, then the key head): wrong only if the GQA gradient sum is wrong
    assert_corrupted_state_fails("llama3", ref, tmp_path, "llama3_gqa", what, param_offsets(ref / "llama3_gqa.bin"),
                                 k_rows=(4 * 32 * 128, 32 * 128))


# a GPT-2 debug state's magic; the GQA model's state does not fit d2
test_test_llama3_refuses_a_bad_state_with_one_line = bad_state_test("llama3", 20240327, "llama3_gqa")


# ---------------------------------------------------------------------------- train_llama3


def test_init_from_scratch_equals_train_llama3_py_bit_for_bit(binaries, ref: Path, tmp_path: Path) -> None:
    train(ref, tmp_path, "-e", "d2", "-x", 0, "-o", "out", "-n", 1)
    assert (tmp_path / "out" / "model_00000000.bin").read_bytes() == (ref / "llama3_d2.bin").read_bytes()


def test_training_lowers_the_loss_and_prints_decoded_samples(binaries, ref: Path, tmp_path: Path) -> None:
    proc = train(ref, tmp_path, "-e", "d2", "-b", 8, "-t", 64, "-x", 40, "-l", 1e-3, "-v", 20, "-m", 4, "-s", 40, "-g", 24,
                 "-o", "out")
    assert_training_lowered_the_loss(proc, tmp_path / "out" / "main.log", 40)


@pytest.fixture(scope="module")
def fp32_and_bf16_losses(binaries, ref: Path, tmp_path_factory) -> tuple[list[float], list[float]]:
    """4 steps of d2 with -p fp32 and with -p bf16 under LLMC_BF16=force (neither prints a -p bf16 line)."""
    tmp = tmp_path_factory.mktemp("llama3_bf16")
    fp32 = bf16_run(ref, tmp / "fp32", "fp32", {})
    bf16 = bf16_run(ref, tmp / "bf16", "bf16", {"LLMC_BF16": "force"})
    assert "-p bf16:" not in fp32[0] + bf16[0] and len(fp32[1]) == len(bf16[1]) == 4
    assert fp32[1] != bf16[1]
    return fp32[1], bf16[1]


def bf16_run(ref: Path, cwd: Path, precision: str, env: dict[str, str]) -> tuple[str, list[float]]:
    """stdout and train losses of 4 d2 steps in the given -p precision."""
    proc = train(ref, cwd, "-e", "d2", "-b", 2, "-t", 32, "-x", 4, "-v", 0, "-o", "out", "-p", precision,
                 env={"LLMC_BF16": "", "LLMC_BF16_RATES": "", **env})
    return proc.stdout, train_losses(cwd / "out" / "main.log")


@pytest.mark.parametrize(("env", "kept"), BF16_INJECTED_DECISIONS, ids=lambda v: str(v).replace(" ", ""))
def test_bf16_decision_steered_both_ways(fp32_and_bf16_losses, ref: Path, tmp_path: Path, env: dict[str, str],
                                         kept: bool) -> None:
    out, losses = bf16_run(ref, tmp_path, "bf16", env)
    assert bf16_decision(out, env) == kept
    assert losses == fp32_and_bf16_losses[1 if kept else 0]


def test_bf16_real_calibration_agrees_with_its_rates(fp32_and_bf16_losses, ref: Path, tmp_path: Path) -> None:
    out, losses = bf16_run(ref, tmp_path, "bf16", {})
    assert losses == fp32_and_bf16_losses[1 if bf16_decision(out, {}) else 0]


def test_bf16_processes_agree_on_fp32_when_one_cpu_gains_nothing(binaries, ref: Path, tmp_path: Path) -> None:
    """mpirun with one rank whose CPU pays and one whose does not: both train fp32, and rank 0 says why in one
    line: its own rates when it is the one refusing, else that another process's CPU gains nothing."""
    cmd = [REPO / "train_llama3", "-i", ref / "ts" / "tiny_shakespeare_train.bin", "-j", "", "-s", 0, "-e", "d2",
           "-b", 1, "-t", 32, "-x", 3, "-v", 0, "-p"]
    losses = {}
    for rates in [("184,106", "106,184"), ("106,184", "184,106"), None]:
        out = tmp_path / ("fp32" if rates is None else rates[0])
        out.mkdir()
        shutil.copy(ref / "llama3_tokenizer.bin", out)
        if rates is None:
            mpmd = ["-np", 2, *cmd, "fp32", "-o", "out"]
        else:
            mpmd = [arg for r in rates for arg in ["-np", 1, "-x", f"LLMC_BF16_RATES={r}", *cmd, "bf16", "-o", "out", ":"]][:-1]
        proc = run([MPIRUN, "--oversubscribe", *mpmd], cwd=out, env={**MPI_ENV, "LLMC_BF16": ""})
        said = [line for line in proc.stdout.splitlines() if line.startswith("-p bf16")]
        if rates == ("184,106", "106,184"):
            assert said == ["-p bf16: training in fp32 instead: another process's CPU gains nothing from bf16 "
                            "(LLMC_BF16=force runs bf16)"]
        elif rates is not None:
            assert len(said) == 1 and not bf16_decision(said[0], {"LLMC_BF16_RATES": rates[0]})
        losses[rates] = train_losses(out / "out" / "main.log")
    assert len(losses[None]) == 3 and all(v == losses[None] for v in losses.values()), losses


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resume_continues_bit_identically(binaries, ref: Path, tmp_path: Path, optimizer: str) -> None:
    flags = ["-e", "d2", "-b", 2, "-t", 32, "-x", 8, "-v", 4, "-m", 2, "-n", 4, "-c", 0.1, "-u", 2, "-s", 8, "-g", 8,
             *(MUON if optimizer == "muon" else [])]
    assert_resume_is_bit_identical("llama3", ref, tmp_path, flags, optimizer)


def test_gradient_accumulation_matches_larger_batch(binaries, ref: Path, tmp_path: Path) -> None:
    """Two micro-steps of B=2 add up to one step of B=4: the first backward after zero_grad overwrites the
    gradients it marked stale (cpu_model.h's lazy_zero_grad), the second must add to them."""
    common = ["-e", "d2", "-t", 32, "-x", 6, "-v", 0]
    train(ref, tmp_path, *common, "-b", 4, "-o", "big")
    train(ref, tmp_path, *common, "-b", 2, "-d", 2 * 2 * 32, "-o", "accum")
    a, b = train_losses(tmp_path / "big" / "main.log"), train_losses(tmp_path / "accum" / "main.log")
    assert len(a) == len(b) == 6
    assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-5, (a, b)


def test_two_processes_with_zero1_equal_one_process(binaries, ref: Path, tmp_path: Path) -> None:
    assert_two_processes_equal_one("llama3", ref, tmp_path, ["-e", "d2", "-t", 32, "-x", 6, "-v", 0, "-c", 0.1], 6)


def test_two_processes_with_zero1_resume_bit_identically(binaries, ref: Path, tmp_path: Path) -> None:
    flags = ["-e", "d2", "-b", 2, "-t", 32, "-x", 6, "-v", 0, "-n", 3, "-z", 1, "-c", 0.1]
    train(ref, tmp_path, *flags, "-o", "straight", mpi_ranks=2)
    part = killed_after(tmp_path / "straight", tmp_path / "part", 3, ranks=2)
    train(ref, tmp_path, *flags, "-o", "part", "-y", 1, mpi_ranks=2)
    assert train_losses(tmp_path / "straight" / "main.log")[3:] == train_losses(part / "main.log")
    assert (tmp_path / "straight" / "model_00000006.bin").read_bytes() == (part / "model_00000006.bin").read_bytes()


@pytest.mark.parametrize("damage", ["magic", "truncated", "ffn", "kv heads", "gpt2 file", "missing"])
def test_a_bad_model_file_gets_one_error_line(binaries, ref: Path, tmp_path: Path, damage: str) -> None:
    data = bytearray((ref / "llama3_d2.bin").read_bytes())
    if damage == "magic":
        struct.pack_into("<i", data, 0, 20240804)
    elif damage == "truncated":
        data = data[:-4]
    elif damage == "ffn":
        struct.pack_into("<i", data, 17 * 4, 384)
    elif damage == "kv heads":
        struct.pack_into("<i", data, 6 * 4, 3)
    elif damage == "gpt2 file":
        data = bytearray((REPO / "gpt2_124M.bin").read_bytes()[:4096]) if (REPO / "gpt2_124M.bin").exists() else data
        struct.pack_into("<i", data, 0, 20240326)
    path = tmp_path / "bad.bin"
    if damage != "missing":
        path.write_bytes(bytes(data))
    line = assert_one_error_line(train(ref, tmp_path, "-e", path, "-x", 1, check=False))
    assert str(path) in line
    assert {"magic": "magic 20240804", "truncated": "truncated", "ffn": "FFN hidden size 384", "kv heads": "NKV = 3",
            "gpt2 file": "magic 20240326", "missing": "no such Llama 3 model file"}[damage] in line


def test_every_mutated_header_field_loads_or_gets_one_error_line(binaries, ref: Path, tmp_path: Path) -> None:
    """Each int32 field 1..17 and float32 field 0..6 of the model header set to hostile values: the loader either
    takes the file (a field it ignores, or a value that still describes this file) or stops with one error line;
    it never crashes or reads past the file. Driven through ./generate (the same loader as train_llama3, without
    MPI's start-up cost)."""
    assert_mutated_headers_load_or_fail_in_one_line("llama3", (ref / "llama3_d2.bin").read_bytes(), tmp_path, ref,
                                                    ints=17, floats=7, generate_flags=[])


@pytest.mark.parametrize("damage", ["bos", "gpt2 tokenizer", "missing"])
def test_a_bad_tokenizer_file_gets_one_error_line(binaries, ref: Path, tmp_path: Path, damage: str) -> None:
    tok = bytearray((ref / "llama3_tokenizer.bin").read_bytes())
    if damage == "bos":
        struct.pack_into("<I", tok, 16, 100000)
    elif damage == "gpt2 tokenizer":
        struct.pack_into("<I", tok, 4, 2)
    tmp_path.mkdir(exist_ok=True)
    if damage != "missing":
        (tmp_path / "llama3_tokenizer.bin").write_bytes(bytes(tok))
    cmd = [REPO / "train_llama3", "-i", ref / "ts" / "tiny_shakespeare_train.bin", "-j", "", "-e", "d2", "-x", 1]
    line = assert_one_error_line(run(cmd, cwd=tmp_path, env=ONE_THREAD, check=False))
    assert {"bos": "BOS token 100000", "gpt2 tokenizer": "not a Llama 3 one", "missing": "llama3_tokenizer.bin: no such file"}[damage] in line


def test_missing_data_names_the_llama3_data_command(binaries, ref: Path, tmp_path: Path) -> None:
    cmd = [REPO / "train_llama3", "-i", tmp_path / "tinyshakespeare_llama3" / "tiny_shakespeare_train.bin", "-e", "d2", "-x", 1]
    line = assert_one_error_line(run(cmd, cwd=tmp_path, env=ONE_THREAD, check=False))
    assert "run python dev/data/tinyshakespeare.py --model_desc llama-3 --tokenizer DIR to create it" in line


def test_out_of_range_tokens_in_the_data_get_one_error_line(binaries, ref: Path, tmp_path: Path) -> None:
    vocab = int(np.fromfile(ref / "llama3_tokenizer.bin", dtype="<u4", count=3)[2])
    data = bytearray((ref / "ts" / "tiny_shakespeare_train.bin").read_bytes())
    struct.pack_into("<I", data, 1024 + 4 * 100, vocab)  # token 100 = the vocabulary size
    shard = tmp_path / "train.bin"
    shard.write_bytes(bytes(data))
    cmd = [REPO / "train_llama3", "-i", shard, "-j", "", "-e", "d2", "-x", 1]
    shutil.copy(ref / "llama3_tokenizer.bin", tmp_path)
    line = assert_one_error_line(run(cmd, cwd=tmp_path, env=ONE_THREAD, check=False))
    assert line == f"error: {shard}: token id {vocab} at position 100 >= vocab size {vocab}"


def write_tokens(path: Path, tokens: np.ndarray, model_desc: str) -> Path:
    """tokens as a gpt-2 (magic 20240520, version 1, uint16) or llama-3 (20240801, 7, uint32) token shard."""
    magic, version, dtype = {"gpt-2": (20240520, 1, "<u2"), "llama-3": (20240801, 7, "<u4")}[model_desc]
    path.parent.mkdir(parents=True, exist_ok=True)
    header = np.zeros(256, dtype="<i4")
    header[:3] = [magic, version, len(tokens)]
    path.write_bytes(header.tobytes() + tokens.astype(dtype).tobytes())
    return path


@pytest.mark.parametrize("flag", ["-i", "-j"])
def test_a_gpt2_shard_of_valid_llama3_ids_gets_one_error_line_and_the_llama3_shard_trains(binaries, ref: Path,
                                                                                        tmp_path: Path, flag: str) -> None:
    """The first 4,000 ids of the llama-3 train shard written in both formats: every id is below the vocabulary,
    so only the format tells them apart. The llama-3 shard trains a step; the gpt-2 one, given as train (-i) or
    val (-j) data, stops ./train_llama3 before its first step with one line naming both formats and the
    command that writes llama-3 shards for the data the shard's name says (dev/data/tinyshakespeare)."""
    tokens = np.fromfile(ref / "ts" / "tiny_shakespeare_train.bin", dtype="<u4", offset=1024)[:4000]
    llama3 = write_tokens(tmp_path / "llama3" / "tinyshakespeare" / "tiny_shakespeare_train.bin", tokens, "llama-3")
    gpt2 = write_tokens(tmp_path / "gpt2" / "tinyshakespeare" / "tiny_shakespeare_train.bin", tokens, "gpt-2")
    shutil.copy(ref / "llama3_tokenizer.bin", tmp_path)
    flags = ["-e", "d2", "-b", 1, "-t", 32, "-x", 1, "-s", 0, "-v", 1, "-m", 1]

    def train_on(shard: Path):
        data = ["-i", shard, "-j", llama3] if flag == "-i" else ["-i", llama3, "-j", shard]
        return run([REPO / "train_llama3", *data, *flags], cwd=tmp_path, env=ONE_THREAD, check=False)

    trained = train_on(llama3)
    assert trained.returncode == 0 and "\nstep 1/1 |" in trained.stdout, trained.stdout[-2000:] + trained.stderr[-2000:]
    refused = train_on(gpt2)
    line = assert_one_error_line(refused)
    assert line == (f"error: {gpt2}: a gpt-2 token shard (magic 20240520, uint16 tokens), but this model reads llama-3 "
                    "shards (magic 20240801, uint32 tokens); python dev/data/tinyshakespeare.py --model_desc llama-3 "
                    "--tokenizer DIR writes them")
    assert not re.search(r"^step ", refused.stdout, re.M), refused.stdout[-2000:]


# ---------------------------------------------------------------------------- Muon (-op muon)

@pytest.fixture(scope="module")
def muon_ref(ref: Path) -> Path:
    """llama3_d2.bin with the debug state of train_llama3.py --optimizer muon (torch's Muon defaults), and
    llama3_gqa.bin with a Muon debug state of the other settings (dev/llama3_refs.py GQA_MUON): 10 steps each."""
    return ref / "muon"


@pytest.mark.parametrize("model,precision", [("llama3_d2", "fp32"), ("llama3_d2", "bf16"), ("llama3_gqa", "fp32")])
def test_test_llama3_passes_on_the_muon_debug_states(binaries, muon_ref: Path, model: str, precision: str) -> None:
    out = test_llama3(muon_ref, model, "-p", precision).stdout
    said = {"llama3_d2": "(lr 0.001, momentum 0.95, nesterov 1, 5 Newton-Schulz steps, lr adjustment original)",
            "llama3_gqa": "(lr 0.02, momentum 0.9, nesterov 0, 4 Newton-Schulz steps, lr adjustment match_rms_adamw)"}[model]
    assert f"with Muon on the block matrices {said}" in out, out
    assert re.search(r"^\d+ passed, 0 failed$", out, re.M), out
    for name in ["loss step 9", "norm step 9"]:
        assert re.search(rf"^\| {name} .*\| ok +\|$", out, re.M), (name, out)


@pytest.mark.parametrize("what", ["loss", "momentum"])
def test_test_llama3_fails_on_a_corrupted_muon_state(binaries, muon_ref: Path, tmp_path: Path, what: str) -> None:
    state = bytearray((muon_ref / "llama3_d2_debug_state.bin").read_bytes())
    nsteps = struct.unpack_from("<i", state, 16)[0]
    losses = len(state) - 3 * 4 * nsteps  # the step losses, their grad norms, their noises
    if what == "loss":
        struct.pack_into("<f", state, losses + 3 * 4, struct.unpack_from("<f", state, losses + 3 * 4)[0] + 0.01)
    else:
        struct.pack_into("<f", state, 14 * 4, 0.5)
    (tmp_path / "llama3_d2_debug_state.bin").write_bytes(bytes(state))
    shutil.copy(muon_ref / "llama3_d2.bin", tmp_path)
    proc = test_llama3(tmp_path, "llama3_d2", check=False)
    assert proc.returncode == 1, proc.stdout
    failing = [line for line in proc.stdout.splitlines() if "FAIL" in line]
    assert failing and all("loss step" in line or "norm step" in line for line in failing), failing
    if what == "loss":
        assert len(failing) == 1 and "loss step 3" in failing[0]


def test_muon_training_lowers_the_loss(binaries, ref: Path, tmp_path: Path) -> None:
    proc = train(ref, tmp_path, "-e", "d2", "-b", 8, "-t", 64, "-x", 40, "-l", 1e-3, *MUON, "-v", 20, "-m", 4, "-o", "out")
    assert "optimizer: Muon (lr 0.02, momentum 0.95, nesterov 1, 5 Newton-Schulz steps, lr adjustment original) on the 10 block matrices" in proc.stdout
    losses = train_losses(tmp_path / "out" / "main.log")
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.8, losses
    vals = [float(v) for v in re.findall(r"val loss (\S+)", proc.stdout)]
    assert len(vals) == 3 and vals[2] < vals[0] - 0.8, proc.stdout


def test_mpi_zero1_muon_equals_one_process(binaries, ref: Path, tmp_path: Path) -> None:
    common = ["-e", "d2", "-t", 32, "-x", 6, "-v", 0, "-c", 0.1, *MUON]
    train(ref, tmp_path, *common, "-b", 4, "-o", "one")
    proc = train(ref, tmp_path, *common, "-b", 2, "-z", 1, "-n", 6, "-o", "z1", mpi_ranks=2)
    assert "(Muon matrices whole)" in proc.stdout, proc.stdout
    train(ref, tmp_path, *common, "-b", 2, "-z", 0, "-o", "z0", mpi_ranks=2)
    one, z1, z0 = (train_losses(tmp_path / d / "main.log") for d in ("one", "z1", "z0"))
    assert z1 == z0  # every matrix updated whole by its owner and broadcast: the bits of every process updating all
    assert len(one) == 6 and max(abs(a - b) for a, b in zip(one, z1)) <= 1e-5, (one, z1)
    # each rank's state: its shard of the AdamW parameters and the matrices the references' owners_by_size gives it
    from pyllmc.reference.optimizers import owners_by_size
    h = np.fromfile(ref / "llama3_d2.bin", dtype="<i4", count=256)
    L, offsets = int(h[4]), param_offsets(ref / "llama3_d2.bin")
    blocks = ["qkvw", "attprojw", "fcw", "fcw2", "fcprojw"]
    matrices = [offsets[name][1] // L for name in blocks for _ in range(L)]
    adamw = sum(n for _, n in offsets.values()) - sum(matrices)
    owners = owners_by_size(matrices, 2)
    for rank in range(2):
        header = np.fromfile(tmp_path / "z1" / f"state_00000006_{rank:05d}.bin", dtype="<u8", count=128)
        shard = min(-(-adamw // 2), adamw - rank * -(-adamw // 2))
        assert header[22] == shard + sum(n for n, o in zip(matrices, owners) if o == rank)


def test_muon_resume_of_an_adamw_state_is_refused_in_one_line(binaries, ref: Path, tmp_path: Path) -> None:
    flags = ["-e", "d2", "-b", 1, "-t", 32, "-v", 0, "-n", 2, "-o", "out"]
    train(ref, tmp_path, *flags, "-x", 2)
    proc = train(ref, tmp_path, *flags, "-x", 4, "-y", 1, *MUON, check=False)
    assert "written with optimizer adamw, this run uses -op muon" in assert_one_error_line(proc)


@pytest.mark.parametrize("flags,message", [(["-op", "sgd"], 'flag -op: bad value "sgd"'),
                                           (["-op", "muon", "-oa", "spectral"], 'flag -oa: bad value "spectral"'),
                                           (["-op", "muon", "-os", "0"], "-os")])
def test_bad_muon_flags_give_one_error_line(binaries, ref: Path, tmp_path: Path, flags: list[str], message: str) -> None:
    proc = train(ref, tmp_path, "-e", "d2", "-x", 1, *flags, check=False)
    assert message in assert_one_error_line(proc)


def test_help_lists_the_muon_flags(binaries) -> None:
    out = run([REPO / "train_llama3", "--help"]).stdout
    for flag in ["-op", "-ol", "-om", "-on", "-os", "-oa"]:
        assert re.search(rf"^\s*{flag}\s", out, re.M), (flag, out)


# ---------------------------------------------------------------------------- generate


def test_generate_prints_decoded_text_from_a_llama_model_and_its_gqa_cache_matches(binaries, ref: Path,
                                                                                  tmp_path: Path) -> None:
    flags = ["-t", ref / "llama3_tokenizer.bin", "-n", 40, "--seed", 5, "--no-stop"]
    for model in ["llama3_d2", "llama3_gqa"]:
        proc = run([REPO / "generate", "-e", ref / f"{model}.bin", *flags, "--check-kv"], env=ONE_THREAD)
        assert "check-kv: 40 steps" in proc.stderr, proc.stderr
    # a trained model says something shakespearean-looking; the same seed gives the same text
    train(ref, tmp_path, "-e", "d2", "-b", 8, "-t", 64, "-x", 40, "-l", 1e-3, "-v", 0, "-o", "out", "-n", 40)
    model = tmp_path / "out" / "model_00000040.bin"
    a = run([REPO / "generate", "-e", model, *flags, "--ids", "512"], env=ONE_THREAD).stdout
    b = run([REPO / "generate", "-e", model, *flags, "--ids", "512"], env=ONE_THREAD).stdout
    assert a == b and re.search(r"[a-z]{2,} [a-z]", a), a
    # a text prompt is BOS + its ids (tests/test_llama3_encode.py compares them with the tokenizers library)
    c = run([REPO / "generate", "-e", model, *flags, "-p", "ROMEO:", "--print-ids"], env=ONE_THREAD)
    assert re.search(r"^prompt ids: 512( \d+)+$", c.stderr, re.M) and c.stdout.startswith("ROMEO:"), c.stderr
    line = assert_one_error_line(run([REPO / "generate", "-e", model, *flags, "-p", "Hello", "--ids", "512"], check=False))
    assert "--ids" in line
