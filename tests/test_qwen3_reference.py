"""The Qwen3 PyTorch reference (train_qwen3.py): against transformers' Qwen3ForCausalLM (MHA, GQA, MQA, tied and
untied, head_dim independent of C/NH), its dN init, the model / debug-state / tokenizer files it writes and their
reader, Hugging Face import and export, its command line, and its errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import (PYTHON, REPO, assert_gradients_match, assert_one_error_line, assert_reader_refuses_in_one_line,
                      assert_reference_steps_recorded, common_model_file_damage, dn_init_drawn_in_file_order,
                      llama3_shards, losses_from_log, read_adamw_debug_state, run, set_float, set_int, trained_tokenizer)

import train_qwen3
from pyllmc.families.qwen3 import QWEN3, qwen3_tensor_shapes
from pyllmc.llama3_tokenizer import load_llama3_tokenizer
from train_qwen3 import UserError

ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # tiny models: extra threads only contend on the shared cores


def tiny_hf_qwen3(n_kv_head: int, tied: bool, head_dim: int = 16, n_embd: int = 48, vocab_size: int = 300,
                  seed: int = 0, **extra):
    """A random Qwen3ForCausalLM: V=vocab_size, C=n_embd, 2 layers, 4 heads of head_dim (width 64 != C=48 by default),
    FFN 80, T up to 64, theta 10000. Weights drawn wider than transformers' init (std 0.1, norm weights around 1)
    so every path, the QK-norm weights included, moves the logits."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=vocab_size, hidden_size=n_embd, intermediate_size=80, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=n_kv_head, head_dim=head_dim,
                      max_position_embeddings=64, rms_norm_eps=1e-6,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      tie_word_embeddings=tied, attn_implementation="eager", **extra)
    hf = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.1) if p.dim() > 1 else p.uniform_(0.5, 1.5)
    return hf


SHAPES = [  # (n_kv_head, tied, head_dim, n_embd)
    pytest.param(4, False, 16, 48, id="mha-untied-width64-C48"),
    pytest.param(2, True, 16, 48, id="gqa-tied-width64-C48"),
    pytest.param(1, False, 8, 48, id="mqa-untied-width32-C48"),
    pytest.param(2, False, 12, 48, id="gqa-untied-head_dim-is-C/NH"),
    pytest.param(1, True, 24, 32, id="mqa-tied-width96-C32"),
]


@pytest.mark.parametrize("n_kv_head, tied, head_dim, n_embd", SHAPES)
def test_logits_loss_and_every_gradient_match_transformers_qwen3(n_kv_head, tied, head_dim, n_embd):
    hf = tiny_hf_qwen3(n_kv_head, tied, head_dim, n_embd)
    ours = train_qwen3.from_hf_model(hf, "test")
    c = ours.config
    assert (c.n_kv_head, c.tied_embeddings, c.head_dim, c.n_embd) == (n_kv_head, tied, head_dim, n_embd)
    assert c.ffn_hidden == 80 and c.attention_width == 4 * head_dim
    g = torch.Generator().manual_seed(1)
    idx, targets = torch.randint(0, 300, (2, 48), generator=g), torch.randint(0, 300, (2, 48), generator=g)
    logits_hf = hf(idx).logits
    loss_hf = F.cross_entropy(logits_hf.view(-1, 300), targets.view(-1))
    loss_hf.backward()
    logits, loss = ours(idx, targets)
    loss.backward()
    assert (logits - logits_hf).abs().max().item() < 1e-5
    assert abs(loss.item() - loss_hf.item()) < 1e-6
    expected = {name: p.grad for name, p in hf.named_parameters()}
    got = train_qwen3.hf_state_dict_of(ours, lambda p: p.grad)
    if tied:
        del got["lm_head.weight"]  # transformers lists the shared weight once, as the embedding
    assert_gradients_match(expected, got, 1e-5)


def test_flash_attention_gives_the_explicit_attentions_logits():
    hf = tiny_hf_qwen3(2, False)
    explicit, flash = train_qwen3.from_hf_model(hf, "test"), train_qwen3.from_hf_model(hf, "test", flash=True)
    idx = torch.randint(0, 300, (2, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (explicit(idx, idx)[0] - flash(idx, idx)[0]).abs().max().item() < 1e-5


def test_dn_shapes_and_init_are_deterministic_and_drawn_in_file_order():
    model, stem = dn_init_drawn_in_file_order(lambda seed: train_qwen3.load_model("d2", seed=seed, vocab_size=513),
                                              qwen3_tensor_shapes, train_qwen3.stacked,
                                              ("ln1w", "qnormw", "knormw", "ln2w", "lnfw"))
    c = model.config
    assert stem == "qwen3_d2"
    assert (c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.head_dim, c.ffn_hidden) == (2, 2, 1, 128, 128, 384)
    assert c.block_size == 1024
    assert c.attention_width == 256 != c.n_embd and not c.tied_embeddings
    assert c.rope_theta == 1e6 and c.norm_eps == np.float32(1e-6)
    assert list(qwen3_tensor_shapes(c)) == list(QWEN3.tensor_names)


def test_model_file_header_round_trip_and_back_into_transformers(tmp_path):
    hf = tiny_hf_qwen3(2, False)
    model = train_qwen3.from_hf_model(hf, "test")
    train_qwen3.write_model(model, tmp_path / "m.bin", "float32")
    train_qwen3.write_model(model, tmp_path / "m_bf16.bin", "bfloat16")
    ints = np.fromfile(tmp_path / "m.bin", dtype="<i4", count=256)
    floats = np.fromfile(tmp_path / "m.bin", dtype="<f4", count=256, offset=1024)
    assert list(ints[:11]) == [20250429, 3, 64, 300, 2, 4, 2, 48, 16, 80, 0] and not ints[11:].any()
    assert list(floats[:2]) == [np.float32(1e-6), 10000.0] and not floats[2:].any()
    n_params = sum(p.numel() for p in model.parameters())
    assert (tmp_path / "m.bin").stat().st_size == 2048 + 4 * n_params
    back = train_qwen3.read_model(tmp_path / "m.bin")
    assert back.config == model.config
    for (name, p), q in zip(model.named_parameters(), back.parameters()):
        assert torch.equal(p, q), name
    bf16 = train_qwen3.read_model(tmp_path / "m_bf16.bin")
    assert int(np.fromfile(tmp_path / "m_bf16.bin", dtype="<i4", count=2)[1]) == 5
    assert (tmp_path / "m_bf16.bin").stat().st_size == 2048 + 2 * n_params
    for p, q in zip(model.parameters(), bf16.parameters()):
        assert torch.equal(p.bfloat16().float(), q)
    # the file back into transformers: the converter's Qwen3ForCausalLM gives the original's logits
    idx = torch.randint(0, 300, (2, 33), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        reloaded = train_qwen3.to_hf_model(back)
        assert type(reloaded).__name__ == "Qwen3ForCausalLM"
        assert (reloaded(idx).logits - hf(idx).logits).abs().max().item() < 1e-5


def test_tied_model_file_stores_no_lm_head_and_converts_back_tied(tmp_path):
    model = train_qwen3.from_hf_model(tiny_hf_qwen3(1, True), "test")
    train_qwen3.write_model(model, tmp_path / "t.bin", "float32")
    assert np.fromfile(tmp_path / "t.bin", dtype="<i4", count=11)[10] == 1
    assert (tmp_path / "t.bin").stat().st_size == 2048 + 4 * sum(p.numel() for p in model.parameters())  # wte once
    back = train_qwen3.read_model(tmp_path / "t.bin")
    assert back.lm_head.weight is back.transformer.wte.weight
    hf = train_qwen3.to_hf_model(back)
    assert hf.config.tie_word_embeddings and hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()


# ---------------------------------------------------------------------------- dev/eval/export_hf.py


def export_hf(*args: object) -> "subprocess.CompletedProcess[str]":
    return run([PYTHON, REPO / "dev" / "eval" / "export_hf.py", *args], check=False)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n_kv_head, tied, head_dim, n_embd", [
    pytest.param(2, True, 16, 48, id="gqa-tied-width64-C48"),
    pytest.param(1, False, 8, 48, id="mqa-untied-width32-C48"),
    pytest.param(4, False, 24, 32, id="mha-untied-width96-C32"),
])
def test_export_hf_writes_a_qwen3_directory_transformers_loads_with_the_references_logits(tmp_path, n_kv_head, tied,
                                                                                          head_dim, n_embd, dtype):
    from safetensors.numpy import load_file
    from transformers import Qwen3ForCausalLM

    train_qwen3.write_model(train_qwen3.from_hf_model(tiny_hf_qwen3(n_kv_head, tied, head_dim, n_embd, seed=5), "test"),
                            tmp_path / "m.bin", dtype)
    ours = train_qwen3.read_model(tmp_path / "m.bin")  # bf16: the rounded weights are what is exported
    proc = export_hf("-i", tmp_path / "m.bin", "-o", tmp_path / "hf", "--no-tokenizer")
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    assert f"qwen3, L=2 NH=4 NKV={n_kv_head} C={n_embd} head_dim={head_dim}" in proc.stdout, proc.stdout
    assert sorted(f.name for f in (tmp_path / "hf").iterdir()) == ["config.json", "model.safetensors"]
    assert ("lm_head.weight" in load_file(tmp_path / "hf" / "model.safetensors")) == (not tied)

    hf = Qwen3ForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    c = hf.config
    assert type(hf).__name__ == "Qwen3ForCausalLM" and c.model_type == "qwen3"
    assert (c.head_dim, c.num_attention_heads, c.num_key_value_heads, c.hidden_size, c.tie_word_embeddings) == \
        (head_dim, 4, n_kv_head, n_embd, tied)
    assert c.rope_parameters["rope_theta"] == 10000.0 and c.rms_norm_eps == 1e-6 and c.max_position_embeddings == 64
    assert (hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()) == tied
    idx = torch.randint(0, 300, (2, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert (hf(idx).logits - ours(idx, idx)[0]).abs().max().item() < 1e-5  # with targets: every position
    back = train_qwen3.from_hf_model(hf, "test")  # and back: the model file's tensors exactly
    for (name, a), b in zip(ours.named_parameters(), back.parameters()):
        assert torch.equal(a, b), name


def test_export_hf_of_a_qwen3_file_writes_no_gpt2_tokenizer_and_says_why(tmp_path):
    train_qwen3.write_model(train_qwen3.from_hf_model(tiny_hf_qwen3(2, False), "test"), tmp_path / "m.bin", "float32")
    proc = export_hf("-i", tmp_path / "m.bin", "-o", tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "Qwen3ForCausalLM" in warnings[0] and "no tokenizer files" in warnings[0], proc.stderr
    assert not (tmp_path / "hf" / "vocab.json").exists()


@pytest.mark.parametrize("edit, message", [
    *common_model_file_damage(20240803, "wrong magic 20240803, expected 20250429 (a Qwen3 model file)",
                              "shorter than the 2048-byte Qwen3 header"),
    (lambda d: set_int(d, 10, 2), "tied embeddings flag (header[10]) = 2"),
    (lambda d: set_int(d, 11, 1), "the unused fields"),
    (lambda d: set_float(d, 5, 1.0), "the unused fields"),
    (lambda d: set_int(d, 8, 15), "head_dim 15 must be even"),
    (lambda d: set_int(d, 6, 3), "not a multiple of kv heads NKV 3"),
    (lambda d: set_int(d, 6, 8), "not a multiple of kv heads NKV 8"),
    (lambda d: set_int(d, 4, 0), "every size must be at least 1"),
    (lambda d: set_int(d, 9, -80), "every size must be at least 1"),
    (lambda d: set_float(d, 0, 0.0), "norm_eps 0.0 must be in (0, 1)"),
    (lambda d: set_float(d, 1, float("nan")), "rope_theta nan must be finite"),
    (lambda d: set_int(d, 9, 81), "truncated"),
])
def test_model_file_reader_rejects_bad_files_with_one_line(tmp_path, edit, message):
    model = train_qwen3.from_hf_model(tiny_hf_qwen3(2, False), "test")
    train_qwen3.write_model(model, tmp_path / "good.bin", "float32")
    assert_reader_refuses_in_one_line(train_qwen3.read_model, tmp_path / "good.bin", edit, message)


def test_another_familys_model_file_is_refused_with_one_line(tmp_path):
    import train_llama3

    llama, _ = train_llama3.load_model("d1", seed=0, vocab_size=16)
    train_llama3.write_model(llama, tmp_path / "llama3_d1.bin", "float32")
    with pytest.raises(UserError, match="wrong magic 20240803, expected 20250429") as e:
        train_qwen3.read_model(tmp_path / "llama3_d1.bin")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("extra, message", [
    ({"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 1},
     "sliding-window attention is not supported"),
    ({"attention_bias": True}, "needs hidden_act silu and no attention bias"),
    ({"hidden_act": "gelu"}, "needs hidden_act silu and no attention bias"),
])
def test_a_config_it_cannot_run_is_refused_with_one_line(extra, message):
    with pytest.raises(UserError, match=message) as e:
        train_qwen3.from_hf_model(tiny_hf_qwen3(2, False, **extra), "tiny")
    assert "\n" not in str(e.value)


def test_scaled_rope_and_other_model_types_are_refused_with_one_line(tmp_path):
    from transformers import LlamaConfig, Qwen3Config

    yarn = Qwen3Config(rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6,
                                        "original_max_position_embeddings": 32768})
    with pytest.raises(UserError, match="unsupported RoPE type 'yarn'"):
        train_qwen3.config_from_hf(yarn, "yarn")
    with pytest.raises(UserError, match="a 'llama' model, not Qwen3"):
        train_qwen3.config_from_hf(LlamaConfig(), "llama")


@pytest.fixture(scope="module")
def eot_tokenizer(tmp_path_factory, tinyshakespeare) -> Path:
    """Directory holding tokenizer.json: the test tokenizer with <|endoftext|> = 512 as its only special token, a
    document delimiter without BOS as Qwen3's (dev/data/make_test_tokenizer.py --delimiter endoftext): 513 tokens."""
    return trained_tokenizer(tmp_path_factory, "qwen3_eot_tokenizer", "--delimiter", "endoftext")


@pytest.fixture(scope="module")
def eot_shards(tmp_path_factory, eot_tokenizer) -> tuple[Path, Path]:
    """(train, val) llama-3 shards of Tiny Shakespeare in the <|endoftext|> tokenizer's ids (512 before every
    document)."""
    return llama3_shards(tmp_path_factory, "qwen3_eot_tinyshakespeare", eot_tokenizer)


def test_a_tokenizer_without_bos_delimits_documents_with_endoftext(eot_tokenizer, eot_shards):
    tok = load_llama3_tokenizer(str(eot_tokenizer))
    assert (tok.vocab_size, tok.bos, tok.eot) == (513, 512, 512)
    tokens = np.fromfile(eot_shards[1], dtype="<u4", offset=1024)
    assert np.fromfile(eot_shards[1], dtype="<i4", count=1)[0] == QWEN3.shards.magic
    assert tokens[0] == 512 and tokens.max() == 512 and (tokens == 512).sum() > 1


def test_the_shard_id_bound_is_the_tokenizers_vocab_not_llama3s(tmp_path):
    """A tokenizer with more ids than Llama 3's 128,256 (Qwen3's has 151,669) makes llama-3 shards."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    sys.path.insert(0, str(REPO / "dev" / "data"))
    from data_common import get_tokenizer, write_splits

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    ordered = sorted(alphabet)
    vocab = {ch: i for i, ch in enumerate(ordered)}  # the 256 byte tokens, then filler tokens of three characters
    for n in range(151_668 - len(vocab)):
        vocab["".join(ordered[(n >> s) % 256] for s in (16, 8, 0)) + "~"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    assert get_tokenizer("llama-3", str(tmp_path)).vocab_size == 151_669
    write_splits(tmp_path, "big", {"val": np.array([151_668, 151_000, 5])}, "llama-3", str(tmp_path))
    assert np.fromfile(tmp_path / "big_val.bin", dtype="<u4", offset=1024).tolist() == [151_668, 151_000, 5]


@pytest.fixture(scope="module")
def hf_dir_run(tmp_path_factory, eot_tokenizer, eot_shards) -> tuple[Path, Path]:
    """A tiny local Hugging Face Qwen3 directory (save_pretrained, V=520 padded past the tokenizer's 513 as the hub's
    Qwen3 pads 151,669 to 151,936, its tokenizer.json beside it) and the directory where the issue's command ran:
    train_qwen3.py --model DIR --input_bin SHARD --write_tensors 1 --num_iterations 0 --batch_size 2
    --sequence_length 64 --device cpu."""
    root = tmp_path_factory.mktemp("qwen3_hf")
    hf = tiny_hf_qwen3(2, False, vocab_size=520)
    hf.save_pretrained(root / "tiny-qwen3")
    shutil.copyfile(eot_tokenizer / "tokenizer.json", root / "tiny-qwen3" / "tokenizer.json")
    out = root / "run"
    out.mkdir()
    run([PYTHON, REPO / "train_qwen3.py", "--model", root / "tiny-qwen3", "--input_bin", eot_shards[1],
         "--write_tensors", 1, "--num_iterations", 0, "--batch_size", 2, "--sequence_length", 64, "--device", "cpu"],
        cwd=out, env=ONE_THREAD)
    return root / "tiny-qwen3", out


def test_the_command_on_a_hugging_face_directory_writes_the_familys_files(hf_dir_run):
    hf_dir, out = hf_dir_run
    names = {p.name for p in out.iterdir()}
    assert {"qwen3_tiny-qwen3.bin", "qwen3_tiny-qwen3_bf16.bin", "qwen3_tiny-qwen3_debug_state.bin",
            "qwen3_tokenizer.bin"} <= names
    from transformers import Qwen3ForCausalLM

    hf = Qwen3ForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    ours = train_qwen3.read_model(out / "qwen3_tiny-qwen3.bin")
    expected = train_qwen3.hf_state_dict(train_qwen3.from_hf_model(hf, "hf"))
    for name, t in train_qwen3.hf_state_dict(ours).items():
        assert torch.equal(t, expected[name]), name


def test_the_debug_state_is_written_as_the_other_families(hf_dir_run):
    hf_dir, out = hf_dir_run
    B, T, V = 2, 64, 520
    model = train_qwen3.read_model(out / "qwen3_tiny-qwen3.bin")
    state = read_adamw_debug_state(out / "qwen3_tiny-qwen3_debug_state.bin", 20250429, B, T, V,
                                   sum(p.numel() for p in model.parameters()))
    assert state.x.max() < 513
    x_t = torch.from_numpy(state.x.astype(np.int64)).view(B, T)
    y_t = torch.from_numpy(state.y.astype(np.int64)).view(B, T)
    from transformers import Qwen3ForCausalLM

    hf = Qwen3ForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        assert np.abs(hf(x_t).logits.view(B * T, V).numpy() - state.logits).max() < 1e-5
    recomputed = F.cross_entropy(torch.from_numpy(state.logits.astype(np.float64)),
                                 torch.from_numpy(state.y.astype(np.int64)))
    assert abs(recomputed.item() - state.loss) < 1e-5
    # the gradients in file order are the model's own backward on the batch
    model.zero_grad()
    model(x_t, y_t)[1].backward()
    expected = torch.cat([g.reshape(-1) for g in train_qwen3.stacked(model, lambda p: p.grad)]).numpy()
    assert np.abs(state.grads - expected).max() <= 1e-5 * np.abs(expected).max()
    assert_reference_steps_recorded(state)


def test_the_tokenizer_file_holds_every_tokens_bytes_and_endoftext_as_bos_and_eot(hf_dir_run, eot_tokenizer):
    data = (hf_dir_run[1] / "qwen3_tokenizer.bin").read_bytes()
    h = np.frombuffer(data[:1024], dtype="<u4")
    assert list(h[:5]) == [20240328, 3, 513, 512, 512] and not h[5:].any()
    pieces, pos = [], 1024
    while pos < len(data):
        pieces.append(data[pos + 1 : pos + 1 + data[pos]])
        pos += 1 + data[pos]
    assert len(pieces) == 513 and pos == len(data) and pieces[512] == b"<|endoftext|>"
    text = "To be, or not to be: that is the question. Ünïcödé ✓\n\n"
    assert b"".join(pieces[i] for i in load_llama3_tokenizer(str(eot_tokenizer)).encode(text)).decode() == text


def test_dn_trains_with_muon_and_its_debug_state_names_muon(tmp_path, eot_tokenizer, eot_shards):
    run([PYTHON, REPO / "train_qwen3.py", "--model", "d1", "--tokenizer", eot_tokenizer, "--input_bin", eot_shards[1],
         "--batch_size", 2, "--sequence_length", 32, "--num_iterations", 4, "--learning_rate", 3e-3,
         "--optimizer", "muon", "--muon_lr", 0.02, "--debug_steps", 3, "--overfit_single_batch", 1,
         "--output_dir", tmp_path / "run", "--device", "cpu"], cwd=tmp_path, env=ONE_THREAD)
    losses = losses_from_log(tmp_path / "run" / "main.log")
    assert len(losses) == 4 and losses[-1] < losses[0]
    h = np.fromfile(tmp_path / "qwen3_d1_debug_state.bin", dtype="<i4", count=256)
    assert list(h[:5]) == [20250429, 3, 2, 32, 3] and h[12] == 1 and list(h[15:17]) == [1, 5]
    final = train_qwen3.read_model(tmp_path / "run" / "model_00000004.bin")
    assert final.config.attention_width == 128 and final.config.n_embd == 64
    assert (tmp_path / "qwen3_tokenizer.bin").is_file() and (tmp_path / "qwen3_d1_bf16.bin").is_file()


@pytest.mark.parametrize("args, message", [
    (["--model", "Qwen/Qwen3-0.6B"], "huggingface.co cannot be reached"),
    (["--model", "d1", "NO_TOKENIZER"], "cannot load the tokenizer of Qwen/Qwen3-0.6B"),
    (["--model", "d0"], "the depth must be at least 1"),
    (["--model", "d1", "--sequence_length", "2048"], "exceeds the model's block size 1024"),
    (["--model", "d1", "--input_bin", "GPT2_SHARD"], "not a llama-3 token shard (magic 20240520)"),
    (["--model", "d1", "--tokenizer", "/nonexistent"], "no such tokenizer.json"),
    (["--model", "missing.bin"], "missing.bin: cannot read: No such file"),
    (["--model", "SMALL_VOCAB_BIN"], "the tokenizer has 513 tokens, more than the model's vocab 300"),
])
def test_bad_input_gives_one_error_line(monkeypatch, capsys, tmp_path, eot_tokenizer, eot_shards, tinyshakespeare,
                                        args, message):
    """In process (main() is what the script runs): exit status 1 and one `error:` line on stderr, nothing else."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    if "SMALL_VOCAB_BIN" in args:
        small = train_qwen3.from_hf_model(tiny_hf_qwen3(2, False), "t")
        train_qwen3.write_model(small, tmp_path / "small.bin", "float32")
        capsys.readouterr()
    placeholders = {"GPT2_SHARD": str(tinyshakespeare[1]), "SMALL_VOCAB_BIN": str(tmp_path / "small.bin")}
    args = [placeholders.get(a, a) for a in args]
    own_tokenizer = "--tokenizer" in args or "NO_TOKENIZER" in args or args[1].startswith("Qwen/")
    tok = [] if own_tokenizer else ["--tokenizer", str(eot_tokenizer)]
    args = [a for a in args if a != "NO_TOKENIZER"]
    status = train_qwen3.main(["--input_bin", str(eot_shards[1]), "--num_iterations", "1", "--write_tensors", "0",
                               "--device", "cpu", *tok, *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_a_llama_directory_and_a_corrupt_file_are_refused_by_the_command_with_one_line(tmp_path, eot_tokenizer,
                                                                                        eot_shards):
    from transformers import LlamaConfig, LlamaForCausalLM

    LlamaForCausalLM(LlamaConfig(vocab_size=600, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, max_position_embeddings=64)).save_pretrained(tmp_path / "llama")
    (tmp_path / "bad.bin").write_bytes(np.zeros(512, dtype="<i4").tobytes())
    for model, message in [(tmp_path / "llama", "a 'llama' model, not Qwen3"), (tmp_path / "bad.bin", "wrong magic 0")]:
        proc = run([PYTHON, REPO / "train_qwen3.py", "--model", model, "--tokenizer", eot_tokenizer, "--input_bin",
                    eot_shards[1], "--num_iterations", 1, "--device", "cpu"], cwd=tmp_path, check=False, env=ONE_THREAD)
        assert message in assert_one_error_line(proc, alone=True)


def test_unknown_flag_gives_one_error_line(tmp_path):
    proc = run([PYTHON, REPO / "train_qwen3.py", "--bogus", "1"], cwd=tmp_path, check=False)
    assert "unrecognized arguments" in assert_one_error_line(proc, status=2, alone=True)
