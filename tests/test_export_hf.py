"""dev/eval/export_hf.py writes a Hugging Face GPT-2 directory with the same model as our checkpoint."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import make

REPO = Path(__file__).resolve().parent.parent
if "TIKTOKEN_CACHE_DIR" not in os.environ and (REPO.parent / "shared" / "tiktoken_cache").is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(REPO.parent / "shared" / "tiktoken_cache")
EXPORT = REPO / "dev" / "eval" / "export_hf.py"

# a small model with GPT-2's vocabulary (so the tokenizer files are written too)
L, C, NH, MAXT, V, VP = 2, 48, 4, 64, 50257, 50304


def random_checkpoint(path: Path, version: int, seed: int = 0) -> list[np.ndarray]:
    """Writes a checkpoint in the llmc format straight from numpy; returns the fp32 tensors it holds."""
    rng = np.random.default_rng(seed)
    shapes = [(VP, C), (MAXT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
              (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    ts = [rng.normal(0.0, 0.2, s).astype(np.float32) for s in shapes]
    for i in (2, 8, 14):   # layernorm weights around 1
        ts[i] += 1.0
    ts[0][V:] = 0.0
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, version, MAXT, V, L, NH, C, VP]
    if version == 5:
        bits = [(t.view(np.uint32) >> 16).astype("<u2") for t in ts]   # truncation: any bf16 is fine for the test
        ts = [(b.astype(np.uint32) << 16).view(np.float32) for b in bits]
        path.write_bytes(header.tobytes() + b"".join(b.tobytes() for b in bits))
    else:
        path.write_bytes(header.tobytes() + b"".join(t.tobytes() for t in ts))
    return ts


def reference_logits(ts: list[np.ndarray], idx: np.ndarray) -> np.ndarray:
    """An independent GPT-2 forward of the checkpoint tensors in float64. idx (B, T) -> (B, T, V)."""
    wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb = \
        [torch.from_numpy(t).double() for t in ts]
    B, T = idx.shape
    hs = C // NH

    def ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * w + b

    x = wte[torch.from_numpy(idx)] + wpe[:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        h = ln(x, ln1w[l], ln1b[l])
        q, k, v = (h @ qkvw[l].T + qkvb[l]).split(C, dim=-1)
        q, k, v = (z.view(B, T, NH, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / hs ** 0.5
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ attprojw[l].T + attprojb[l]
        h = ln(x, ln2w[l], ln2b[l]) @ fcw[l].T + fcb[l]
        h = 0.5 * h * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (h + 0.044715 * h ** 3)))
        x = x + h @ fcprojw[l].T + fcprojb[l]
    return (ln(x, lnfw, lnfb) @ wte[:V].T).numpy()


def export(ckpt: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXPORT), "-i", str(ckpt), "-o", str(out), *extra],
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[np.ndarray]]:
    d = tmp_path_factory.mktemp("export")
    ckpt = d / "ck.bin"
    ts = random_checkpoint(ckpt, 3)
    r = export(ckpt, d / "hf")
    assert r.returncode == 0, r.stderr
    return ckpt, d / "hf", ts


def test_transformers_loads_export_with_same_logits(exported: tuple[Path, Path, list[np.ndarray]]) -> None:
    from transformers import GPT2LMHeadModel

    _, hf_dir, ts = exported
    model = GPT2LMHeadModel.from_pretrained(str(hf_dir)).eval()
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "lm_head must be tied"
    idx = np.random.default_rng(1).integers(0, V, size=(2, 40))
    with torch.no_grad():
        got = model(torch.from_numpy(idx)).logits.double().numpy()
    want = reference_logits(ts, idx)
    assert got.shape == (2, 40, V)
    assert np.abs(got - want).max() < 1e-4


def test_export_greedy_text_matches_the_c_forward(exported: tuple[Path, Path, list[np.ndarray]], tmp_path: Path) -> None:
    # the C model (./generate, llmc/cpu/gpt2_inference.h) and the exported HF model pick the same 20 greedy tokens
    import tiktoken
    from transformers import GPT2LMHeadModel

    ckpt, hf_dir, _ = exported
    make("generate")
    bpe = tmp_path / "gpt2_bpe.bin"
    subprocess.run([sys.executable, str(REPO / "dev" / "write_bpe.py"), "-o", str(bpe)], check=True, capture_output=True)
    prompt = "First Citizen: we are accounted poor"
    r = subprocess.run([str(REPO / "generate"), "-e", str(ckpt), "-b", str(bpe), "-p", prompt, "-n", "20",
                        "--temperature", "0", "--no-stop"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    enc = tiktoken.get_encoding("gpt2")
    model = GPT2LMHeadModel.from_pretrained(str(hf_dir)).eval()
    ids = enc.encode_ordinary(prompt)
    with torch.no_grad():
        for _ in range(20):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    assert r.stdout == enc.decode_bytes(ids) + b"\n"


def test_bf16_checkpoint_exports_exactly(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    ts = random_checkpoint(tmp_path / "ck5.bin", 5, seed=3)
    r = export(tmp_path / "ck5.bin", tmp_path / "hf5", "--no-tokenizer")
    assert r.returncode == 0, r.stderr
    sd = load_file(str(tmp_path / "hf5" / "model.safetensors"))
    assert np.array_equal(sd["transformer.wte.weight"], ts[0][:V])
    assert np.array_equal(sd["transformer.h.1.attn.c_attn.weight"], ts[4][1].T)   # Conv1D: (in, out)
    assert np.array_equal(sd["transformer.h.0.mlp.c_proj.weight"], ts[12][0].T)
    assert "lm_head.weight" not in sd
    assert not (tmp_path / "hf5" / "vocab.json").exists()


def test_tokenizer_files_match_tiktoken(exported: tuple[Path, Path, list[np.ndarray]]) -> None:
    import tiktoken
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(exported[1]))
    enc = tiktoken.get_encoding("gpt2")
    text = "Hello world! naïve café 😀 中文 it's they'll  \n\n\tx 1234 <|endoftext|> tail"
    assert tok(text)["input_ids"] == enc.encode(text, allowed_special="all")
    assert tok.eos_token_id == 50256 and len(tok) == V


def test_round_trip_through_train_gpt2_is_byte_identical(exported: tuple[Path, Path, list[np.ndarray]], tmp_path: Path) -> None:
    ckpt, hf_dir, _ = exported
    shard = tmp_path / "tokens.bin"
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, 200]
    shard.write_bytes(header.tobytes() + np.arange(200, dtype="<u2").tobytes())
    r = subprocess.run([sys.executable, str(REPO / "train_gpt2.py"), "--model", str(hf_dir), "--input_bin", str(shard),
                        "--batch_size", "1", "--sequence_length", "16", "--write_tensors", "1", "--num_iterations", "0",
                        "--device", "cpu", "--debug_steps", "1"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    back = tmp_path / f"gpt2_{hf_dir.name}.bin"
    assert back.read_bytes() == ckpt.read_bytes()


def test_bad_checkpoints_fail_with_one_line(tmp_path: Path) -> None:
    good = tmp_path / "good.bin"
    random_checkpoint(good, 3)
    data = good.read_bytes()
    cases = {
        "magic.bin": (b"\x00\x00\x00\x00" + data[4:], "magic"),
        "version.bin": (data[:4] + (4).to_bytes(4, "little") + data[8:], "version 4"),
        "short.bin": (data[:500], "too short"),
        "truncated.bin": (data[:-4], "file size"),
    }
    for name, (payload, needle) in cases.items():
        (tmp_path / name).write_bytes(payload)
        r = export(tmp_path / name, tmp_path / "out")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1, (name, r.stderr)
        assert lines[0].startswith("error: ") and name in lines[0] and needle in lines[0], lines[0]
    r = export(tmp_path / "missing.bin", tmp_path / "out")
    assert r.returncode == 1 and "not found" in r.stderr
    assert not (tmp_path / "out").exists()
