"""C headers in llmc/ checked against Python references.

rand.h against torch's CPU generator (bit for bit), tokenizer.h against tiktoken, dataloader.h
against shards written with numpy. Each test compiles a small driver from dev/test/ with gcc.
torch runs in a subprocess with ATEN_CPU_CAPABILITY=default (see the note at the top of
llmc/rand.h): under AVX2/AVX512 torch's float normal_ uses Sleef and differs in the last bit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
CC = os.environ.get("CC", "gcc")
CFLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror", f"-I{REPO}"]


def build_driver(source: str, out_dir: Path) -> Path:
    """Compiles dev/test/<source> into out_dir and returns the binary's path."""
    exe = out_dir / Path(source).stem
    cmd = [CC, *CFLAGS, str(REPO / "dev" / "test" / source), "-o", str(exe), "-lm"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return exe


# ---------------------------------------------------------------------------- rand.h vs torch

TORCH_DUMP = r"""
import json, sys
import torch
assert torch.backends.cpu.get_cpu_capability() == "DEFAULT", torch.backends.cpu.get_cpu_capability()
out = sys.stdout.buffer
for case in json.loads(sys.stdin.read()):
    g = torch.Generator().manual_seed(case["seed"])
    for kind, n, a, b in case["ops"]:
        if kind == "n":
            t = torch.empty(n).normal_(a, b, generator=g)
        elif kind == "u":
            t = torch.empty(n).uniform_(a, b, generator=g)
        else:  # "d": float64 uniform, 53 bits of one 64-bit draw
            t = torch.empty(n, dtype=torch.float64).uniform_(generator=g)
        out.write(t.numpy().tobytes())
"""

Op = tuple[str, int, float, float]


def torch_dump(cases: list[tuple[int, list[Op]]]) -> bytes:
    """Runs torch on every case in one subprocess; returns the concatenated raw outputs."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    payload = json.dumps([{"seed": seed, "ops": ops} for seed, ops in cases])
    res = subprocess.run([sys.executable, "-c", TORCH_DUMP], input=payload.encode(), env=env,
                         capture_output=True, check=True)
    return res.stdout


def c_dump(exe: Path, seed: int, ops: list[Op]) -> bytes:
    args = [f"{kind}:{n}:{a!r}:{b!r}" for kind, n, a, b in ops]
    return subprocess.run([str(exe), str(seed), *args], capture_output=True, check=True).stdout


def op_nbytes(op: Op) -> int:
    return op[1] * (8 if op[0] == "d" else 4)


@pytest.fixture(scope="module")
def rand_dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_driver("rand_dump.c", tmp_path_factory.mktemp("rand"))


SIZES = list(range(1, 41)) + [1000, 4097]
SEEDS = [42, 1337]


def normal_cases(seed: int) -> list[tuple[int, list[Op]]]:
    return [(seed, [("n", n, 0.0, 0.02)]) for n in SIZES] + [(seed, [("n", n, -0.37, 1.7)]) for n in SIZES]


def uniform_cases(seed: int) -> list[tuple[int, list[Op]]]:
    return [(seed, [("u", n, -0.3, 0.7)]) for n in SIZES] + [(seed, [("u", n, 0.0, 1.0)]) for n in SIZES]


def sequence_cases(seed: int) -> list[tuple[int, list[Op]]]:
    # small normals leave a cached sample in the generator; it must carry across calls
    sequences: list[list[Op]] = [
        [("n", 1000, 0.0, 0.02), ("u", 1000, -1.0, 1.0), ("n", 1000, 0.0, 0.02)],
        [("n", 5, 0.1, 0.02), ("u", 7, 0.0, 1.0), ("n", 3, 1.0, 0.3), ("n", 33, 0.1, 0.02),
         ("u", 20, -0.5, 3.0), ("n", 1, 0.0, 1.0), ("n", 4097, 2.0, 0.5)],
        [("n", 1, 0.0, 1.0)] * 5 + [("u", 1, 0.0, 1.0), ("n", 17, 0.0, 1.0), ("n", 3, 0.0, 1.0)],
    ]
    return [(seed, ops) for ops in sequences]


RANDINT64_CASE: tuple[int, list[Op]] = (42, [("d", 64, 0.0, 1.0)])


def case_key(case: tuple[int, list[Op]]) -> str:
    return json.dumps(case)


@pytest.fixture(scope="module")
def torch_reference() -> dict[str, bytes]:
    """torch's output for every case of this module, computed in one subprocess."""
    cases = [RANDINT64_CASE]
    for seed in SEEDS:
        cases += normal_cases(seed) + uniform_cases(seed) + sequence_cases(seed)
    raw = torch_dump(cases)
    ref: dict[str, bytes] = {}
    offset = 0
    for case in cases:
        size = sum(op_nbytes(op) for op in case[1])
        ref[case_key(case)] = raw[offset:offset + size]
        offset += size
    assert offset == len(raw)
    return ref


def compare_cases(exe: Path, ref: dict[str, bytes], cases: list[tuple[int, list[Op]]]) -> list[str]:
    """Returns a description of every case where C and torch differ in any bit."""
    failures = []
    for seed, ops in cases:
        want = ref[case_key((seed, ops))]
        got = c_dump(exe, seed, ops)
        if got != want:
            a = np.frombuffer(got, np.uint8)
            b = np.frombuffer(want, np.uint8)
            first = int(np.argmax(a != b)) if len(a) == len(b) else -1
            failures.append(f"seed {seed} ops {ops}: first differing byte {first}, sizes {len(a)} vs {len(b)}")
    return failures


@pytest.mark.parametrize("seed", SEEDS)
def test_rand_normal_matches_torch_bit_for_bit(rand_dump: Path, torch_reference: dict[str, bytes], seed: int) -> None:
    assert compare_cases(rand_dump, torch_reference, normal_cases(seed)) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_rand_uniform_matches_torch_bit_for_bit(rand_dump: Path, torch_reference: dict[str, bytes], seed: int) -> None:
    assert compare_cases(rand_dump, torch_reference, uniform_cases(seed)) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_rand_call_sequence_on_one_generator_matches_torch(rand_dump: Path, torch_reference: dict[str, bytes],
                                                           seed: int) -> None:
    assert compare_cases(rand_dump, torch_reference, sequence_cases(seed)) == []


def test_rand_randint64_is_torchs_random64(rand_dump: Path, torch_reference: dict[str, bytes]) -> None:
    # torch's float64 uniform_ takes the low 53 bits of random64(), so it exposes the 64-bit draw
    want = np.frombuffer(torch_reference[case_key(RANDINT64_CASE)], np.float64)
    raw = subprocess.run([str(rand_dump), "42", "l:64"], capture_output=True, check=True).stdout
    draws = np.frombuffer(raw, np.uint64)
    got = (draws & np.uint64((1 << 53) - 1)).astype(np.float64) / float(1 << 53)
    assert np.array_equal(got, want)


# ---------------------------------------------------------------------------- tokenizer.h vs tiktoken

def tiktoken_gpt2():
    """tiktoken's gpt2 encoding, from TIKTOKEN_CACHE_DIR or the repo-relative ../shared cache seed."""
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        seed = REPO.parent / "shared" / "tiktoken_cache"
        if seed.is_dir():
            os.environ["TIKTOKEN_CACHE_DIR"] = str(seed)
    import tiktoken
    return tiktoken.get_encoding("gpt2")


def write_tokenizer_file(path: Path, pieces: list[bytes], eot: int) -> None:
    header = np.zeros(256, dtype="<u4")
    header[:4] = [20240328, 2, len(pieces), eot]
    body = b"".join(bytes([len(p)]) + p for p in pieces)
    path.write_bytes(header.tobytes() + body)


def test_tokenizer_decodes_every_gpt2_token_like_tiktoken(tmp_path: Path) -> None:
    enc = tiktoken_gpt2()
    pieces = [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
    assert len(pieces) == 50257
    tok_file = tmp_path / "gpt2_tokenizer.bin"
    write_tokenizer_file(tok_file, pieces, enc.eot_token)
    exe = build_driver("tokenizer_dump.c", tmp_path)
    out = subprocess.run([str(exe), str(tok_file)], capture_output=True, check=True).stdout
    vocab, eot = np.frombuffer(out[:8], "<u4")
    assert (vocab, eot) == (50257, 50256)
    decoded = []
    pos = 8
    for _ in range(vocab):
        n = int.from_bytes(out[pos:pos + 4], "little")
        decoded.append(out[pos + 4:pos + 4 + n])
        pos += 4 + n
    assert decoded == pieces
    assert out[pos:] == b"\x01"  # decoding id 50257 gives NULL


def test_tokenizer_rejects_a_truncated_file_with_one_line(tmp_path: Path) -> None:
    tok_file = tmp_path / "tok.bin"
    write_tokenizer_file(tok_file, [b"a", b"bc", b"def"], 2)
    tok_file.write_bytes(tok_file.read_bytes()[:-2])
    exe = build_driver("tokenizer_dump.c", tmp_path)
    res = subprocess.run([str(exe), str(tok_file)], capture_output=True, text=True)
    assert res.returncode == 1
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(f"error: {tok_file}: truncated")
