"""The nanochat PyTorch reference (train_nanochat.py): against transformers' NanoChatForCausalLM (logits, loss, every
gradient, several shapes), the import's refusals, its dN init, the model file and its reader, the Muon / AdamW
split, the tokenizer file from a checkpoint's tokenizer.json, the issue's command line, and dev/eval/export_hf.py's
NanoChat directory."""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import (PYTHON, REPO, TS_VAL, assert_gradients_match, assert_one_error_line, losses_from_log, run,
                      tinyshakespeare_text)

from pyllmc.families import nanochat as nanochat_desc
import train_nanochat
from pyllmc.model_file import ModelFileError
from pyllmc.families.nanochat import NanoChatConfig
from pyllmc.token_shards import DataFormatError, read_datafile, write_datafile
from pyllmc.reference.common import UserError
from pyllmc.reference.debug_state import DebugOptimizer
from pyllmc.reference.optimizers import MuonNS, OptimizerSettings

if "TIKTOKEN_CACHE_DIR" not in os.environ and (REPO.parent / "shared" / "tiktoken_cache").is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(REPO.parent / "shared" / "tiktoken_cache")

V = 300  # the tiny models' vocabulary


def tiny_hf_nanochat(n_head: int = 4, n_kv_head: int = 2, softcap: float | None = 15.0, vocab_size: int = V,
                     n_embd: int = 64, seed: int = 0, **extra):
    """A random NanoChatForCausalLM: 2 layers, FFN 192, block size 64. Weights are drawn wider than transformers'
    init (embeddings N(0, 1), matrices N(0, 0.1), lm_head N(0, 0.5)) so every path moves the logits and the softcap
    is well away from linear."""
    from transformers import NanoChatConfig as HFConfig, NanoChatForCausalLM

    torch.manual_seed(seed)
    cfg = HFConfig(vocab_size=vocab_size, hidden_size=n_embd, intermediate_size=192, num_hidden_layers=2,
                   num_attention_heads=n_head, num_key_value_heads=n_kv_head, max_position_embeddings=64,
                   final_logit_softcapping=softcap, **extra)
    hf = NanoChatForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.normal_(0.0, 1.0 if "embed" in name else 0.5 if "lm_head" in name else 0.1)
    return hf


def our_gradients_in_hf_names(model: train_nanochat.NanoChat) -> dict[str, torch.Tensor]:
    """Our gradients under transformers' parameter names (c_attn split back into q, k, v)."""
    c = model.config
    HS = c.head_size
    out = {"model.embed_tokens.weight": model.transformer.wte.weight.grad, "lm_head.weight": model.lm_head.weight.grad}
    for i, b in enumerate(model.transformer.h):
        p = f"model.layers.{i}."
        q, k, v = b.attn.c_attn.weight.grad.split([c.n_head * HS, c.n_kv_head * HS, c.n_kv_head * HS])
        out.update({p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k, p + "self_attn.v_proj.weight": v,
                    p + "self_attn.o_proj.weight": b.attn.c_proj.weight.grad, p + "mlp.fc1.weight": b.mlp.c_fc.weight.grad,
                    p + "mlp.fc2.weight": b.mlp.c_proj.weight.grad})
    return out


@pytest.mark.parametrize("n_head, n_kv_head, softcap", [(4, 4, 15.0), (4, 2, 3.0), (4, 1, None), (8, 2, None)],
                         ids=["mha-softcap15", "gqa2-softcap3", "mqa-no-softcap", "gqa4-hs8-no-softcap"])
def test_logits_loss_and_every_gradient_match_transformers_nanochat(n_head, n_kv_head, softcap):
    hf = tiny_hf_nanochat(n_head, n_kv_head, softcap)
    ours = train_nanochat.from_hf_model(hf, "test")
    assert (ours.config.n_head, ours.config.n_kv_head, ours.config.softcap) == (n_head, n_kv_head, softcap or 0.0)
    g = torch.Generator().manual_seed(1)
    # ids from 2: transformers' embedding has padding_idx 1, whose gradient row it keeps at zero
    idx = torch.randint(2, V, (2, 48), generator=g)
    targets = torch.randint(0, V, (2, 48), generator=g)
    logits_hf = hf(idx).logits
    loss_hf = F.cross_entropy(logits_hf.view(-1, V), targets.view(-1))
    loss_hf.backward()
    logits, loss = ours(idx, targets)
    loss.backward()
    if softcap:  # the cap is reached: a head without it would be off by far more than the tolerance
        assert logits_hf.abs().max().item() > 0.5 * softcap
    assert (logits - logits_hf).abs().max().item() < 1e-4
    assert abs(loss.item() - loss_hf.item()) < 1e-5
    expected, got = {n: p.grad for n, p in hf.named_parameters()}, our_gradients_in_hf_names(ours)
    assert_gradients_match(expected, got, 1e-4)


def test_rope_turns_nanochats_way():
    """rot(x) = cat(x2, -x1): position 1 at angle a takes (1, 0) in a pair to (cos a, -sin a) (Llama's: (cos a, sin a))."""
    c = NanoChatConfig(block_size=4, vocab_size=8, n_layer=1, n_head=1, n_kv_head=1, n_embd=2, ffn_hidden=4)
    cos, sin = train_nanochat.rope_tables(c)
    x = torch.tensor([1.0, 0.0]).view(1, 1, 1, 2).expand(1, 1, 4, 2)
    y = train_nanochat.rope_apply(x, cos, sin)[0, 0]
    angles = torch.arange(4.0)
    assert torch.allclose(y, torch.stack([angles.cos(), -angles.sin()], dim=-1), atol=1e-6)


def saved_config(tmp_path: Path, **changes) -> Path:
    """A saved tiny NanoChat directory whose config.json has `changes` (a key set to None is written as null)."""
    d = tmp_path / "hf"
    if not d.exists():
        tiny_hf_nanochat().save_pretrained(str(d))
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, **changes}))
    return d


@pytest.mark.parametrize("field, value", [
    ("hidden_act", "gelu"), ("attention_bias", True), ("tie_word_embeddings", True), ("head_dim", 32),
    ("rope_parameters", {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
    ("final_logit_softcapping", 0.0), ("final_logit_softcapping", float("nan")), ("final_logit_softcapping", -1.0),
    ("num_attention_heads", 5), ("num_key_value_heads", 3), ("num_key_value_heads", 0), ("model_type", "llama"),
    ("hidden_size", "64"), ("rms_norm_eps", None), ("num_hidden_layers", 2.5),
])
def test_hf_import_refuses_a_field_the_family_cannot_run_in_one_line(tmp_path, monkeypatch, capsys, field, value):
    d = saved_config(tmp_path, **{field: value})
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()  # save_pretrained's progress bar
    status = train_nanochat.main(["--model", str(d), "--input_bin", str(TS_VAL), "--num_iterations", "0",
                                  "--write_tensors", "1", "--device", "cpu"])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert status == 1 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert field in lines[0] and str(d) in lines[0], lines[0]
    assert not list(tmp_path.glob("nanochat*.bin"))


def test_the_issues_command_line_writes_the_model_and_a_state_with_transformers_logits(tmp_path, tinyshakespeare):
    hf = tiny_hf_nanochat(4, 2, 15.0, vocab_size=50304, n_embd=32)  # GPT-2's padded vocab: the val shard's ids fit
    hf.save_pretrained(str(tmp_path / "tiny-nanochat"))
    run([PYTHON, REPO / "train_nanochat.py", "--model", tmp_path / "tiny-nanochat", "--input_bin", TS_VAL,
         "--write_tensors", 1, "--num_iterations", 0, "--batch_size", 2, "--sequence_length", 64, "--device", "cpu"],
        cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    stem = tmp_path / "nanochat_tiny-nanochat"
    for suffix in (".bin", "_bf16.bin", "_debug_state.bin"):
        assert Path(f"{stem}{suffix}").is_file(), suffix
    tok = np.fromfile(tmp_path / "nanochat_tokenizer.bin", dtype="<u4", count=4)
    assert list(tok) == [20240328, 2, 50257, 50256]  # GPT-2's tokenizer: the directory has no tokenizer.json
    c, tensors = nanochat_desc.read_nanochat(f"{stem}.bin")
    assert (c.vocab_size, c.n_embd, c.n_head, c.n_kv_head, c.ffn_hidden, c.softcap) == (50304, 32, 4, 2, 192, 15.0)
    assert np.array_equal(tensors["wte"], hf.model.embed_tokens.weight.detach().numpy())

    state = Path(f"{stem}_debug_state.bin")
    header = np.fromfile(state, dtype="<i4", count=256)
    assert list(header[:5]) == [20251013, 3, 2, 64, 10] and header[11] == 10
    B, T, Vc = 2, 64, 50304
    x = np.fromfile(state, dtype="<i4", count=B * T, offset=1024)
    y = np.fromfile(state, dtype="<i4", count=B * T, offset=1024 + 4 * B * T)
    logits = np.fromfile(state, dtype="<f4", count=B * T * Vc, offset=1024 + 8 * B * T).reshape(B, T, Vc)
    loss = np.fromfile(state, dtype="<f4", count=1, offset=1024 + 8 * B * T + 4 * B * T * Vc)[0]
    shard = np.fromfile(TS_VAL, dtype="<u2", offset=1024, count=B * T + 1).astype(np.int32)
    assert np.array_equal(x, shard[:-1]) and np.array_equal(y, shard[1:])
    with torch.no_grad():
        want = hf(torch.from_numpy(x.astype(np.int64)).view(B, T)).logits
    assert np.abs(logits - want.numpy()).max() < 1e-4
    assert abs(loss - F.cross_entropy(want.view(-1, Vc), torch.from_numpy(y.astype(np.int64))).item()) < 1e-5
    # the whole file: header, batch, logits, loss, gradients (the model file's sizes), losses, grad norms, noise
    n_params = sum(math.prod(s) for s in nanochat_desc.nanochat_tensor_shapes(c).values())
    assert state.stat().st_size == 1024 + 8 * B * T + 4 * (B * T * Vc + 1 + n_params + 3 * 10)


def test_model_file_header_round_trip_and_bf16(tmp_path):
    hf = tiny_hf_nanochat(4, 1, None, rope_parameters={"rope_type": "default", "rope_theta": 500.0}, rms_norm_eps=1e-5)
    ours = train_nanochat.from_hf_model(hf, "test")
    train_nanochat.write_model(ours, tmp_path / "m.bin", "float32")
    train_nanochat.write_model(ours, tmp_path / "m_bf16.bin", "bfloat16")
    ints = np.fromfile(tmp_path / "m.bin", dtype="<i4", count=256)
    floats = np.fromfile(tmp_path / "m.bin", dtype="<f4", count=256, offset=1024)
    assert list(ints[:9]) == [20251013, 3, 64, V, 2, 4, 1, 64, 192] and not ints[9:].any()
    assert list(floats[:3]) == [np.float32(1e-5), 500.0, 0.0] and not floats[3:].any()
    back = train_nanochat.read_model(tmp_path / "m.bin")
    assert back.config == ours.config
    for (name, a), (_, b) in zip(ours.named_parameters(), back.named_parameters()):
        assert torch.equal(a, b), name
    half = train_nanochat.read_model(tmp_path / "m_bf16.bin")
    assert np.fromfile(tmp_path / "m_bf16.bin", dtype="<i4", count=2)[1] == 5
    for (name, a), (_, b) in zip(ours.named_parameters(), half.named_parameters()):
        assert torch.equal(a.detach().bfloat16().float(), b), name
    idx = torch.randint(0, V, (1, 16))
    assert torch.equal(ours(idx, idx)[0], back(idx, idx)[0])  # with targets: every position's logits


def header_value(index: int, value: int | float):
    """A change to a model file's bytes: header int `index` (float i at 256 + i) set to `value`."""
    packed = struct.pack("<f", value) if isinstance(value, float) else struct.pack("<i", value)
    return lambda data: data[:4 * index] + packed + data[4 * index + 4:]


@pytest.mark.parametrize("change, needle", [
    (header_value(0, 20240803), "wrong magic 20240803"), (header_value(1, 4), "wrong version 4"),
    (header_value(5, 3), "not a multiple of heads NH 3"), (header_value(6, 3), "not a multiple of kv heads NKV 3"),
    (header_value(6, 8), "not a multiple of kv heads NKV 8"), (header_value(256, 0.0), "norm_eps"),
    (header_value(257, 1.0), "rope_theta"), (header_value(258, float("nan")), "softcap nan"),
    (header_value(258, -1.0), "softcap"), (lambda data: data + bytes(4), "trailing data"),
    (lambda data: data[:-4], "truncated"),
], ids=["llama3-magic", "version", "heads", "kv-heads", "kv-above-heads", "eps", "theta", "softcap-nan",
        "softcap-negative", "trailing", "truncated"])
def test_bad_model_files_are_one_line_errors(tmp_path, change, needle):
    path = tmp_path / "m.bin"
    train_nanochat.write_model(train_nanochat.from_hf_model(tiny_hf_nanochat(), "test"), path, "float32")
    path.write_bytes(change(path.read_bytes()))
    with pytest.raises(ModelFileError) as e:
        nanochat_desc.read_nanochat(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)) and needle in msg, msg
    with pytest.raises(UserError):
        train_nanochat.read_model(path)


def test_dn_shapes_and_init_follow_the_family_rules():
    assert [(c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.ffn_hidden) for c in map(train_nanochat.depth_config, (1, 2, 6))] \
        == [(1, 64, 1, 1, 256), (2, 128, 1, 1, 512), (6, 384, 3, 3, 1536)]
    c = train_nanochat.depth_config(2)
    assert (c.block_size, c.vocab_size, c.norm_eps, c.rope_theta, c.softcap) == (1024, 50304, np.float32(1e-6), 10000.0, 15.0)
    a, stem, _ = train_nanochat.load_model("d1", seed=7)
    b, _, _ = train_nanochat.load_model("d1", seed=7)
    assert stem == "nanochat_d1"
    for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), n
    # the draws restated: one generator, wte N(0,1), per layer qkvw then fcw U(-b, b), lm_head N(0, 0.001)
    g = torch.Generator().manual_seed(7)
    C, bound = 64, float(np.float32(3 ** 0.5 * 64 ** -0.5))
    assert torch.equal(a.transformer.wte.weight, torch.empty(50304, C).normal_(0, 1, generator=g))
    block = a.transformer.h[0]
    assert torch.equal(block.attn.c_attn.weight, torch.empty(3 * C, C).uniform_(-bound, bound, generator=g))
    assert torch.equal(block.mlp.c_fc.weight, torch.empty(4 * C, C).uniform_(-bound, bound, generator=g))
    assert torch.equal(a.lm_head.weight, torch.empty(50304, C).normal_(0, 0.001, generator=g))
    assert not block.attn.c_proj.weight.any() and not block.mlp.c_proj.weight.any()
    with pytest.raises(UserError, match="d5: bad nanochat config: channels C 320 is not a multiple of heads NH 3"):
        train_nanochat.load_model("d5", seed=7)


def test_muon_trains_the_blocks_matrices_and_adamw_the_embeddings_and_head(tmp_path):
    model = train_nanochat.from_hf_model(tiny_hf_nanochat(), "test")
    names = {id(p): n for n, p in model.named_parameters()}
    opt = model.configure_optimizers(OptimizerSettings(name="muon"))
    adamw, muon = opt.optimizers
    assert isinstance(muon, torch.optim.Muon) and isinstance(adamw, torch.optim.AdamW)
    in_muon = {names[id(p)] for g in muon.param_groups for p in g["params"]}
    in_adamw = {names[id(p)] for g in adamw.param_groups for p in g["params"]}
    assert in_adamw == {"transformer.wte.weight", "lm_head.weight"}
    assert in_muon == {f"transformer.h.{l}.{m}.weight" for l in range(2)
                       for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}
    plain = model.configure_optimizers(OptimizerSettings(name="adamw"))
    assert isinstance(plain, torch.optim.AdamW) and sum(len(g["params"]) for g in plain.param_groups) == 10
    # a Muon debug state says so in its header and its steps differ from AdamW's
    x, y = torch.randint(0, V, (2, 16)), torch.randint(0, V, (2, 16))
    for name in ("adamw", "muon"):
        train_nanochat.write_debug_state(model, x, y, tmp_path / f"{name}.bin", DebugOptimizer(steps=3, name=name))
    h_adamw, h_muon = (np.fromfile(tmp_path / f"{n}.bin", dtype="<i4", count=256) for n in ("adamw", "muon"))
    assert h_adamw[12] == 0 and h_muon[12] == 1 and h_muon[16] == 5
    tail = lambda n: np.fromfile(tmp_path / f"{n}.bin", dtype="<f4")[-9:]  # noqa: E731  losses, norms, noise
    assert tail("adamw")[0] == tail("muon")[0] and tail("adamw")[2] != tail("muon")[2]


@pytest.mark.parametrize("ns_dtype", [None, torch.float32])
def test_muon_steps_q_k_and_v_as_three_matrices_as_torch_muon_steps_three_weights(ns_dtype):
    """nanochat's split (its description's muon_splits_qkv): the fused qkvw is Muon's q, k and v rows, each
    orthogonalised and lr-adjusted as a weight of its own; the training optimizer (ns_dtype None) is torch.optim.Muon
    on three weights bit for bit, the debug state's (float32) MuonNS on them."""
    assert nanochat_desc.NANOCHAT.muon_splits_qkv
    model = train_nanochat.from_hf_model(tiny_hf_nanochat(n_head=4, n_kv_head=1), "test")  # q 64 rows, k and v 16
    settings = OptimizerSettings(name="muon", weight_decay=0.1, muon_lr=0.02, muon_adjust_lr="match_rms_adamw")
    q_k_v = (64, 16, 16)
    assert model.muon_row_blocks() == {f"transformer.h.{l}.attn.c_attn.weight": q_k_v for l in range(2)}
    g = torch.Generator().manual_seed(5)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g)
    qkv = model.transformer.h[1].attn.c_attn.weight
    parts = [torch.nn.Parameter(w.detach().clone()) for w in qkv.split(q_k_v)]
    for part, grad in zip(parts, qkv.grad.split(q_k_v)):
        part.grad = grad.clone()
    whole = torch.nn.Parameter(qkv.detach().clone())
    whole.grad = qkv.grad.clone()
    kwargs = dict(lr=0.02, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    opt = model.configure_optimizers(settings, ns_dtype=ns_dtype)
    three = torch.optim.Muon(parts, **kwargs) if ns_dtype is None else MuonNS(parts, ns_dtype, **kwargs)
    one = torch.optim.Muon([whole], **kwargs)
    for _ in range(2):  # the second step reads the momentum the first left
        opt.step()
        three.step()
        one.step()
    assert torch.equal(qkv, torch.cat(list(parts)))
    assert not torch.equal(qkv, whole)  # one matrix of 96 rows would have stepped otherwise


def test_a_hub_name_loads_from_the_hugging_face_cache_and_an_uncached_one_is_one_line(tmp_path):
    """--model OWNER/NAME offline: a snapshot in the hub cache (the layout huggingface_hub writes) is loaded; a name not
    in it gets one error line."""
    hf = tiny_hf_nanochat(4, 2, 15.0, vocab_size=50304, n_embd=32)
    repo = tmp_path / "hf" / "hub" / "models--someone--nanochat-tiny"
    commit = "0123456789abcdef0123456789abcdef01234567"
    hf.save_pretrained(str(repo / "snapshots" / commit))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = {"OMP_NUM_THREADS": "1", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    args = ["--input_bin", TS_VAL, "--write_tensors", 1, "--num_iterations", 0, "--batch_size", 2,
            "--sequence_length", 64, "--device", "cpu"]
    run([PYTHON, REPO / "train_nanochat.py", "--model", "someone/nanochat-tiny", *args], cwd=tmp_path, env=env)
    c, tensors = nanochat_desc.read_nanochat(tmp_path / "nanochat_nanochat-tiny.bin")
    assert (c.n_embd, c.n_head, c.n_kv_head, c.softcap) == (32, 4, 2, 15.0)
    assert np.array_equal(tensors["lm_head"], hf.lm_head.weight.detach().numpy())
    proc = run([PYTHON, REPO / "train_nanochat.py", "--model", "someone/not-cached", *args], cwd=tmp_path, env=env,
               check=False)
    line = assert_one_error_line(proc, alone=True)
    assert line.startswith("error: --model someone/not-cached: not a directory, not in the Hugging Face cache")


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_two_processes_with_zero1_reproduce_one(tmp_path, optimizer):
    """DDP (torchrun, 2 ranks of B=2, ZeRO-1) takes the same steps as one process of B=4, AdamW and Muon alike."""
    def losses(nproc: int, batch: int, zero: int) -> list[float]:
        torchrun = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", nproc]
        launch = torchrun if nproc > 1 else [PYTHON]
        out = tmp_path / f"{nproc}x{batch}"
        run([*launch, REPO / "train_nanochat.py", "--model", "d1", "--device", "cpu", "--input_bin", TS_VAL,
             "--batch_size", batch, "--sequence_length", 32, "--num_iterations", 4, "--write_tensors", 0,
             "--optimizer", optimizer, "--learning_rate", 1e-3, "--zero_stage", zero, "--output_dir", out],
            cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
        return losses_from_log(out / "main.log")

    one, two = losses(1, 4, 0), losses(2, 2, 1)
    assert len(one) == len(two) == 4 and one[-1] < one[0]
    assert np.allclose(one, two, atol=1e-5, rtol=0), (one, two)


def tiny_bpe_tokenizer(directory: Path):
    """A byte-level BPE tokenizer.json in `directory` (the kind a NanoChat checkpoint carries): <|bos|> is id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=280, special_tokens=["<|bos|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["First Citizen: before we proceed any further, hear me speak."] * 20, trainer)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    return tok


def test_tokenizer_file_comes_from_the_checkpoints_tokenizer_json(tmp_path):
    d = tmp_path / "hf"
    tok = tiny_bpe_tokenizer(d)
    text = train_nanochat.NanoChatText(argparse.Namespace(tokenizer=""), d, V)
    text.write(str(tmp_path / "tok.bin"))
    n = tok.get_vocab_size()
    header = np.fromfile(tmp_path / "tok.bin", dtype="<u4", count=4)
    assert list(header) == [20240328, 2, n, 0]  # <|bos|> is id 0: the document delimiter
    body = (tmp_path / "tok.bin").read_bytes()[1024:]
    pieces, at = [], 0
    while at < len(body):
        pieces.append(body[at + 1:at + 1 + body[at]])
        at += 1 + body[at]
    assert len(pieces) == n and pieces[0] == b"<|bos|>"
    ids = tok.encode("hear me speak").ids
    assert b"".join(pieces[i] for i in ids) == b"hear me speak" and text.decode(ids) == "hear me speak"
    with pytest.raises(UserError, match="more than the model's vocab 100"):
        train_nanochat.NanoChatText(argparse.Namespace(tokenizer=""), d, 100)


def test_text_for_such_a_model_is_tokenized_with_its_tokenizer_json(tmp_path):
    text = tinyshakespeare_text()
    tok = tiny_bpe_tokenizer(tmp_path / "tok")
    (tmp_path / "ts").mkdir()
    (tmp_path / "ts" / "tiny_shakespeare.txt").write_bytes(text.read_bytes())
    run([PYTHON, REPO / "dev" / "data" / "tinyshakespeare.py", "--model_desc", "gpt-2", "--tokenizer", tmp_path / "tok",
         "--data_dir", tmp_path / "ts"])
    val = read_datafile(tmp_path / "ts" / "tiny_shakespeare_val.bin", tok.get_vocab_size())  # gpt-2 shards, ids < 280
    first_section = text.read_text().split("\n\n")[0] + "\n\n"
    ids = val[: 1 + len(tok.encode(first_section).ids)].tolist()
    assert ids[0] == 0 and tok.decode(ids[1:]) == first_section  # <|bos|> starts every document


def test_gpt2_shards_hold_ids_up_to_65535_when_the_tokenizer_has_them(tmp_path):
    write_datafile(tmp_path / "big.bin", [0, 60000, 65535], vocab_size=65536)
    assert read_datafile(tmp_path / "big.bin", 65536).tolist() == [0, 60000, 65535]
    with pytest.raises(DataFormatError, match="vocab size 65537 does not fit gpt-2 shards"):
        write_datafile(tmp_path / "bad.bin", [0], vocab_size=65537)
    with pytest.raises(DataFormatError, match="token id 60000 at position 1 >= vocab size 50257"):
        write_datafile(tmp_path / "bad.bin", [0, 60000])  # GPT-2's vocab by default


def test_export_hf_writes_a_nanochat_directory_transformers_loads_with_the_same_logits(tmp_path):
    from transformers import NanoChatForCausalLM

    import importlib.util

    spec = importlib.util.spec_from_file_location("export_hf", REPO / "dev" / "eval" / "export_hf.py")
    export_hf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export_hf)
    for softcap, dtype in ((15.0, "float32"), (None, "bfloat16")):
        ours = train_nanochat.from_hf_model(tiny_hf_nanochat(4, 2, softcap, seed=3), "test")
        train_nanochat.write_model(ours, tmp_path / "m.bin", dtype)
        ours = train_nanochat.read_model(tmp_path / "m.bin")  # bf16: the rounded weights are what is exported
        assert export_hf.main(["-i", str(tmp_path / "m.bin"), "-o", str(tmp_path / "out")]) == 0
        hf = NanoChatForCausalLM.from_pretrained(str(tmp_path / "out"), dtype=torch.float32).eval()
        assert hf.config.final_logit_softcapping == softcap and not hf.config.tie_word_embeddings
        idx = torch.randint(2, V, (2, 40))
        with torch.no_grad():
            assert (hf(idx).logits - ours(idx, idx)[0]).abs().max().item() < 1e-4  # with targets: every position
        back = train_nanochat.from_hf_model(hf, "test")  # and back: the same tensors
        for (name, a), (_, b) in zip(ours.named_parameters(), back.named_parameters()):
            assert torch.equal(a, b), name
