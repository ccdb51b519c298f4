"""pyllmc.GPT2 against train_gpt2.py's debug state (d2), plus views, sampling, checkpoints and bad input.

Tolerances (about 10x what was measured here: logits 7.7e-7, loss 0, gradients 8.7e-7 relative,
step losses 1.9e-6; the C trainer's test_gpt2.c uses 1e-4, 1e-5, 1e-3 relative and 1e-4):
    logits  max abs diff <= 1e-5          loss  abs diff <= 1e-5
    each of the 16 gradients  max abs diff <= 1e-5 * max |reference gradient|
    10 AdamW steps on the recorded batch: each loss within 2e-5 of the reference's
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from conftest import DEBUG_STATE_NNOISE, make

LOGITS_TOL, LOSS_TOL, GRAD_REL_TOL, STEP_LOSS_TOL = 1e-5, 1e-5, 1e-5, 2e-5


@pytest.fixture(scope="module")
def pyllmc():
    make("pyllmc")
    import pyllmc
    return pyllmc


@dataclass
class DebugState:
    x: np.ndarray
    y: np.ndarray
    logits: np.ndarray
    loss: float
    grads: np.ndarray
    losses: np.ndarray
    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    grad_clip: float


def read_debug_state(path: Path, num_parameters: int) -> DebugState:
    header = np.fromfile(path, dtype="<i4", count=256)
    assert header[0] == 20240327 and header[1] == 2
    B, T, nsteps = (int(v) for v in header[2:5])
    settings = header[5:11].view("<f4").astype(float)
    body = np.fromfile(path, dtype="<f4", offset=1024)
    ints = body.view("<i4")
    V = 50257
    o = 0
    x = ints[o:o + B * T].reshape(B, T).copy(); o += B * T
    y = ints[o:o + B * T].reshape(B, T).copy(); o += B * T
    logits = body[o:o + B * T * V].reshape(B, T, V); o += B * T * V
    loss = float(body[o]); o += 1
    grads = body[o:o + num_parameters]; o += num_parameters
    losses = body[o:o + nsteps]; o += nsteps
    o += int(header[DEBUG_STATE_NNOISE])  # the float32 noise of each step loss (test_gpt2's tolerance), not used here
    assert o == body.size
    return DebugState(x, y, logits, loss, grads, losses, *settings)


@pytest.fixture(scope="module")
def ref(pyllmc, d2_reference):
    model = pyllmc.GPT2.from_checkpoint(d2_reference / "gpt2_d2.bin")
    return read_debug_state(d2_reference / "gpt2_d2_debug_state.bin", model.num_parameters)


def test_forward_and_backward_match_the_reference_debug_state(pyllmc, d2_reference, ref):
    model = pyllmc.GPT2.from_checkpoint(d2_reference / "gpt2_d2.bin")
    logits, loss = model.forward(ref.x, ref.y)
    assert logits.shape == ref.logits.shape
    assert np.abs(logits - ref.logits).max() <= LOGITS_TOL
    assert abs(loss - ref.loss) <= LOSS_TOL
    model.zero_grad()
    model.backward()
    offset = 0
    for name, g in model.grads.items():
        r = ref.grads[offset:offset + g.size].reshape(g.shape)
        offset += g.size
        diff = float(np.abs(g - r).max())
        assert diff <= GRAD_REL_TOL * float(np.abs(r).max()), f"d{name}: max abs diff {diff:.3e}"
    assert offset == model.num_parameters


def test_ten_steps_match_the_reference_losses(pyllmc, d2_reference, ref):
    model = pyllmc.GPT2.from_checkpoint(d2_reference / "gpt2_d2.bin")
    for step, ref_loss in enumerate(ref.losses):
        _, loss = model.forward(ref.x, ref.y, return_logits=False)
        assert abs(loss - ref_loss) <= STEP_LOSS_TOL, f"step {step}: loss {loss:.6f} vs reference {ref_loss:.6f}"
        model.zero_grad()
        model.backward()
        model.step(ref.lr, ref.beta1, ref.beta2, ref.eps, ref.weight_decay, ref.grad_clip)
    assert model.t == len(ref.losses) == 10


def test_from_scratch_is_bit_identical_to_the_reference_init(pyllmc, d2_reference):
    # train_gpt2.py --model d2 --seed 42 initialised gpt2_d2.bin from scratch
    ours = pyllmc.GPT2.from_scratch("d2", seed=42)
    theirs = pyllmc.GPT2.from_checkpoint(d2_reference / "gpt2_d2.bin")
    assert np.array_equal(ours.params_flat, theirs.params_flat)
    assert not np.array_equal(ours.params_flat, pyllmc.GPT2.from_scratch("d2", seed=43).params_flat)


def test_bf16_checkpoint_loads_as_the_rounded_weights(pyllmc, d2_reference):
    fp32 = pyllmc.GPT2.from_checkpoint(d2_reference / "gpt2_d2.bin")
    bf16 = pyllmc.GPT2.from_checkpoint(d2_reference / "gpt2_d2_bf16.bin")
    assert bf16.config == fp32.config
    assert np.all(bf16.params_flat.view(np.uint32) & 0xFFFF == 0)
    assert np.abs(bf16.params_flat - fp32.params_flat).max() <= 2.0**-8 * np.abs(fp32.params_flat).max()


def test_save_writes_the_same_bytes_atomically(pyllmc, d2_reference, tmp_path):
    src = d2_reference / "gpt2_d2.bin"
    model = pyllmc.GPT2.from_checkpoint(src)
    out = tmp_path / "copy.bin"
    model.save(out)
    assert out.read_bytes() == src.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.bin"]  # no temporary left behind
    model.params["lnfb"][:] += 1.0
    model.save(out)  # overwrite
    assert np.array_equal(pyllmc.GPT2.from_checkpoint(out).params_flat, model.params_flat)


def test_params_and_grads_are_named_views_into_the_c_buffers(pyllmc, d2_reference, ref):
    model = pyllmc.GPT2.from_checkpoint(d2_reference / "gpt2_d2.bin")
    cfg = model.config
    assert list(model.params) == ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                  "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
    assert model.params["wte"].shape == (cfg.padded_vocab_size, cfg.channels)
    assert model.params["fcprojw"].shape == (cfg.num_layers, cfg.channels, 4 * cfg.channels)
    for name in model.params:
        assert np.shares_memory(model.params[name], model.params_flat)
        assert np.shares_memory(model.grads[name], model.grads_flat)
    logits0, _ = model.forward(ref.x[:1, :8])
    model.params["lnfb"][:] = 0.5  # a write through the view changes what C computes
    logits1, _ = model.forward(ref.x[:1, :8])
    assert not np.allclose(logits0, logits1)
    model.forward(ref.x, ref.y)
    model.zero_grad()
    model.backward()
    assert np.abs(model.grads["wte"]).max() > 0
    model.zero_grad()
    assert not model.grads_flat.any()


def test_backward_accumulates_and_loss_scale_scales(pyllmc, d2_reference, ref):
    model = pyllmc.GPT2.from_checkpoint(d2_reference / "gpt2_d2.bin")
    model.forward(ref.x, ref.y)
    model.zero_grad()
    model.backward()
    once = model.grads_flat.copy()
    model.backward(loss_scale=0.5)
    # g + 0.5 g rounds differently from 1.5 g where large terms cancel (wte: lm_head + encoder)
    np.testing.assert_allclose(model.grads_flat, 1.5 * once, rtol=1e-5, atol=1e-6 * np.abs(once).max())


def test_generate_greedy_follows_the_argmax_of_forward(pyllmc, d2_reference):
    model = pyllmc.GPT2.from_checkpoint(d2_reference / "gpt2_d2.bin")
    prompt = [50256, 464, 3290]
    out = model.generate(prompt, 6, temperature=0.0)
    assert out.dtype == np.int32 and list(out[:3]) == prompt and out.size == 9
    seq = list(prompt)
    for _ in range(6):
        logits, _ = model.forward(np.array([seq]))
        seq.append(int(np.argmax(logits[0, -1])))
    assert list(out) == seq
    assert list(model.generate(prompt, 6, temperature=1.0, top_k=1)) == seq


def test_generate_is_seeded(pyllmc, d2_reference):
    model = pyllmc.GPT2.from_checkpoint(d2_reference / "gpt2_d2.bin")
    a = model.generate([50256], 8, temperature=1.0, top_p=0.9, seed=7)
    b = model.generate([50256], 8, temperature=1.0, top_p=0.9, seed=7)
    c = model.generate([50256], 8, temperature=1.0, top_p=0.9, seed=8)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.min() >= 0 and a.max() < model.config.vocab_size


def test_training_after_generate_reallocates_cleanly(pyllmc, d2_reference, ref):
    model = pyllmc.GPT2.from_checkpoint(d2_reference / "gpt2_d2.bin")
    _, loss0 = model.forward(ref.x, ref.y, return_logits=False)
    out = model.generate(ref.x[0], 3, temperature=0.0)  # 66 > T=64 tokens of context: activations grow
    assert out.size == ref.x.shape[1] + 3
    with pytest.raises(RuntimeError, match="backward\\(\\) needs a forward"):
        model.backward()
    _, loss1 = model.forward(ref.x, ref.y, return_logits=False)
    assert loss1 == loss0


# ---------------------------------------------------------------------------- bad input

def test_bad_checkpoints_raise_naming_the_file(pyllmc, d2_reference, tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.bin: no such model checkpoint"):
        pyllmc.GPT2.from_checkpoint(tmp_path / "nope.bin")
    short = tmp_path / "short.bin"
    short.write_bytes(b"\x00" * 100)
    with pytest.raises(ValueError, match="short.bin: not a model checkpoint"):
        pyllmc.GPT2.from_checkpoint(short)
    data = (d2_reference / "gpt2_d2.bin").read_bytes()
    magic = tmp_path / "magic.bin"
    magic.write_bytes(b"\x01\x02\x03\x04" + data[4:])
    with pytest.raises(ValueError, match="magic.bin: not a model checkpoint file \\(magic"):
        pyllmc.GPT2.from_checkpoint(magic)
    truncated = tmp_path / "truncated.bin"
    truncated.write_bytes(data[:-4])
    with pytest.raises(ValueError, match="truncated.bin: model checkpoint size mismatch"):
        pyllmc.GPT2.from_checkpoint(truncated)


def test_c_core_errors_become_exceptions_not_exits(pyllmc, tmp_path):
    # straight to the C loader, past the Python checks: llmc_die must raise, not end the process
    from pyllmc._core import check_rc, ffi, lib
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"garbage")
    c = ffi.new("GPT2*")
    rc = lib.pyllmc_model_init_checkpoint(c, str(bad).encode())
    lib.pyllmc_model_discard(c)
    with pytest.raises(pyllmc.LlmcError, match="bad.bin: not a model checkpoint"):
        check_rc(rc)
    # and through the public API: a checkpoint cannot be renamed over a directory
    model = pyllmc.GPT2.from_scratch("d1", seed=1)
    (tmp_path / "adir").mkdir()
    with pytest.raises(pyllmc.LlmcError, match="adir"):
        model.save(tmp_path / "adir")
    assert not any(p.name.startswith("adir.tmp") for p in tmp_path.iterdir())
    with pytest.raises(FileNotFoundError, match="does not exist"):
        model.save(tmp_path / "missing" / "x.bin")


def test_bad_arguments_raise_before_reaching_c(pyllmc):
    model = pyllmc.GPT2.from_scratch("d1", seed=1)
    with pytest.raises(ValueError, match="idx: id 50257"):
        model.forward([[1, 50257]])
    with pytest.raises(ValueError, match="targets: id -3"):
        model.forward([[1, 2]], [[1, -3]])
    with pytest.raises(TypeError, match="integer token ids"):
        model.forward(np.zeros((1, 4), np.float32))
    with pytest.raises(ValueError, match="longer than the model's max sequence length"):
        model.forward(np.zeros((1, 1025), np.int32))
    with pytest.raises(ValueError, match="differs from idx"):
        model.forward([[1, 2]], [[1, 2, 3]])
    with pytest.raises(RuntimeError, match="needs a forward"):
        model.backward()
    with pytest.raises(ValueError, match="top_p"):
        model.generate([1], 3, top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        model.generate([1], 3, temperature=-1.0)
    with pytest.raises(ValueError, match="non-empty"):
        model.generate([], 3)
    with pytest.raises(ValueError, match="lr"):
        model.step(lr=float("nan"))
    with pytest.raises(ValueError, match="model descriptor 'd0'"):
        pyllmc.GPT2.from_scratch("d0")
    with pytest.raises(ValueError, match="not a multiple of num_heads"):
        pyllmc.GPT2.from_scratch(pyllmc.GPT2Config(num_layers=1, num_heads=3, channels=64))
    with pytest.raises(TypeError, match="from_checkpoint"):
        pyllmc.GPT2()
