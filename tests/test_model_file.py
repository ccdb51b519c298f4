"""model_file.py: both families' model files read back as written, and every damaged file refused with one line
naming the file (the texts the scripts' and pyllmc's tests expect)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from pyllmc import model_file
from pyllmc.families import gpt2 as gpt2_desc, llama3 as llama3_desc, nanochat as nanochat_desc
import train_gpt2
import train_llama3
from conftest import edited_copy, set_int
from pyllmc.families.gpt2 import GPT2
from pyllmc.families.llama3 import LLAMA3
from pyllmc.families.nanochat import NANOCHAT

TINY_GPT2 = train_gpt2.GPTConfig(block_size=8, vocab_size=5, n_layer=2, n_head=2, n_embd=8)
TINY_LLAMA = llama3_desc.LlamaConfig(block_size=8, vocab_size=5, n_layer=2, n_head=2, n_kv_head=1, n_embd=8, multiple_of=4)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A tiny GPT-2 and a tiny Llama 3, each in fp32 and bf16, written by the reference scripts."""
    d = tmp_path_factory.mktemp("model_file")
    gpt = train_gpt2.GPT(TINY_GPT2)
    gpt.init_weights(42)
    llama = train_llama3.Llama(TINY_LLAMA)
    llama.init_weights(42)
    out = {}
    for dtype, suffix in (("float32", ""), ("bfloat16", "_bf16")):
        out[f"gpt2{suffix}"], out[f"llama{suffix}"] = d / f"gpt2{suffix}.bin", d / f"llama{suffix}.bin"
        train_gpt2.write_model(gpt, out[f"gpt2{suffix}"], dtype)
        train_llama3.write_model(llama, out[f"llama{suffix}"], dtype)
    return out


def test_gpt2_checkpoint_reads_back_the_written_tensors(files):
    h, t = gpt2_desc.read_gpt2(files["gpt2"])
    assert h == gpt2_desc.Gpt2Header(version=3, maxT=8, V=5, L=2, NH=2, C=8, Vp=128)
    assert list(t) == list(gpt2_desc.gpt2_tensor_shapes(h))
    model = train_gpt2.read_model(files["gpt2"])
    for name, want in zip(t, train_gpt2.llmc_tensors(model, lambda p: p.detach())):
        assert np.array_equal(t[name], want.numpy()), name
    assert not t["wte"][5:].any()
    h16, t16 = gpt2_desc.read_gpt2(files["gpt2_bf16"])
    assert h16.version == 5
    for name in t:
        assert np.array_equal(t16[name], torch.from_numpy(t[name]).bfloat16().float().numpy()), name


def test_llama3_model_file_reads_back_the_written_tensors(files):
    c, t = llama3_desc.read_llama3(files["llama"])
    assert c == TINY_LLAMA
    model = train_llama3.Llama(TINY_LLAMA)
    model.init_weights(42)
    assert list(t) == list(llama3_desc.llama3_tensor_shapes(c))
    for name, want in zip(t, train_llama3.stacked(model, lambda p: p.detach())):
        assert np.array_equal(t[name], want.numpy()), name
    assert llama3_desc.read_llama3_header(files["llama_bf16"]) == (TINY_LLAMA, 5)


# damage that both readers refuse: (what is damaged, the damage, the GPT-2 checkpoint's line, the Llama 3 model file's)
BOTH_FAMILIES = [
    ("truncated", lambda d: d[:-4], "model checkpoint size mismatch: the header (L=2 C=8 Vp=128 maxT=8, fp32) needs",
     "truncated: the header's config needs"),
    ("shorter than the header", lambda d: d[:100], "not a model checkpoint (file is 100 bytes, too short for the",
     "truncated: 100 bytes, shorter than the 2048-byte Llama 3 header"),
    ("wrong version", lambda d: set_int(d, 1, 4), "unsupported model checkpoint version 4 (expected 3 = fp32 or 5 = bf16)",
     "wrong version 4, expected 3 (float32) or 5 (bfloat16)"),
]
# (file, what is damaged, the damage, what the one line says)
DAMAGE = [(family, what, edit, line) for what, edit, *lines in BOTH_FAMILIES for family, line in zip(("gpt2", "llama"), lines)] + [
    ("gpt2", "trailing data", lambda d: d + b"\0\0", "needs 12416 bytes, the file size is 12418"),
    ("gpt2", "wrong magic", lambda d: set_int(d, 0, 20240803), "not a model checkpoint file (magic 20240803, expected 20240326)"),
    ("gpt2", "L out of range", lambda d: set_int(d, 4, 5000), "layers L (header[4]) = 5000 is outside [1, 4096]"),
    ("gpt2", "Vp below V", lambda d: set_int(d, 7, 4), "padded vocab Vp = 4 is smaller than V = 5"),
    ("gpt2", "C not a multiple of NH", lambda d: set_int(d, 5, 3), "channels C = 8 is not a multiple of heads NH = 3"),
    ("llama", "trailing data", lambda d: d + b"\0\0\0\0", "trailing data: the header's config needs"),
    ("llama", "shorter than the header, longer than GPT-2's", lambda d: d[:1500],
     "truncated: 1500 bytes, shorter than the 2048-byte Llama 3 header"),
    ("llama", "wrong magic", lambda d: set_int(d, 0, 20240326), "wrong magic 20240326, expected 20240803 (a Llama 3 model file)"),
    ("llama", "zero layers", lambda d: set_int(d, 4, 0), "must be positive"),
    ("llama", "FFN size off the rule", lambda d: set_int(d, 17, 17), "FFN hidden size 17 is not Llama's rule"),
]
READERS = {"gpt2": gpt2_desc.read_gpt2, "llama": llama3_desc.read_llama3}


@pytest.mark.parametrize("family, what, edit, message", DAMAGE, ids=[f"{c[0]}: {c[1]}" for c in DAMAGE])
def test_a_damaged_model_file_is_refused_with_one_line(files, tmp_path, family, what, edit, message):
    bad = edited_copy(files[family], tmp_path / "bad.bin", edit)
    with pytest.raises(model_file.ModelFileError) as e:
        READERS[family](bad)
    assert str(e.value).startswith(f"{bad}: ") and message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_missing_file_is_one_line_and_the_error_is_a_value_error(tmp_path):
    for read in (gpt2_desc.read_gpt2, llama3_desc.read_llama3, nanochat_desc.read_nanochat, model_file.read_magic):
        with pytest.raises(ValueError, match=f"^{tmp_path / 'nope.bin'}: cannot read: No such file or directory$"):
            read(tmp_path / "nope.bin")


def test_the_tensor_shapes_follow_each_familys_tensor_table():
    """model_file's shapes name the tensors of the families' descriptions (gpt2_family.py, llama3_family.py,
    nanochat_family.py), in their order; a Llama with tied embeddings leaves lm_head out of its file."""
    gpt2 = gpt2_desc.Gpt2Header(3, maxT=8, V=5, L=2, NH=2, C=8, Vp=128)
    assert tuple(gpt2_desc.gpt2_tensor_shapes(gpt2)) == GPT2.tensor_names
    assert tuple(llama3_desc.llama3_tensor_shapes(TINY_LLAMA)) == LLAMA3.tensor_names
    tied = dataclasses.replace(TINY_LLAMA, tied_embeddings=True)
    assert tuple(llama3_desc.llama3_tensor_shapes(tied)) == LLAMA3.tensor_names[:-1]
    assert LLAMA3.tensor_names[-1] == "lm_head"
    assert tuple(nanochat_desc.nanochat_tensor_shapes(nanochat_desc.depth_config(2))) == NANOCHAT.tensor_names
