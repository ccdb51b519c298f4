"""The PyTorch reference: the files it writes, its Hugging Face import, DDP, and its errors."""

from __future__ import annotations

import math
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import DEBUG_STATE_NNOISE, DEBUG_STATE_NSTEPS, PYTHON, REPO, assert_one_error_line, run

import train_gpt2
from pyllmc.reference.training import get_lr


def read_header(path: Path, dtype: str = "<i4") -> np.ndarray:
    return np.fromfile(path, dtype=dtype, count=256)


def checkpoint_tensors(path: Path) -> tuple[np.ndarray, list[np.ndarray]]:
    """Header and the 16 fp32 tensors of a version-3 checkpoint."""
    h = read_header(path)
    maxT, V, L, NH, C, Vp = (int(v) for v in h[2:8])
    shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
              (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    flat = np.fromfile(path, dtype="<f4", offset=1024)
    out, pos = [], 0
    for s in shapes:
        n = math.prod(s)
        out.append(flat[pos : pos + n].reshape(s))
        pos += n
    assert pos == flat.size, "checkpoint body size does not match its header"
    return h, out


def test_d12_checkpoint_header_and_parameter_count(d12_reference):
    path = d12_reference / "gpt2_124M.bin"
    h = read_header(path)
    assert list(h[:8]) == [20240326, 3, 1024, 50257, 12, 12, 768, 50304]
    n_params = (path.stat().st_size - 1024) // 4
    assert n_params == 124_475_904
    _, tensors = checkpoint_tensors(path)
    assert np.all(tensors[0][50257:] == 0), "wte pad rows must be zero"
    assert np.all(tensors[2] == 1) and np.all(tensors[3] == 0), "layernorm init is weight 1, bias 0"


def test_bf16_checkpoint_is_the_rounded_fp32_one(d2_reference):
    fp32 = np.fromfile(d2_reference / "gpt2_d2.bin", dtype="<f4", offset=1024)
    bf16_path = d2_reference / "gpt2_d2_bf16.bin"
    h = read_header(bf16_path)
    assert h[0] == 20240326 and h[1] == 5
    bits = np.fromfile(bf16_path, dtype="<u2", offset=1024)
    assert bits.size == fp32.size
    expected = torch.from_numpy(fp32).bfloat16().view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(bits, expected)


def test_debug_state_is_self_consistent(d2_reference):
    path = d2_reference / "gpt2_d2_debug_state.bin"
    h = read_header(path)
    assert h[0] == 20240327 and h[1] == 2
    B, T, nsteps = int(h[2]), int(h[3]), int(h[DEBUG_STATE_NSTEPS])
    assert (B, T, nsteps) == (4, 64, 10)
    settings = h[5:11].astype("<i4").view("<f4")
    assert np.allclose(settings, [1e-4, 0.9, 0.95, 1e-8, 0.1, 1.0])
    V = 50257
    ints = np.fromfile(path, dtype="<i4", count=2 * B * T, offset=1024)
    x, y = ints[: B * T], ints[B * T :]
    floats = np.fromfile(path, dtype="<f4", offset=1024 + 8 * B * T)
    logits = floats[: B * T * V].reshape(B * T, V)
    loss = floats[B * T * V]
    n_params = (d2_reference / "gpt2_d2.bin").stat().st_size // 4 - 256
    assert int(h[DEBUG_STATE_NNOISE]) == nsteps, "the header counts the loss noises: one per step"
    assert floats.size == B * T * V + 1 + n_params + 2 * nsteps, "debug state size does not match its header"
    recomputed = F.cross_entropy(torch.from_numpy(logits.astype(np.float64)), torch.from_numpy(y.astype(np.int64)))
    assert abs(recomputed.item() - float(loss)) < 1e-5
    assert np.array_equal(x[1:], y[:-1]), "targets are the inputs shifted by one"
    losses, noise = floats[-2 * nsteps : -nsteps], floats[-nsteps:]
    assert losses[0] == pytest.approx(float(loss), abs=1e-6)
    assert losses[-1] < losses[0], "ten steps on one batch must lower its loss"
    assert np.all(np.isfinite(noise)) and np.all(noise >= 0) and noise.max() > 0, f"loss noise {noise}"
    assert np.all(noise < 1e-4 * losses), f"float32 noise {noise} is not small beside the losses {losses}"


def test_tokenizer_file_decodes_every_token_like_tiktoken(d2_reference):
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    data = (d2_reference / "gpt2_tokenizer.bin").read_bytes()
    h = np.frombuffer(data[:1024], dtype="<u4")
    assert list(h[:4]) == [20240328, 2, 50257, 50256]
    pos = 1024
    for i in range(50257):
        n = data[pos]
        assert data[pos + 1 : pos + 1 + n] == enc.decode_bytes([i]), f"token {i}"
        pos += 1 + n
    assert pos == len(data)


def test_from_scratch_init_is_deterministic_and_scaled():
    a, _ = train_gpt2.load_model("d2", seed=7, flash=False)
    b, _ = train_gpt2.load_model("d2", seed=7, flash=False)
    c, _ = train_gpt2.load_model("d2", seed=8, flash=False)
    for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), n
    assert not torch.equal(a.transformer.wte.weight, c.transformer.wte.weight)
    proj = a.transformer.h[0].mlp.c_proj.weight
    assert proj.std().item() == pytest.approx(0.02 / math.sqrt(4), rel=0.05)


def test_huggingface_import_matches_transformers_logits(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=300, n_positions=32, n_embd=48, n_layer=2, n_head=4, activation_function="gelu_new")
    hf = GPT2LMHeadModel(cfg).eval()
    hf.save_pretrained(tmp_path / "tiny-gpt2")
    ours, stem = train_gpt2.load_model(str(tmp_path / "tiny-gpt2"), seed=0, flash=False)
    ours.eval()
    idx = torch.randint(0, 300, (2, 17))
    with torch.no_grad():
        expected = hf(idx).logits
        got, _ = ours(idx, idx)
    assert stem == "gpt2_tiny-gpt2"
    assert (got - expected).abs().max().item() < 1e-5


def test_pretrained_weights_offline_fall_back_to_scratch(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(train_gpt2, "huggingface_reachable", lambda timeout=3.0: False)
    model, stem = train_gpt2.load_model("gpt2", seed=42, flash=False)
    assert stem == "gpt2_124M" and model.config.n_layer == 12
    out = capsys.readouterr().out
    assert "cannot be downloaded" in out and "d12 from scratch" in out
    assert len(out.strip().splitlines()) == 1


def test_pretrained_weights_without_transformers_fall_back_to_scratch(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `from transformers import ...` raises ImportError
    load_model, scratch = train_gpt2.load_model, []
    # the fallback's own call (d12 from scratch) is recorded, not run: the offline test above builds a d12
    monkeypatch.setattr(train_gpt2, "load_model", lambda name, seed, flash: (scratch.append((name, seed)), "stem")[1])
    assert load_model("gpt2", seed=42, flash=False) == "stem"
    assert scratch == [("d12", 42)]
    out = capsys.readouterr().out
    assert out == ("warning: pretrained 'gpt2' weights need the transformers package, which is not installed: "
                   "initialising d12 from scratch instead\n")


def test_cosine_schedule_warmup_and_edges():
    assert get_lr(0, 1.0, 0, 10, 0.1) == pytest.approx(1.0)
    assert get_lr(10, 1.0, 0, 10, 0.1) == pytest.approx(0.1)
    assert get_lr(0, 1.0, 4, 10, 0.0) == pytest.approx(0.25)
    assert get_lr(7, 1.0, 4, 10, 0.0) == pytest.approx(0.5)
    assert get_lr(5, 1.0, 5, 5, 0.0) == pytest.approx(0.0)  # total == warmup: no division by zero


def losses_from_log(path: Path) -> list[float]:
    return [float(line.split("trl:")[1].split()[0]) for line in path.read_text().splitlines() if " trl:" in line]


def train_cmd(out: Path, *extra) -> list:
    return [REPO / "train_gpt2.py", "--model", "d2", "--device", "cpu", "--input_bin", REPO / "dev/data/tinyshakespeare/tiny_shakespeare_val.bin",
            "--sequence_length", 32, "--num_iterations", 6, "--write_tensors", 0, "--output_dir", out, *extra]


def test_training_logs_and_progress(tinyshakespeare, tmp_path):
    proc = run([PYTHON, *train_cmd(tmp_path / "run", "--batch_size", 4, "--input_val_bin", tinyshakespeare[1],
                                   "--val_loss_every", 3, "--val_max_steps", 2)])
    lines = (tmp_path / "run" / "main.log").read_text().splitlines()
    assert lines[0].startswith("s:0 tel:")
    assert sum(" trl:" in line for line in lines) == 6
    assert all(f"s:{s} tel:" in "\n".join(lines) for s in (0, 3, 6))
    assert "step    6/6 | loss" in proc.stdout and "tok/s | ETA" in proc.stdout
    assert (tmp_path / "run" / "model_00000006.bin").exists()


@pytest.fixture(scope="module")
def batch4_losses(tinyshakespeare, tmp_path_factory) -> list[float]:
    """The 6 step losses of one process with B=4: what DDP and gradient accumulation must reproduce."""
    out = tmp_path_factory.mktemp("batch4")
    run([PYTHON, *train_cmd(out, "--batch_size", 4)])
    return losses_from_log(out / "main.log")


@pytest.mark.parametrize("zero_stage", [0, 1])
def test_ddp_two_processes_reproduce_one(batch4_losses, tmp_path, zero_stage):
    torchrun = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", 2]
    run([*torchrun, *train_cmd(tmp_path / "ddp", "--batch_size", 2, "--zero_stage", zero_stage)],
        env={"OMP_NUM_THREADS": "1"})
    ddp = losses_from_log(tmp_path / "ddp" / "main.log")
    assert len(batch4_losses) == len(ddp) == 6
    assert np.allclose(batch4_losses, ddp, atol=1e-5, rtol=0), (batch4_losses, ddp)


def test_gradient_accumulation_matches_one_big_batch(batch4_losses, tmp_path):
    run([PYTHON, *train_cmd(tmp_path / "accum", "--batch_size", 2, "--total_batch_size", 4 * 32)])
    accum = losses_from_log(tmp_path / "accum" / "main.log")
    assert len(accum) == 6 and np.allclose(batch4_losses, accum, atol=1e-5, rtol=0), (batch4_losses, accum)


def test_fused_adamw_gives_the_default_adamw_losses(tinyshakespeare, tmp_path):
    """--fused_adamw 1 (torch's one-kernel AdamW on the CPU) takes the same steps as the default AdamW, up to
    float rounding (--weight_decay on, so decoupled decay is compared too)."""
    run([PYTHON, *train_cmd(tmp_path / "plain", "--batch_size", 4, "--weight_decay", 0.1)])
    run([PYTHON, *train_cmd(tmp_path / "fused", "--batch_size", 4, "--weight_decay", 0.1, "--fused_adamw", 1)])
    plain, fused = losses_from_log(tmp_path / "plain" / "main.log"), losses_from_log(tmp_path / "fused" / "main.log")
    assert len(plain) == len(fused) == 6
    assert np.allclose(plain, fused, atol=1e-5, rtol=0), (plain, fused)
    assert fused[-1] < fused[0], fused


@pytest.mark.parametrize(
    "args, message",
    [
        (["--input_bin", "/nonexistent/*.bin"], "no token shards match"),
        (["--sequence_length", "2048"], "exceeds the model's block size 1024"),
        (["--total_batch_size", "1000"], "is not a multiple of"),
        (["--model", "gpt5"], "unknown model"),
        (["--bogus_flag", "1"], "unrecognized arguments"),
    ],
)
def test_bad_input_gives_one_error_line(tinyshakespeare, tmp_path, args, message):
    cmd = [PYTHON, REPO / "train_gpt2.py", "--model", "d2", "--num_iterations", 0, "--write_tensors", 0,
           "--input_bin", tinyshakespeare[1], *args]
    proc = run(cmd, cwd=tmp_path, check=False)
    assert proc.returncode in (1, 2)
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0], proc.stderr


def test_no_tokenizer_encoding_leaves_no_model_file(tinyshakespeare, tmp_path):
    """Offline with an empty tiktoken cache: one error line, and no model file written (make's model step, which
    names gpt2_124M.bin, would otherwise count as done and the tokenizer would never be written)."""
    cache = tmp_path / "empty_cache"
    cache.mkdir()
    env = {"TIKTOKEN_CACHE_DIR": str(cache), "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9", "NO_PROXY": "", "no_proxy": ""}
    proc = run([PYTHON, REPO / "train_gpt2.py", "--model", "d2", "--num_iterations", 0, "--write_tensors", 1,
                "--input_bin", tinyshakespeare[1]], cwd=tmp_path, env=env, check=False)
    assert "cannot load tiktoken's gpt2 encoding" in assert_one_error_line(proc, alone=True)
    assert sorted(p.name for p in tmp_path.glob("*.bin")) == [], sorted(p.name for p in tmp_path.iterdir())


def test_shard_with_out_of_range_token_is_rejected(tmp_path):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, 1000]
    tokens = np.full(1000, 5, dtype="<u2")
    tokens[500] = 60000
    (tmp_path / "bad.bin").write_bytes(header.tobytes() + tokens.tobytes())
    proc = run([PYTHON, REPO / "train_gpt2.py", "--model", "d2", "--num_iterations", 1, "--write_tensors", 0,
                "--input_bin", tmp_path / "bad.bin"], cwd=tmp_path, check=False)
    assert proc.returncode == 1
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "bad.bin" in err[0] and "60000" in err[0], proc.stderr


def test_huggingface_reachable_honours_hf_hub_offline(monkeypatch):
    """The hub check behind every --model NAME: a connection that succeeds counts, unless HF_HUB_OFFLINE is set."""
    class Connection:
        def close(self) -> None:
            pass

    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: Connection())
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert train_gpt2.huggingface_reachable()
    for value in ("1", "true", "ON"):
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert not train_gpt2.huggingface_reachable()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert train_gpt2.huggingface_reachable()
