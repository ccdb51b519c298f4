"""The Llama 3 PyTorch reference (train_llama3.py): against transformers' LlamaForCausalLM, its dN init, the
model / debug-state / tokenizer files it writes and their readers, Hugging Face import, DDP, and its errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import (PYTHON, REPO, assert_gradients_match, assert_one_error_line,
                      assert_reader_refuses_in_one_line, assert_reference_steps_recorded, common_model_file_damage,
                      dn_init_drawn_in_file_order, losses_from_log, read_adamw_debug_state, run, set_int)

from pyllmc.families import llama3 as llama3_desc
import train_llama3
from pyllmc.reference.debug_state import DebugOptimizer
from pyllmc.llama3_tokenizer import load_llama3_tokenizer
from train_llama3 import UserError

LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16, "rope_theta": 500000.0}


def tiny_hf_llama(tied: bool, scaled: bool, n_kv_head: int = 2, seed: int = 0):
    """A random LlamaForCausalLM: V=300, C=64, 2 layers, 8 heads of 8, n_kv_head kv heads, T up to 64. Weights are
    drawn wider than transformers' init (std 0.1, RMSNorm weights around 1) so every path moves the logits."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    rope = LLAMA31_ROPE if scaled else {"rope_type": "default", "rope_theta": 10000.0}
    cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=8,
                      num_key_value_heads=n_kv_head, max_position_embeddings=64, rms_norm_eps=1e-5, rope_parameters=rope,
                      tie_word_embeddings=tied)
    hf = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.1) if p.dim() > 1 else p.uniform_(0.5, 1.5)
    return hf


def hf_gradients(hf) -> dict[str, torch.Tensor]:
    return {name: p.grad for name, p in hf.named_parameters()}


def our_gradients_in_hf_names(model: train_llama3.Llama) -> dict[str, torch.Tensor]:
    """Our gradients under transformers' parameter names (c_attn split back into q, k, v)."""
    c = model.config
    HS = c.head_size
    out = {"model.embed_tokens.weight": model.transformer.wte.weight.grad, "model.norm.weight": model.transformer.ln_f.weight.grad}
    if not c.tied_embeddings:
        out["lm_head.weight"] = model.lm_head.weight.grad
    for i, b in enumerate(model.transformer.h):
        p = f"model.layers.{i}."
        q, k, v = b.attn.c_attn.weight.grad.split([c.n_head * HS, c.n_kv_head * HS, c.n_kv_head * HS])
        out.update({p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k, p + "self_attn.v_proj.weight": v,
                    p + "self_attn.o_proj.weight": b.attn.c_proj.weight.grad, p + "input_layernorm.weight": b.ln_1.weight.grad,
                    p + "post_attention_layernorm.weight": b.ln_2.weight.grad, p + "mlp.gate_proj.weight": b.mlp.c_fc.weight.grad,
                    p + "mlp.up_proj.weight": b.mlp.c_fc2.weight.grad, p + "mlp.down_proj.weight": b.mlp.c_proj.weight.grad})
    return out


@pytest.mark.parametrize("tied, scaled, n_kv_head", [(False, False, 2), (True, True, 2), (False, True, 8), (True, False, 1)],
                         ids=["gqa4-untied", "gqa4-tied-scaled-rope", "mha-untied-scaled-rope", "mqa-tied"])
def test_logits_and_every_gradient_match_transformers_llama(tied, scaled, n_kv_head):
    hf = tiny_hf_llama(tied, scaled, n_kv_head)
    ours = train_llama3.from_hf_model(hf, "test")
    assert ours.config.use_scaled_rope == scaled and ours.config.tied_embeddings == tied
    assert ours.config.ffn_hidden == 192 and ours.config.n_kv_head == n_kv_head
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 300, (2, 48), generator=g)  # T=48 > original_max_position 16: the scaled band matters
    targets = torch.randint(0, 300, (2, 48), generator=g)
    logits_hf = hf(idx).logits
    F.cross_entropy(logits_hf.view(-1, 300), targets.view(-1)).backward()
    logits, loss = ours(idx, targets)
    loss.backward()
    assert (logits - logits_hf).abs().max().item() < 1e-5
    expected, got = hf_gradients(hf), our_gradients_in_hf_names(ours)
    assert_gradients_match(expected, got, 1e-5)


def test_scaled_rope_changes_only_the_long_wavelengths():
    base = train_llama3.LlamaConfig(block_size=64, vocab_size=10, n_layer=1, n_head=1, n_kv_head=1, n_embd=64, multiple_of=32)
    scaled = train_llama3.LlamaConfig(**{**{k: getattr(base, k) for k in ("block_size", "vocab_size", "n_layer", "n_head",
                                                                               "n_kv_head", "n_embd", "multiple_of")},
                                         "use_scaled_rope": True, "rope_factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position": 8192.0})
    plain, llama31 = train_llama3.rope_inv_freq(base), train_llama3.rope_inv_freq(scaled)
    wavelen = 2 * math.pi / plain
    assert torch.equal(llama31[wavelen < 8192 / 4], plain[wavelen < 8192 / 4])
    assert torch.allclose(llama31[wavelen > 8192], plain[wavelen > 8192] / 8)
    assert (wavelen > 8192).any() and (wavelen < 2048).any()


def test_ffn_hidden_size_follows_llamas_rule():
    assert train_llama3.llama_ffn_hidden(2048, 256, 1.5) == 8192  # Llama 3.2 1B
    assert train_llama3.llama_ffn_hidden(3072, 256, 1.0) == 8192  # Llama 3.2 3B
    assert train_llama3.llama_ffn_hidden(4096, 1024, 1.3) == 14336  # Llama 3.1 8B
    assert train_llama3.llama_ffn_hidden(128, 32, 0.0) == 352  # d2
    for C, hidden in [(2048, 8192), (3072, 8192), (4096, 14336), (64, 192), (64, 200), (48, 100)]:
        mult, multiple = train_llama3.ffn_rule_for(C, hidden)
        assert train_llama3.llama_ffn_hidden(C, multiple, mult) == hidden, (C, hidden)


def test_dn_shapes_and_init_are_deterministic_and_drawn_in_file_order():
    model, stem = dn_init_drawn_in_file_order(lambda seed: train_llama3.load_model("d2", seed=seed, vocab_size=514),
                                              llama3_desc.llama3_tensor_shapes, train_llama3.stacked,
                                              ("ln1w", "ln2w", "lnfw"))
    cfg = model.config
    assert stem == "llama3_d2"
    assert (cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.n_embd, cfg.ffn_hidden, cfg.block_size) == (2, 2, 1, 128, 352, 1024)
    assert not cfg.tied_embeddings and cfg.multiple_of == 32 and cfg.rope_theta == 500000.0 and cfg.norm_eps == np.float32(1e-5)


def test_model_file_header_fields_and_round_trip(tmp_path):
    hf = tiny_hf_llama(tied=False, scaled=True)
    model = train_llama3.from_hf_model(hf, "test")
    train_llama3.write_model(model, tmp_path / "m.bin", "float32")
    train_llama3.write_model(model, tmp_path / "m_bf16.bin", "bfloat16")
    ints = np.fromfile(tmp_path / "m.bin", dtype="<i4", count=256)
    floats = np.fromfile(tmp_path / "m.bin", dtype="<f4", count=256, offset=1024)
    c = model.config
    assert list(ints[:18]) == [20240803, 3, 64, 300, 2, 8, 2, 64, int(c.ffn_dim_multiplier), c.multiple_of, 0, 500000, 1, 4, 3,
                               1, 0, 192]
    assert not ints[18:].any() and not floats[7:].any()
    assert list(floats[:7]) == pytest.approx([np.float32(c.ffn_dim_multiplier), 1e-5, 500000.0, 8.0, 1.0, 4.0, 16.0])
    n_params = sum(p.numel() for p in model.parameters())
    assert (tmp_path / "m.bin").stat().st_size == 2048 + 4 * n_params
    back = train_llama3.read_model(tmp_path / "m.bin")
    for (name, p), q in zip(model.named_parameters(), back.parameters()):
        assert torch.equal(p, q), name
    assert back.config == model.config
    bf16 = train_llama3.read_model(tmp_path / "m_bf16.bin")
    assert int(np.fromfile(tmp_path / "m_bf16.bin", dtype="<i4", count=2)[1]) == 5
    for p, q in zip(model.parameters(), bf16.parameters()):
        assert torch.equal(p.bfloat16().float(), q)


def test_tied_model_file_stores_no_lm_head(tmp_path):
    model = train_llama3.from_hf_model(tiny_hf_llama(tied=True, scaled=False), "test")
    train_llama3.write_model(model, tmp_path / "t.bin", "float32")
    ints = np.fromfile(tmp_path / "t.bin", dtype="<i4", count=256)
    assert ints[16] == 1 and ints[15] == 2 and ints[12] == 0
    assert (tmp_path / "t.bin").stat().st_size == 2048 + 4 * sum(p.numel() for p in model.parameters())  # wte counted once
    back = train_llama3.read_model(tmp_path / "t.bin")
    assert back.lm_head.weight is back.transformer.wte.weight


@pytest.mark.parametrize("edit, message", [
    *common_model_file_damage(20240326, "wrong magic 20240326", "shorter than the 2048-byte"),
    (lambda d: set_int(d, 17, 353), "FFN hidden size 353"),
    (lambda d: set_int(d, 6, 3), "not a multiple of n_kv_head 3"),
    (lambda d: set_int(d, 4, 0), "must be positive"),
])
def test_model_file_reader_rejects_bad_files_with_one_line(tmp_path, edit, message):
    model = train_llama3.from_hf_model(tiny_hf_llama(tied=False, scaled=False), "test")
    train_llama3.write_model(model, tmp_path / "good.bin", "float32")
    assert_reader_refuses_in_one_line(train_llama3.read_model, tmp_path / "good.bin", edit, message)


def test_trainer_refuses_a_corrupt_model_file_with_one_error_line(tmp_path, llama3_tokenizer, llama3_tinyshakespeare):
    (tmp_path / "bad.bin").write_bytes(np.zeros(512, dtype="<i4").tobytes())
    proc = run([PYTHON, REPO / "train_llama3.py", "--model", tmp_path / "bad.bin", "--tokenizer", llama3_tokenizer,
                "--input_bin", llama3_tinyshakespeare[1], "--num_iterations", 1], cwd=tmp_path, check=False)
    assert "wrong magic 0" in assert_one_error_line(proc, alone=True)


@pytest.fixture(scope="module")
def d2_llama(tmp_path_factory, llama3_tokenizer, llama3_tinyshakespeare) -> Path:
    """A directory where train_llama3.py --model d2 wrote llama3_d2.bin, its bf16 twin, debug state and tokenizer file."""
    out = tmp_path_factory.mktemp("llama3_d2")
    run([PYTHON, REPO / "train_llama3.py", "--model", "d2", "--tokenizer", llama3_tokenizer, "--input_bin",
         llama3_tinyshakespeare[0], "--batch_size", 4, "--sequence_length", 32, "--num_iterations", 0, "--device", "cpu"],
        cwd=out, env={"OMP_NUM_THREADS": "1"})
    return out


def test_debug_state_is_self_consistent(d2_llama):
    B, T, V = 4, 32, 514
    model = train_llama3.read_model(d2_llama / "llama3_d2.bin")
    state = read_adamw_debug_state(d2_llama / "llama3_d2_debug_state.bin", 20240803, B, T, V,
                                   sum(p.numel() for p in model.parameters()))
    assert state.x.max() < V
    recomputed = F.cross_entropy(torch.from_numpy(state.logits.astype(np.float64)),
                                 torch.from_numpy(state.y.astype(np.int64)))
    assert abs(recomputed.item() - state.loss) < 1e-5
    with torch.no_grad():
        ours, _ = model(torch.from_numpy(state.x.astype(np.int64)).view(B, T),
                        torch.from_numpy(state.y.astype(np.int64)).view(B, T))
    assert np.abs(ours.view(B * T, V).numpy() - state.logits).max() < 1e-5
    assert_reference_steps_recorded(state)


def test_files_of_the_d2_run_read_back_and_bf16_is_the_rounded_fp32(d2_llama):
    fp32 = train_llama3.read_model(d2_llama / "llama3_d2.bin")
    ref, _ = train_llama3.load_model("d2", seed=42, vocab_size=514)
    for (name, p), q in zip(ref.named_parameters(), fp32.parameters()):
        assert torch.equal(p, q), name
    bits = np.fromfile(d2_llama / "llama3_d2_bf16.bin", dtype="<u2", offset=2048)
    expected = torch.from_numpy(np.fromfile(d2_llama / "llama3_d2.bin", dtype="<f4", offset=2048)).bfloat16()
    assert np.array_equal(bits, expected.view(torch.int16).numpy().view(np.uint16))


def test_tokenizer_file_holds_every_tokens_bytes(d2_llama, llama3_tokenizer):
    tok = load_llama3_tokenizer(str(llama3_tokenizer))
    data = (d2_llama / "llama3_tokenizer.bin").read_bytes()
    h = np.frombuffer(data[:1024], dtype="<u4")
    assert list(h[:5]) == [20240328, 3, 514, 513, 512] and not h[5:].any()
    pieces, pos = [], 1024
    while pos < len(data):
        n = data[pos]
        pieces.append(data[pos + 1 : pos + 1 + n])
        pos += 1 + n
    assert len(pieces) == 514 and pos == len(data)
    assert pieces[512] == b"<|begin_of_text|>" and pieces[513] == b"<|end_of_text|>"
    text = "To be, or not to be: that is the question. Ünïcödé ✓ 你好\n\n"
    ids = tok.encode(text)
    assert b"".join(pieces[i] for i in ids).decode("utf-8") == text


def test_tokenizer_writer_refuses_a_token_longer_than_255_bytes(tmp_path, llama3_tokenizer):
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_file(str(llama3_tokenizer / "tokenizer.json"))
    tok.add_special_tokens([AddedToken("<|" + "x" * 300 + "|>", special=True)])
    tok.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(UserError, match="token 514 is 304 bytes long"):
        train_llama3.tokenizer_file_bytes(load_llama3_tokenizer(str(tmp_path)))


def test_huggingface_directory_import_matches_transformers(tmp_path):
    hf = tiny_hf_llama(tied=True, scaled=True)
    hf.save_pretrained(tmp_path / "tiny-llama")
    ours, stem = train_llama3.load_model(str(tmp_path / "tiny-llama"), seed=0, vocab_size=0)
    assert stem == "llama3_tiny-llama" and ours.config.version_minor == 2
    idx = torch.randint(0, 300, (2, 33))
    with torch.no_grad():
        assert (ours(idx, idx)[0] - hf(idx).logits).abs().max().item() < 1e-5


ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # a tiny model: extra threads only contend on the shared cores


def train_cmd(out: Path, tokenizer: Path, shard: Path, *extra) -> list:
    return [REPO / "train_llama3.py", "--model", "d2", "--device", "cpu", "--tokenizer", tokenizer, "--input_bin", shard,
            "--sequence_length", 32, "--num_iterations", 5, "--write_tensors", 0, "--learning_rate", 1e-3,
            "--output_dir", out, *extra]


@pytest.fixture(scope="module")
def single_process_losses(tmp_path_factory, llama3_tokenizer, llama3_tinyshakespeare) -> list[float]:
    """5 steps of d2 with B=4, T=32 on the val shard, one process."""
    out = tmp_path_factory.mktemp("llama3_single")
    run([PYTHON, *train_cmd(out, llama3_tokenizer, llama3_tinyshakespeare[1], "--batch_size", 4)], env=ONE_THREAD)
    return losses_from_log(out / "main.log")


def test_training_lowers_the_loss_logs_validates_and_samples(tmp_path, llama3_tokenizer, llama3_tinyshakespeare):
    train, val = llama3_tinyshakespeare
    proc = run([PYTHON, *train_cmd(tmp_path / "run", llama3_tokenizer, train, "--batch_size", 4, "--input_val_bin", val,
                                   "--val_loss_every", 5, "--val_max_steps", 2, "--sample_every", 5, "--gen_tokens", 8,
                                   "--overfit_single_batch", 1)], env=ONE_THREAD)
    log = (tmp_path / "run" / "main.log").read_text()
    losses = losses_from_log(tmp_path / "run" / "main.log")
    assert len(losses) == 5 and losses[-1] < losses[0]
    assert "s:0 tel:" in log and "s:5 tel:" in log
    assert proc.stdout.count("---\n") == 4, "two samples between --- lines"
    assert train_llama3.read_model(tmp_path / "run" / "model_00000005.bin").config.n_layer == 2


def test_ddp_with_zero1_two_processes_reproduce_one(tmp_path, llama3_tokenizer, llama3_tinyshakespeare, single_process_losses):
    torchrun = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", 2]
    run([*torchrun, *train_cmd(tmp_path / "ddp", llama3_tokenizer, llama3_tinyshakespeare[1], "--batch_size", 2,
                               "--zero_stage", 1)], env=ONE_THREAD)
    ddp = losses_from_log(tmp_path / "ddp" / "main.log")
    assert len(single_process_losses) == len(ddp) == 5
    assert np.allclose(single_process_losses, ddp, atol=1e-5, rtol=0), (single_process_losses, ddp)


def test_gradient_accumulation_matches_one_big_batch(tmp_path, llama3_tokenizer, llama3_tinyshakespeare, single_process_losses):
    run([PYTHON, *train_cmd(tmp_path / "accum", llama3_tokenizer, llama3_tinyshakespeare[1], "--batch_size", 2,
                            "--total_batch_size", 4 * 32)], env=ONE_THREAD)
    assert np.allclose(single_process_losses, losses_from_log(tmp_path / "accum" / "main.log"), atol=1e-5, rtol=0)


@pytest.mark.parametrize("args, message", [
    (["--model", "meta-llama/Llama-3.2-1B"], "huggingface.co cannot be reached"),
    (["--model", "d0"], "the depth must be at least 1"),
    (["--model", "d2", "--sequence_length", "2048"], "exceeds the model's block size 1024"),
    (["--model", "d2", "--input_bin", "GPT2_SHARD"], "a gpt-2 token shard"),
    (["--model", "d2", "--input_bin", "/nonexistent/*.bin"], "no token shards match"),
    (["--model", "d2", "--tokenizer", "/nonexistent"], "no such tokenizer.json"),
    (["--model", "d2", "--tokenizer", "NO_TOKENIZER"], "cannot load the llama-3 tokenizer"),
    (["--model", "missing.bin"], "missing.bin: cannot read: No such file"),
])
def test_bad_input_gives_one_error_line(monkeypatch, capsys, tmp_path, llama3_tokenizer, llama3_tinyshakespeare,
                                        tinyshakespeare, args, message):
    """In process (main() is what the script runs): exit status 1 and one `error:` line on stderr, nothing else."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    args = [str(tinyshakespeare[1]) if a == "GPT2_SHARD" else a for a in args]
    tok = [] if "--tokenizer" in args else ["--tokenizer", str(llama3_tokenizer)]
    args = [a for a in args if a != "NO_TOKENIZER"]
    if args[-1] == "--tokenizer":
        args.pop()  # no --tokenizer at all: the hub's, which is unreachable offline
    status = train_llama3.main(["--input_bin", str(llama3_tinyshakespeare[1]), "--num_iterations", "1", "--write_tensors", "0",
                                "--device", "cpu", *tok, *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    if message == "cannot load the llama-3 tokenizer":
        assert "--tokenizer" in err[0]


def test_unknown_flag_gives_one_error_line(tmp_path):
    proc = run([PYTHON, REPO / "train_llama3.py", "--bogus", "1"], cwd=tmp_path, check=False)
    assert "unrecognized arguments" in assert_one_error_line(proc, status=2, alone=True)


def test_muon_debug_state_names_the_optimizer_and_its_steps_lower_the_loss(tmp_path):
    """--optimizer muon (the references' make_optimizer): Muon on the blocks' matrices, AdamW on wte, lm_head and the
    norms; the debug state's header[12..17] carry Muon's settings, as GPT-2's do."""
    model, _ = train_llama3.load_model("d1", seed=3, vocab_size=514)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 514, (2, 17), generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]
    opt = DebugOptimizer(steps=4, name="muon", muon_lr=0.02, muon_ns_steps=5, muon_adjust_lr="match_rms_adamw")
    train_llama3.write_debug_state(model, x, y, tmp_path / "muon.bin", opt)
    h = np.fromfile(tmp_path / "muon.bin", dtype="<i4", count=256)
    assert list(h[:5]) == [20240803, 3, 2, 16, 4] and h[11] == 4
    assert h[12] == 1 and h[13:15].view("<f4").tolist() == pytest.approx([0.02, 0.95]) and list(h[15:18]) == [1, 5, 1]
    losses = np.fromfile(tmp_path / "muon.bin", dtype="<f4")[-12:-8]
    assert np.all(np.diff(losses) < 0), losses
    adamw_steps = train_llama3.reference_steps(model, x, y, DebugOptimizer(steps=4))[3]
    assert not np.allclose(losses, adamw_steps), "Muon takes other steps than AdamW"
    muon = model.configure_optimizers(opt.settings())
    muon_params = {id(p) for o in muon.optimizers[1:] for group in o.param_groups for p in group["params"]}
    assert {n for n, p in model.named_parameters() if id(p) in muon_params} == {
        f"transformer.h.0.{m}.weight" for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_fc2", "mlp.c_proj")}


def test_flash_attention_gives_the_explicit_attentions_logits():
    hf = tiny_hf_llama(tied=False, scaled=True, n_kv_head=2)
    explicit, flash = train_llama3.from_hf_model(hf, "test"), train_llama3.from_hf_model(hf, "test", flash=True)
    idx = torch.randint(0, 300, (2, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (explicit(idx, idx)[0] - flash(idx, idx)[0]).abs().max().item() < 1e-5


@pytest.mark.parametrize("name, hidden, inter, layers, heads, kv, tied, factor, want", [
    ("Llama-3.2-1B", 2048, 8192, 16, 32, 8, True, 32.0, (1.5, 256, 2)),
    ("Llama-3.2-3B", 3072, 8192, 28, 24, 8, True, 32.0, (1.0, 256, 2)),
    ("Llama-3.1-8B", 4096, 14336, 32, 32, 8, False, 8.0, (1.3, 1024, 1)),
])
def test_published_llama_configs_map_to_metas_hyperparameters(name, hidden, inter, layers, heads, kv, tied, factor, want):
    """The Hugging Face configs of the real models (no weights needed): Meta's ffn_dim_multiplier and multiple_of come
    back from intermediate_size, the RoPE scaling and the tied head from the config, and the header says so."""
    from transformers import LlamaConfig

    rope = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
    hf = LlamaConfig(vocab_size=128256, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                     num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=131072, rms_norm_eps=1e-5,
                     rope_parameters=rope, tie_word_embeddings=tied)
    c = train_llama3.config_from_hf(hf, name)
    assert (c.ffn_dim_multiplier, c.multiple_of, c.version_minor) == (pytest.approx(want[0]), want[1], want[2])
    assert c.ffn_hidden == inter and c.use_scaled_rope and c.rope_factor == factor and c.tied_embeddings == tied
    ints = np.frombuffer(llama3_desc.llama3_header_bytes(c, 3)[:1024], dtype="<i4")
    assert list(ints[:18]) == [20240803, 3, 131072, 128256, layers, heads, kv, hidden, int(want[0]), want[1], 0, 500000, 1,
                               4, 3, want[2], int(tied), inter]


def test_a_token_id_beyond_the_vocab_in_a_shard_gives_one_error_line(monkeypatch, capsys, tmp_path, llama3_tokenizer):
    from pyllmc.token_shards import write_datafile

    tokens = np.full(4096, 5, dtype=np.int64)
    tokens[1000] = 600  # < 128256, so the shard itself is valid, but >= the test tokenizer's 514
    write_datafile(tmp_path / "shard.bin", tokens, "llama-3")
    monkeypatch.chdir(tmp_path)
    status = train_llama3.main(["--model", "d1", "--tokenizer", str(llama3_tokenizer), "--input_bin", str(tmp_path / "shard.bin"),
                                "--num_iterations", "1", "--write_tensors", "0", "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and len(err) == 1 and "token id 600 at position 1000 >= vocab size 514" in err[0], err
