"""The C side of Qwen3: test_qwen3 against train_qwen3.py's debug states (d2 from scratch: GQA 2:1 with head_dim 128, an
attention width twice C; MHA of head_dim 48, tied; MQA of head_dim 16, a width below C; Muon states of d2 and MQA), in
fp32 and -p bf16, its failure on corrupted states, train_qwen3's init from scratch bit for bit, one and two threads
bit-identical, resume, two processes with ZeRO-1, bad input, training on tinyshakespeare with the local <|endoftext|>
tokenizer, and ./generate.

The reference files are dev/qwen3_refs.py's, from `make qwen3-debug-states` (tests/conftest.py qwen3_references).
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
from conftest import PYTHON, REPO, assert_one_error_line, run  # noqa: E402
from decoder_c import (MUON, ONE_THREAD, bad_state_test, assert_corrupted_state_fails,  # noqa: E402
                       assert_mutated_headers_load_or_fail_in_one_line, assert_resume_is_bit_identical,
                       assert_training_lowered_the_loss, assert_two_processes_equal_one, family_fixtures,
                       run_test_program, run_trainer, running_offsets, train_losses)

MODELS = ["qwen3_d2", "qwen3_mha", "qwen3_mqa", "muon/qwen3_d2", "muon/qwen3_mqa"]


binaries, ref = family_fixtures("qwen3")
train = partial(run_trainer, "qwen3")  # train(ref, cwd, *flags, mpi_ranks=0, check=True, env=None)
test_qwen3 = partial(run_test_program, "qwen3")  # test_qwen3(ref, model, *flags, check=True)
test_qwen3.__test__ = False  # a helper, not a test


def param_offsets(model: Path) -> dict[str, tuple[int, int]]:
    """(offset, count) in floats of each gradient tensor in the debug state's grads, from the model header."""
    h = np.fromfile(model, dtype="<i4", count=256)
    V, L, NH, NKV, C, HS, FFN, tied = (int(h[i]) for i in range(3, 11))
    sizes = [("wte", V * C), ("ln1w", L * C), ("qkvw", L * (NH + 2 * NKV) * HS * C), ("qnormw", L * HS),
             ("knormw", L * HS), ("attprojw", L * C * NH * HS), ("ln2w", L * C), ("fcw", L * FFN * C),
             ("fcw2", L * FFN * C), ("fcprojw", L * C * FFN), ("lnfw", C), ("lm_head", 0 if tied else V * C)]
    return running_offsets(sizes)


# ---------------------------------------------------------------------------- test_qwen3 vs PyTorch


@pytest.mark.parametrize("model", MODELS)
def test_test_qwen3_passes_on_the_reference_states(binaries, ref: Path, model: str) -> None:
    out = test_qwen3(ref, model).stdout
    assert re.search(r"^\d+ passed, 0 failed$", out, re.M), out
    for name in ["logits", "loss", "dwte", "dqkvw", "dqnormw", "dknormw", "dattprojw", "dfcw2", "dlnfw", "loss step 9",
                 "norm step 9"]:
        assert re.search(rf"^\| {re.escape(name)} .*\| ok +\|$", out, re.M), (name, out)
    assert ("dlm_head" in out) == (model != "qwen3_mha")  # the MHA model's head is tied to wte
    assert ("with Muon on the block matrices" in out) == model.startswith("muon/"), out[:600]


@pytest.mark.parametrize("model", ["qwen3_d2", "qwen3_mqa", "muon/qwen3_mqa"])
def test_test_qwen3_passes_with_bf16_matmuls(binaries, ref: Path, model: str) -> None:
    out = test_qwen3(ref, model, "-p", "bf16").stdout
    assert "bf16 (GEMM inputs rounded to bf16)" in out and re.search(r"^\d+ passed, 0 failed$", out, re.M), out


def test_test_qwen3_reads_bf16_model_files(binaries, ref: Path, tmp_path: Path) -> None:
    # the bf16 model file is the fp32 one rounded: widened on load, the bf16 table holds
    shutil.copy(ref / "qwen3_d2_debug_state.bin", tmp_path / "qwen3_d2_bf16_debug_state.bin")
    shutil.copy(ref / "qwen3_d2_bf16.bin", tmp_path / "qwen3_d2_bf16.bin")
    out = test_qwen3(tmp_path, "qwen3_d2_bf16", "-p", "bf16").stdout
    assert re.search(r"^\d+ passed, 0 failed$", out, re.M), out


@pytest.mark.parametrize("what", ["logits", "dqnormw", "dknormw", "dqkvw k rows", "dattprojw", "step loss"])
def test_test_qwen3_fails_on_a_corrupted_state(binaries, ref: Path, tmp_path: Path, what: str) -> None:
    # MQA: layer 0's 4 query heads of 16 rows, then its 1 key head (the GQA sum)
    assert_corrupted_state_fails("qwen3", ref, tmp_path, "qwen3_mqa", what, param_offsets(ref / "qwen3_mqa.bin"),
                                 k_rows=(4 * 16 * 96, 16 * 96))


# a Llama 3 debug state's magic; the MQA model's state does not fit d2
test_test_qwen3_refuses_a_bad_state_with_one_line = bad_state_test("qwen3", 20240803, "qwen3_mqa")


# ---------------------------------------------------------------------------- train_qwen3


@pytest.mark.parametrize("depth", ["d1", "d2"])
def test_init_from_scratch_equals_train_qwen3_py_bit_for_bit(binaries, ref: Path, tmp_path: Path, depth: str) -> None:
    proc = train(ref, tmp_path, "-e", depth, "-x", 0, "-o", "out", "-n", 1)
    assert f"Qwen3 L={depth[1:]} " in proc.stdout and " HS=128 " in proc.stdout, proc.stdout
    assert (tmp_path / "out" / "model_00000000.bin").read_bytes() == (ref / f"qwen3_{depth}.bin").read_bytes()


def test_training_lowers_the_loss_and_prints_decoded_samples(binaries, ref: Path, tmp_path: Path) -> None:
    proc = train(ref, tmp_path, "-e", "qwen3_mqa.bin", "-b", 8, "-t", 64, "-x", 30, "-l", 3e-3, "-v", 15, "-m", 4,
                 "-s", 30, "-g", 24, "-o", "out", env={"OMP_NUM_THREADS": "2"})
    assert_training_lowered_the_loss(proc, tmp_path / "out" / "main.log", 30)


@pytest.fixture(autouse=True)
def _mqa_in_cwd(request, ref: Path, tmp_path: Path) -> None:
    """The tests that train a reference model by name find it in their working directory."""
    shutil.copy(ref / "qwen3_mqa.bin", tmp_path)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_one_and_two_threads_train_bit_identically(binaries, ref: Path, tmp_path: Path, optimizer: str) -> None:
    """The layers, the optimizers and the norms sum in an order that does not depend on the thread count; the fp32
    GEMMs on llmc/cpu/matmul.h's built-in kernel too (LLMC_FP32_GEMM=builtin: OpenBLAS's sgemm splits its sums by
    thread count, for every family alike)."""
    flags = ["-e", "qwen3_mqa.bin", "-b", 4, "-t", 64, "-x", 4, "-v", 2, "-m", 2, "-c", 0.1, "-n", 4,
             *(MUON if optimizer == "muon" else [])]
    runs = {}
    for threads in ("1", "2"):
        train(ref, tmp_path, *flags, "-o", f"t{threads}", env={"OMP_NUM_THREADS": threads, "LLMC_FP32_GEMM": "builtin"})
        runs[threads] = (train_losses(tmp_path / f"t{threads}" / "main.log"),
                         (tmp_path / f"t{threads}" / "model_00000004.bin").read_bytes())
    assert len(runs["1"][0]) == 4 and runs["1"] == runs["2"], (runs["1"][0], runs["2"][0])


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resume_continues_bit_identically(binaries, ref: Path, tmp_path: Path, optimizer: str) -> None:
    flags = ["-e", "qwen3_mqa.bin", "-b", 2, "-t", 32, "-x", 8, "-v", 4, "-m", 2, "-n", 4, "-c", 0.1, "-u", 2, "-s", 8,
             "-g", 8, *(MUON if optimizer == "muon" else [])]
    assert_resume_is_bit_identical("qwen3", ref, tmp_path, flags, optimizer)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_two_processes_with_zero1_equal_one_process(binaries, ref: Path, tmp_path: Path, optimizer: str) -> None:
    common = ["-e", "qwen3_mqa.bin", "-t", 32, "-x", 4, "-v", 0, "-c", 0.1, *(MUON if optimizer == "muon" else [])]
    assert_two_processes_equal_one("qwen3", ref, tmp_path, common, 4)


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("damage", "message"), [
    ("magic", "not a Qwen3 model file (magic 20250430, expected 20250429)"),
    ("llama3 file", "not a Qwen3 model file (magic 20240803, expected 20250429)"),
    ("version", "unsupported Qwen3 model version 4"),
    ("short", "not a Qwen3 model file (1500 bytes, shorter than the 2048-byte header)"),
    ("truncated", "(truncated?)"),
    ("trailing", "Qwen3 model size mismatch"),
    ("odd head_dim", "head_dim 15 must be even for RoPE"),
    ("kv heads", "NH = 4 is not a multiple of NKV = 3"),
    ("tied flag", "tied embeddings (header[10]) = 2 is outside [0, 1]"),
    ("unused field", "unused header[11] = 1 is outside [0, 0]"),
    ("eps", "norm_eps 0 must be in (0, 1)"),
    ("theta", "rope_theta inf finite and > 1"),
    ("missing", "no such Qwen3 model file"),
])
def test_a_bad_model_file_gets_one_error_line(binaries, ref: Path, tmp_path: Path, damage: str, message: str) -> None:
    data = bytearray((ref / "qwen3_mqa.bin").read_bytes())
    edits = {"magic": ("<i", 0, 20250430), "llama3 file": ("<i", 0, 20240803), "version": ("<i", 4, 4),
             "odd head_dim": ("<i", 32, 15), "kv heads": ("<i", 24, 3), "tied flag": ("<i", 40, 2),
             "unused field": ("<i", 44, 1), "eps": ("<f", 1024, 0.0), "theta": ("<f", 1028, float("inf"))}
    if damage in edits:
        struct.pack_into(edits[damage][0], data, edits[damage][1], edits[damage][2])
    elif damage == "short":
        data = data[:1500]
    elif damage == "truncated":
        data = data[:-10]
    elif damage == "trailing":
        data += b"\0\0\0\0"
    path = tmp_path / "bad.bin"
    if damage != "missing":
        path.write_bytes(bytes(data))
    line = assert_one_error_line(train(ref, tmp_path, "-e", path, "-x", 1, check=False))
    assert str(path) in line and message in line, line


def test_every_mutated_header_field_loads_or_gets_one_error_line(binaries, ref: Path, tmp_path: Path) -> None:
    """Each int32 field 1..12 and float32 field 0..2 of the model header set to hostile values: the loader either
    takes the file or stops with one error line; it never crashes or reads past the file (through ./generate, the
    same loader as train_qwen3)."""
    assert_mutated_headers_load_or_fail_in_one_line("qwen3", (ref / "qwen3_mqa.bin").read_bytes(), tmp_path, ref,
                                                    ints=12, floats=3, generate_flags=["--ids", "1"])


def test_d2_without_its_tokenizer_file_gets_one_error_line(binaries, ref: Path, tmp_path: Path) -> None:
    proc = run([REPO / "train_qwen3", "-e", "d2", "-i", ref / "ts" / "tiny_shakespeare_train.bin", "-j", "", "-x", 1],
               cwd=tmp_path, env=ONE_THREAD, check=False)
    line = assert_one_error_line(proc)
    assert "qwen3_tokenizer.bin: no such file (-e d2 takes the vocab size from the Qwen3 tokenizer file" in line, line


def test_a_gpt2_shard_gets_one_error_line(binaries, ref: Path, tmp_path: Path) -> None:
    tokens = np.arange(300, dtype="<u2") % 500
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens))
    (tmp_path / "gpt2.bin").write_bytes(header.tobytes() + tokens.tobytes())
    line = assert_one_error_line(train(ref, tmp_path, "-e", "qwen3_mqa.bin", "-i", tmp_path / "gpt2.bin", "-j", "",
                                       "-x", 1, check=False))
    assert "a gpt-2 token shard (magic 20240520, uint16 tokens), but this model reads llama-3 shards" in line, line


def test_a_sequence_longer_than_the_block_size_gets_one_error_line(binaries, ref: Path, tmp_path: Path) -> None:
    line = assert_one_error_line(train(ref, tmp_path, "-e", "qwen3_mqa.bin", "-t", 256, "-x", 1, check=False))
    assert "block size" in line and "128" in line, line


# ---------------------------------------------------------------------------- generate


@pytest.mark.parametrize("model", ["qwen3_d2", "qwen3_mha", "qwen3_mqa"])
def test_generate_runs_a_qwen3_model_and_its_cache_matches_a_full_recompute(binaries, ref: Path, tmp_path: Path,
                                                                           model: str) -> None:
    shutil.copy(ref / "qwen3_tokenizer.bin", tmp_path)
    proc = run([REPO / "generate", "-e", ref / f"{model}.bin", "-n", 24, "--ids", "5 6 7", "--check-kv", "--no-stop"],
               cwd=tmp_path, env={"OMP_NUM_THREADS": "2"})
    m = re.search(r"check-kv: 24 steps, max \|cached - full\| logit difference (\S+)", proc.stdout + proc.stderr)
    assert m and float(m.group(1)) < 1e-5, proc.stdout + proc.stderr


def test_generate_takes_a_text_prompt_for_qwen3_without_bos(binaries, ref: Path, tmp_path: Path) -> None:
    """A text prompt is encoded with Qwen's pre-tokenizer (tests/test_qwen3_encode.py checks the ids against the
    tokenizers library) and does not start with BOS: it generates what its ids generate."""
    shutil.copy(ref / "qwen3_tokenizer.bin", tmp_path)
    flags = ["-e", ref / "qwen3_d2.bin", "-n", 8, "--seed", 3, "--no-stop", "--print-ids"]
    by_text = run([REPO / "generate", *flags, "-p", "ROMEO: 42"], cwd=tmp_path, env=ONE_THREAD)
    ids = re.search(r"^prompt ids: (.*)$", by_text.stderr, re.M).group(1)
    assert len(ids.split()) >= 4, ids  # "4" and "2" apart
    by_ids = run([REPO / "generate", *flags, "--ids", ids], cwd=tmp_path, env=ONE_THREAD)
    assert by_text.stdout == by_ids.stdout and by_text.stdout.startswith("ROMEO: 42"), (by_text.stdout, by_ids.stdout)


# ---------------------------------------------------------------------------- dev/eval/export_hf.py


def token_bytes(tokenizer_file: Path) -> list[bytes]:
    """Each id's bytes in a tokenizer file: a 1024-byte header, then per id a length byte and that many bytes."""
    data, out, pos = tokenizer_file.read_bytes(), [], 1024
    while pos < len(data):
        out.append(data[pos + 1:pos + 1 + data[pos]])
        pos += 1 + data[pos]
    return out


@pytest.mark.parametrize("model", ["qwen3_d2", "qwen3_mha", "qwen3_mqa"])  # width 2C untied, tied head_dim 48, MQA
def test_the_hf_export_gives_the_logits_test_qwen3_checks_and_the_c_models_greedy_text(binaries, ref: Path,
                                                                                        tmp_path: Path, model: str) -> None:
    import torch
    from transformers import Qwen3ForCausalLM

    run([PYTHON, REPO / "dev" / "eval" / "export_hf.py", "-i", ref / f"{model}.bin", "-o", tmp_path / "hf",
         "--no-tokenizer"])
    hf = Qwen3ForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    # the debug state's logits: train_qwen3.py's, which test_qwen3 holds the C forward to
    state = ref / f"{model}_debug_state.bin"
    B, T = (int(v) for v in np.fromfile(state, dtype="<i4", count=4)[2:4])
    V = hf.config.vocab_size
    x = np.fromfile(state, dtype="<i4", count=B * T, offset=1024).reshape(B, T)
    want = np.fromfile(state, dtype="<f4", count=B * T * V, offset=1024 + 8 * B * T).reshape(B, T, V)
    with torch.no_grad():
        got = hf(torch.from_numpy(x).long()).logits.numpy()
    assert np.abs(got - want).max() < 1e-5
    # ./generate (llmc/cpu/decoder_inference.h, greedy) and the exported model pick the same tokens
    shutil.copy(ref / "qwen3_tokenizer.bin", tmp_path)
    proc = run([REPO / "generate", "-e", ref / f"{model}.bin", "-n", 12, "--ids", "5 6 7", "--temperature", 0,
                "--no-stop"], cwd=tmp_path, env=ONE_THREAD, input=b"")
    ids = [5, 6, 7]
    with torch.no_grad():
        for _ in range(12):
            ids.append(int(hf(torch.tensor([ids])).logits[0, -1].argmax()))
    pieces = token_bytes(tmp_path / "qwen3_tokenizer.bin")
    assert proc.stdout == b"".join(pieces[i] for i in ids) + b"\n"
