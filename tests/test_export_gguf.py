"""dev/eval/export_gguf.py: GPT-2 and Llama 3 model files to GGUF (their modules' gguf_model, through the registry). The file is read back with gguf's reader
(metadata, tensor names and types), its logits are recomputed in numpy from the GGUF alone, and transformers'
own GGUF loader (an independent reader of llama.cpp's conventions, q/k permutation included) gives our logits."""

from __future__ import annotations

import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from conftest import PYTHON, REPO, assert_one_error_line, run

sys.path.insert(0, str(REPO / "dev" / "eval"))
import export_gguf  # noqa: E402
import pyllmc.families.llama3 as llama3_family  # noqa: E402
import train_gpt2  # noqa: E402
import train_llama3  # noqa: E402

SCRIPT = REPO / "dev" / "eval" / "export_gguf.py"
PROMPT = "To be, or not to be: that is the question."


@pytest.fixture(scope="module")
def gpt2_bin(tmp_path_factory) -> Path:
    """A GPT-2 checkpoint (V=50257, maxT=1024, L=2, NH=4, C=32) with wide random weights."""
    torch.manual_seed(0)
    model = train_gpt2.GPT(train_gpt2.GPTConfig(block_size=1024, vocab_size=50257, n_layer=2, n_head=4, n_embd=32))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.uniform_(0.5, 1.5) if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")) else p.normal_(0.0, 0.1)
    path = tmp_path_factory.mktemp("gguf_gpt2") / "gpt2_tiny.bin"
    train_gpt2.write_model(model, path, "float32")
    return path


def llama_bin(directory: Path, name: str, tied: bool, scaled: bool, n_kv_head: int) -> Path:
    """A Llama 3 model file in the test tokenizer's vocab (514): C=64, 8 heads, 2 layers, wide random weights."""
    torch.manual_seed(1)
    cfg = train_llama3.LlamaConfig(block_size=128, vocab_size=514, n_layer=2, n_head=8, n_kv_head=n_kv_head, n_embd=64,
                                   multiple_of=32, use_scaled_rope=scaled, rope_factor=8.0 if scaled else 0.0,
                                   low_freq_factor=1.0 if scaled else 0.0, high_freq_factor=4.0 if scaled else 0.0,
                                   original_max_position=200.0 if scaled else 0.0, tied_embeddings=tied)
    model = train_llama3.Llama(cfg)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.normal_(0.0, 0.1) if p.dim() > 1 else p.uniform_(0.5, 1.5)
    path = directory / f"{name}.bin"
    train_llama3.write_model(model, path, "float32")
    return path


@pytest.fixture(scope="module")
def llama_bins(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gguf_llama")
    return {"gqa-scaled-untied": llama_bin(d, "llama_scaled", tied=False, scaled=True, n_kv_head=2),
            "mqa-tied": llama_bin(d, "llama_tied", tied=True, scaled=False, n_kv_head=1)}


class Meta(dict):
    """GGUF metadata, decoded on first use (a 50k-token array takes seconds to decode whole)."""

    def __init__(self, fields: dict[str, gguf.ReaderField]):
        super().__init__()
        self.fields = fields

    def __missing__(self, key: str):
        value = self[key] = self.fields[key].contents()
        return value

    def item(self, key: str, index: int):
        return self.fields[key].contents(index)

    def count(self, key: str) -> int:
        return len(self.fields[key].data)


def read(path: Path) -> tuple[Meta, dict[str, gguf.ReaderTensor], gguf.GGUFReader]:
    reader = gguf.GGUFReader(str(path))
    return Meta(dict(reader.fields)), {t.name: t for t in reader.tensors}, reader


def test_gpt2_gguf_metadata_names_and_numpy_logits(gpt2_bin, tmp_path):
    out = tmp_path / "gpt2.gguf"
    assert export_gguf.export(gpt2_bin, out, "f32", "") == "gpt2"
    meta, tensors, reader = read(out)
    assert meta["general.architecture"] == "gpt2" and meta["general.file_type"] == 0
    assert (meta["gpt2.context_length"], meta["gpt2.embedding_length"], meta["gpt2.feed_forward_length"],
            meta["gpt2.block_count"], meta["gpt2.attention.head_count"]) == (1024, 32, 128, 2, 4)
    assert meta["gpt2.attention.layer_norm_epsilon"] == pytest.approx(1e-5)
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "gpt-2"
    assert meta.count("tokenizer.ggml.tokens") == 50257 and meta.count("tokenizer.ggml.merges") == 50000
    assert meta.item("tokenizer.ggml.tokens", 50256) == "<|endoftext|>" and meta.item("tokenizer.ggml.token_type", 50256) == 3
    assert meta.item("tokenizer.ggml.tokens", 11) == "," and meta.item("tokenizer.ggml.tokens", 220) == "Ġ"
    assert meta.item("tokenizer.ggml.merges", 0) == "Ġ t" and meta["tokenizer.ggml.bos_token_id"] == 50256
    per_layer = ["attn_norm", "attn_qkv", "attn_output", "ffn_norm", "ffn_up", "ffn_down"]
    expected = {"token_embd.weight", "position_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight"}
    expected |= {f"blk.{l}.{n}.{wb}" for l in range(2) for n in per_layer for wb in ("weight", "bias")}
    assert set(tensors) == expected
    assert list(tensors["blk.0.attn_qkv.weight"].shape) == [32, 96], "ggml order: (in, out)"
    assert list(tensors["token_embd.weight"].shape) == [32, 50257], "no vocab padding rows"
    assert export_gguf.verify(gpt2_bin, out, "f32", PROMPT, "", reader) < 1e-4


def test_gpt2_gguf_in_f16_keeps_1d_tensors_in_f32(gpt2_bin, tmp_path):
    out = tmp_path / "gpt2_f16.gguf"
    export_gguf.export(gpt2_bin, out, "f16", "")
    meta, tensors, reader = read(out)
    assert meta["general.file_type"] == 1
    assert tensors["blk.1.ffn_up.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["blk.1.ffn_up.bias"].tensor_type == gguf.GGMLQuantizationType.F32
    export_gguf.verify(gpt2_bin, out, "f16", PROMPT, "", reader)


@pytest.mark.parametrize("variant", ["gqa-scaled-untied", "mqa-tied"])
def test_llama_gguf_metadata_permuted_qk_and_numpy_logits(llama_bins, llama3_tokenizer, tmp_path, variant):
    src, out = llama_bins[variant], tmp_path / "llama.gguf"
    model = train_llama3.read_model(src)
    c = model.config
    assert export_gguf.export(src, out, "f32", str(llama3_tokenizer)) == "llama"
    meta, tensors, reader = read(out)
    assert meta["general.architecture"] == "llama"
    assert (meta["llama.context_length"], meta["llama.embedding_length"], meta["llama.feed_forward_length"],
            meta["llama.block_count"], meta["llama.attention.head_count"], meta["llama.attention.head_count_kv"],
            meta["llama.rope.dimension_count"], meta["llama.vocab_size"]) == (128, 64, c.ffn_hidden, 2, 8, c.n_kv_head, 8, 514)
    assert meta["llama.rope.freq_base"] == 500000.0 and meta["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert meta["tokenizer.ggml.bos_token_id"] == 512 and meta["tokenizer.ggml.eos_token_id"] == 513
    assert meta["tokenizer.ggml.tokens"][512] == "<|begin_of_text|>" and meta["tokenizer.ggml.token_type"][513] == 3
    assert ("output.weight" in tensors) == (not c.tied_embeddings)
    assert ("rope_freqs.weight" in tensors) == c.use_scaled_rope
    HS = c.head_size
    q = model.transformer.h[1].attn.c_attn.weight.detach().numpy()[: c.n_head * HS]
    stored = tensors["blk.1.attn_q.weight"].data
    assert np.array_equal(stored[1], q[HS // 2]), "row 1 of a head is the partner of row 0: HS/2 in rotate-half order"
    assert np.array_equal(llama3_family.unpermute_rotary(stored, c.n_head), q)
    assert export_gguf.verify(src, out, "f32", PROMPT, str(llama3_tokenizer)) < 1e-4


def test_scaled_rope_factors_match_the_reference_frequencies(llama_bins):
    c = train_llama3.read_model(llama_bins["gqa-scaled-untied"]).config
    base = c.rope_theta ** (-np.arange(0, c.head_size, 2) / c.head_size)
    factors = llama3_family.gguf_rope_factors(c)
    assert factors.min() == 1.0 and factors.max() == 8.0 and ((factors > 1) & (factors < 8)).any(), factors
    assert np.allclose(base / factors, train_llama3.rope_inv_freq(c).double().numpy(), rtol=1e-6)


def test_llama_gguf_in_bf16(llama_bins, llama3_tokenizer, tmp_path):
    src, out = llama_bins["mqa-tied"], tmp_path / "llama_bf16.gguf"
    export_gguf.export(src, out, "bf16", str(llama3_tokenizer))
    meta, tensors, reader = read(out)
    assert meta["general.file_type"] == 32
    assert tensors["blk.0.ffn_gate.weight"].tensor_type == gguf.GGMLQuantizationType.BF16
    assert tensors["blk.0.ffn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    export_gguf.verify(src, out, "bf16", PROMPT, str(llama3_tokenizer))


def test_numpy_check_catches_unpermuted_qk_rows(llama_bins, llama3_tokenizer, tmp_path, monkeypatch):
    monkeypatch.setattr(llama3_family, "permute_rotary", lambda w, n_head: w)
    src, out = llama_bins["gqa-scaled-untied"], tmp_path / "wrong.gguf"
    export_gguf.export(src, out, "f32", str(llama3_tokenizer))
    with pytest.raises(export_gguf.ExportError, match="GGUF logits differ"):
        export_gguf.verify(src, out, "f32", PROMPT, str(llama3_tokenizer))


def test_transformers_gguf_loader_reads_our_llama_as_our_model(llama_bins, llama3_tokenizer, tmp_path):
    """transformers de-permutes q/k and maps llama.cpp's names itself: the same logits and the same tokens.
    (Llama only: its GPT-2 path spends half a minute converting the 50k-token vocabulary.)"""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    src = llama_bins["mqa-tied"]  # transformers ignores rope_freqs: unscaled RoPE here
    export_gguf.export(src, tmp_path / "m.gguf", "f32", str(llama3_tokenizer))
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf", dtype=torch.float32).eval()
    hf_tok = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    tokens = export_gguf.prompt_tokens(src, PROMPT, str(llama3_tokenizer))
    assert hf_tok(PROMPT)["input_ids"] == tokens, "the BOS is added, the ids are the tokenizer's"
    with torch.no_grad():
        theirs = hf(torch.tensor([tokens])).logits[0].double().numpy()
    ours = export_gguf.reference_logits(src, tokens)
    assert np.abs(theirs - ours).max() < 1e-4 and np.abs(ours).max() > 0.5


def test_command_line_writes_and_verifies(llama_bins, llama3_tokenizer, tmp_path):
    proc = run([PYTHON, SCRIPT, "-i", llama_bins["gqa-scaled-untied"], "-o", tmp_path / "x.gguf", "--tokenizer",
                llama3_tokenizer, "--verify", PROMPT])
    assert "max |logit difference|" in proc.stdout and (tmp_path / "x.gguf").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]


@pytest.mark.parametrize("content, message", [
    (np.array([20240327, 2], dtype="<i4").tobytes(), "wrong magic 20240327"),
    # a family without a GGUF export (nanochat's magic): the families that have one are named
    (np.array([20251013, 3], dtype="<i4").tobytes(),
     "wrong magic 20251013, expected 20240326 (GPT-2 model) or 20240803 (Llama 3 model)"),
    (np.array([20240803, 3], dtype="<i4").tobytes(), "shorter than the 2048-byte"),
    (b"\x01", "shorter than a header"),
])
def test_bad_model_files_give_one_error_line(tmp_path, content, message):
    (tmp_path / "bad.bin").write_bytes(content)
    proc = run([PYTHON, SCRIPT, "-i", tmp_path / "bad.bin", "-o", tmp_path / "bad.gguf"], check=False)
    assert message in assert_one_error_line(proc, alone=True)
    assert not (tmp_path / "bad.gguf").exists()
