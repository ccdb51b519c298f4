"""C headers in llmc/ checked against Python references.

rand.h against torch's CPU generator (bit for bit), tokenizer.h against tiktoken, dataloader.h
against shards written with numpy and the dev/data writers. Each test compiles a small driver
from dev/test/ with gcc. torch runs in a subprocess under ATEN_CPU_CAPABILITY=default and =avx2
(torch's two normal_ kernels, see the top of llmc/rand.h); the C driver gets the same environment
and must pick the same kernel. On a CPU without AVX2 both runs use the scalar kernel.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
CC = os.environ.get("CC", "gcc")
CFLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror", f"-I{REPO}"]


def build_driver(source: str, out_dir: Path, extra_flags: list[str] | None = None) -> Path:
    """Compiles dev/test/<source> into out_dir and returns the binary's path."""
    exe = out_dir / Path(source).stem
    cmd = [CC, *CFLAGS, *(extra_flags or []), str(REPO / "dev" / "test" / source), "-o", str(exe), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"building {source} failed:\n{res.stderr}")
    return exe


# ---------------------------------------------------------------------------- rand.h vs torch

TORCH_DUMP = r"""
import json, sys
import torch
out = sys.stdout.buffer
out.write(torch.backends.cpu.get_cpu_capability().ljust(16).encode())
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


CAPABILITIES = ["default", "avx2"]


def capability_env(capability: str) -> dict[str, str]:
    return dict(os.environ, ATEN_CPU_CAPABILITY=capability)


def torch_dump(cases: list[tuple[int, list[Op]]], capability: str) -> tuple[str, bytes]:
    """Runs torch on every case in one subprocess; returns its CPU capability and the raw outputs."""
    payload = json.dumps([{"seed": seed, "ops": ops} for seed, ops in cases])
    res = subprocess.run([sys.executable, "-c", TORCH_DUMP], input=payload.encode(), env=capability_env(capability),
                         capture_output=True, check=True)
    return res.stdout[:16].decode().strip(), res.stdout[16:]


def op_nbytes(op: Op) -> int:
    return op[1] * (8 if op[0] == "d" else 4)


@pytest.fixture(scope="module", params=["O2", "O3-native"])
def rand_dump(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver built plainly and with the trainers' flags (-O3 -march=native: FMA contraction on)."""
    extra = ["-O3", "-march=native", "-ffp-contract=fast"] if request.param == "O3-native" else []
    return build_driver("rand_dump.c", tmp_path_factory.mktemp(f"rand_{request.param}"), extra)


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


_TORCH_REFERENCE_CACHE: dict[str, tuple[str, str, dict[str, bytes]]] = {}


@pytest.fixture(params=CAPABILITIES)
def torch_reference(request: pytest.FixtureRequest) -> tuple[str, str, dict[str, bytes]]:
    """(ATEN_CPU_CAPABILITY, torch's capability, torch's output for every case); torch runs once per capability."""
    if not _TORCH_REFERENCE_CACHE:
        # both torch runs at once: most of their time is importing torch
        with ThreadPoolExecutor(len(CAPABILITIES)) as pool:
            for capability, result in zip(CAPABILITIES, pool.map(compute_torch_reference, CAPABILITIES)):
                _TORCH_REFERENCE_CACHE[capability] = result
    return _TORCH_REFERENCE_CACHE[request.param]


def compute_torch_reference(capability: str) -> tuple[str, str, dict[str, bytes]]:
    cases = [RANDINT64_CASE]
    for seed in SEEDS:
        cases += normal_cases(seed) + uniform_cases(seed) + sequence_cases(seed)
    torch_capability, raw = torch_dump(cases, capability)
    ref: dict[str, bytes] = {}
    offset = 0
    for case in cases:
        size = sum(op_nbytes(op) for op in case[1])
        ref[case_key(case)] = raw[offset:offset + size]
        offset += size
    assert offset == len(raw)
    return capability, torch_capability, ref


Reference = tuple[str, str, dict[str, bytes]]


def compare_cases(exe: Path, reference: Reference, cases: list[tuple[int, list[Op]]]) -> list[str]:
    """Returns a description of every case where C and torch differ in any bit (one C process for all)."""
    capability, _, ref = reference
    args = ["0"]
    for seed, ops in cases:
        args += [f"s:{seed}"] + [f"{kind}:{n}:{a!r}:{b!r}" for kind, n, a, b in ops]
    got_all = subprocess.run([str(exe), *args], capture_output=True, check=True, env=capability_env(capability)).stdout
    failures = []
    offset = 0
    for seed, ops in cases:
        want = ref[case_key((seed, ops))]
        got = got_all[offset:offset + len(want)]
        offset += len(want)
        if got != want:
            a = np.frombuffer(got, np.uint8)
            b = np.frombuffer(want, np.uint8)
            first = int(np.argmax(a != b)) if len(a) == len(b) else -1
            failures.append(f"seed {seed} ops {ops}: first differing byte {first}, sizes {len(a)} vs {len(b)}")
    assert offset == len(got_all), "the C driver wrote more than torch"
    return failures


def test_rand_picks_the_same_normal_kernel_as_torch(rand_dump: Path, torch_reference: Reference) -> None:
    capability, torch_capability, _ = torch_reference
    raw = subprocess.run([str(rand_dump), "1", "k:0"], capture_output=True, check=True,
                         env=capability_env(capability)).stdout
    c_vectorized = int(np.frombuffer(raw, "<i4")[0])
    assert c_vectorized == (1 if torch_capability in ("AVX2", "AVX512") else 0), torch_capability
    if capability == "default":
        assert torch_capability == "DEFAULT"


@pytest.mark.parametrize("seed", SEEDS)
def test_rand_normal_matches_torch_bit_for_bit(rand_dump: Path, torch_reference: Reference, seed: int) -> None:
    assert compare_cases(rand_dump, torch_reference, normal_cases(seed)) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_rand_uniform_matches_torch_bit_for_bit(rand_dump: Path, torch_reference: Reference, seed: int) -> None:
    assert compare_cases(rand_dump, torch_reference, uniform_cases(seed)) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_rand_call_sequence_on_one_generator_matches_torch(rand_dump: Path, torch_reference: Reference,
                                                           seed: int) -> None:
    assert compare_cases(rand_dump, torch_reference, sequence_cases(seed)) == []


def test_rand_randint64_is_torchs_random64(rand_dump: Path, torch_reference: Reference) -> None:
    # torch's float64 uniform_ takes the low 53 bits of random64(), so it exposes the 64-bit draw
    want = np.frombuffer(torch_reference[2][case_key(RANDINT64_CASE)], np.float64)
    raw = subprocess.run([str(rand_dump), "42", "l:64"], capture_output=True, check=True).stdout
    draws = np.frombuffer(raw, np.uint64)
    got = (draws & np.uint64((1 << 53) - 1)).astype(np.float64) / float(1 << 53)
    assert np.array_equal(got, want)


# ---------------------------------------------------------------------------- tokenizer.h vs tiktoken

def tiktoken_gpt2() -> Any:
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


# ---------------------------------------------------------------------------- dataloader.h vs numpy

def write_shard(path: Path, tokens: np.ndarray) -> None:
    """A GPT-2 token shard written directly with numpy: int32 header[256], then uint16 tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    path.write_bytes(header.tobytes() + tokens.astype("<u2").tobytes())


@pytest.fixture(scope="module")
def dataloader_dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_driver("dataloader_dump.c", tmp_path_factory.mktemp("dataloader"))


def read_batches(exe: Path, pattern: str, B: int, T: int, rank: int, nproc: int, shuffle: int,
                 nbatches: int, vocab: int = 50257) -> list[tuple[np.ndarray, np.ndarray, int, int]]:
    args = [str(exe), pattern, str(B), str(T), str(rank), str(nproc), str(shuffle), str(vocab), str(nbatches)]
    raw = subprocess.run(args, capture_output=True, check=True).stdout
    per = 2 * B * T * 4 + 16
    assert len(raw) == per * nbatches
    out = []
    for b in range(nbatches):
        chunk = raw[b * per:(b + 1) * per]
        x = np.frombuffer(chunk[:B * T * 4], "<i4").reshape(B, T)
        y = np.frombuffer(chunk[B * T * 4:2 * B * T * 4], "<i4").reshape(B, T)
        shard, sample = np.frombuffer(chunk[2 * B * T * 4:], "<u8")
        out.append((x, y, int(shard), int(sample)))
    return out


def expected_batches(shards: list[np.ndarray], B: int, T: int, rank: int, nproc: int,
                     nbatches: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The reading rule of llmc/dataloader.h without shuffling, written out in numpy."""
    out = []
    shard, pos = 0, 0
    step = nproc * B * T
    while len(out) < nbatches:
        toks = shards[shard]
        if pos + step + 1 > len(toks):
            shard, pos = (shard + 1) % len(shards), 0
            continue
        buf = toks[pos + rank * B * T: pos + rank * B * T + B * T + 1].astype(np.int32)
        out.append((buf[:-1].reshape(B, T), buf[1:].reshape(B, T)))
        pos += step
    return out


@pytest.mark.parametrize("nproc", [1, 2, 3])
def test_dataloader_matches_the_numpy_reading_rule(dataloader_dump: Path, tmp_path: Path, nproc: int) -> None:
    rng = np.random.default_rng(0)
    shards = [rng.integers(0, 50257, size=n) for n in (1000, 777, 1500)]
    for i, toks in enumerate(shards):
        write_shard(tmp_path / f"data_{i:06d}.bin", toks)
    B, T, nbatches = 3, 8, 40
    for rank in range(nproc):
        got = read_batches(dataloader_dump, str(tmp_path / "data_*.bin"), B, T, rank, nproc, 0, nbatches)
        want = expected_batches(shards, B, T, rank, nproc, nbatches)
        for (x, y, _, _), (wx, wy) in zip(got, want):
            assert np.array_equal(x, wx) and np.array_equal(y, wy)


def test_dataloader_shuffled_ranks_tile_the_single_process_batch(dataloader_dump: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for i, n in enumerate((900, 1300)):
        write_shard(tmp_path / f"train_{i}.bin", rng.integers(0, 50257, size=n))
    pattern = str(tmp_path / "train_*.bin")
    one = read_batches(dataloader_dump, pattern, 4, 16, 0, 1, 1, 60)
    r0 = read_batches(dataloader_dump, pattern, 2, 16, 0, 2, 1, 60)
    r1 = read_batches(dataloader_dump, pattern, 2, 16, 1, 2, 1, 60)
    for (x, y, shard, sample), (x0, y0, s0, p0), (x1, y1, s1, p1) in zip(one, r0, r1):
        assert np.array_equal(x, np.concatenate([x0, x1])) and np.array_equal(y, np.concatenate([y0, y1]))
        assert (shard, sample) == (s0, p0) == (s1, p1)


def test_dataloader_reads_shards_written_by_dev_data(dataloader_dump: Path, tmp_path: Path) -> None:
    from pyllmc.token_shards import write_datafile

    toks = np.arange(1, 300) % 50257
    write_datafile(tmp_path / "written_val_000000.bin", toks)
    (x, y, _, _), = read_batches(dataloader_dump, str(tmp_path / "written_val_*.bin"), 2, 10, 0, 1, 0, 1)
    assert np.array_equal(x.ravel(), toks[:20]) and np.array_equal(y.ravel(), toks[1:21])


def test_dataloader_bad_token_is_one_error_line(dataloader_dump: Path, tmp_path: Path) -> None:
    toks = np.zeros(200, dtype=np.int64)
    toks[37] = 60000
    path = tmp_path / "bad_000.bin"
    write_shard(path, toks)
    res = subprocess.run([str(dataloader_dump), str(path), "2", "8", "0", "1", "0", "50257", "5"],
                         capture_output=True, text=True)
    assert res.returncode == 1
    assert res.stderr == f"error: {path}: token id 60000 at position 37 >= vocab size 50257\n"


# ---------------------------------------------------------------------------- EvalLoader vs a Python-written file

def eval_examples(count: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    examples = []
    for _ in range(count):
        ctx = rng.integers(0, 50257, size=int(rng.integers(1, 12))).tolist()
        endings = [rng.integers(0, 50257, size=int(rng.integers(1, 6))).tolist() for _ in range(4)]
        examples.append({"label": int(rng.integers(0, 4)), "ctx_tokens": ctx, "ending_tokens": endings})
    return examples


def test_evalloader_reads_the_dev_data_eval_format(dataloader_dump: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "dev" / "data"))
    try:
        from data_common import write_evalfile
    finally:
        sys.path.pop(0)
    examples = eval_examples(7, 3)
    path = tmp_path / "hellaswag_val.bin"
    write_evalfile(path, examples)
    B, T, nproc = 8, 20, 2
    per_rank = -(-len(examples) // nproc)
    for rank in range(nproc):
        raw = subprocess.run([str(dataloader_dump), "--eval", str(path), str(B), str(T), str(rank), str(nproc)],
                             capture_output=True, check=True).stdout
        num_batches = int(np.frombuffer(raw[:4], "<i4")[0])
        assert num_batches == -(-per_rank // (B // 4))
        mine = examples[rank * per_rank:(rank + 1) * per_rank]
        pos = 4
        seen = 0
        for _ in range(num_batches):
            count = int(np.frombuffer(raw[pos:pos + 4], "<i4")[0])
            x = np.frombuffer(raw[pos + 4:pos + 4 + B * T * 4], "<i4").reshape(B, T)
            y = np.frombuffer(raw[pos + 4 + B * T * 4:pos + 4 + 2 * B * T * 4], "<i4").reshape(B, T)
            m = np.frombuffer(raw[pos + 4 + 2 * B * T * 4:pos + 4 + 2 * B * T * 4 + B * T], np.uint8).reshape(B, T)
            pos += 4 + 2 * B * T * 4 + B * T
            assert count == min(B // 4, len(mine) - seen)
            for e in range(count):
                ex = mine[seen + e]
                for c, ending in enumerate(ex["ending_tokens"]):
                    row = 4 * e + c
                    seq = ex["ctx_tokens"] + ending
                    n, k = len(seq), len(ex["ctx_tokens"])
                    assert x[row, :n].tolist() == seq and not x[row, n:].any()
                    assert y[row, :n - 1].tolist() == seq[1:]
                    assert np.nonzero(m[row])[0].tolist() == list(range(k - 1, n - 1))
            assert not m[4 * count:].any()
            seen += count
        assert seen == len(mine) and pos == len(raw)


# ---------------------------------------------------------------------------- corrupted files never crash

def assert_clean_outcome(res: subprocess.CompletedProcess, path: Path, what: str) -> None:
    """Exit 0, or exit 1 with exactly one 'error: <path>: ...' line: never a crash or a silent garble."""
    assert res.returncode in (0, 1), f"{what}: exit {res.returncode}, stderr {res.stderr!r}"
    if res.returncode == 1:
        assert res.stderr.count("\n") == 1 and res.stderr.startswith(f"error: {path}: "), f"{what}: {res.stderr!r}"


def corruptions(data: bytes, rng: np.random.Generator, trials: int, hot: int) -> list[tuple[str, bytes]]:
    """Random byte flips (half of them in the first `hot` bytes, where the sizes live) and truncations."""
    out = []
    for t in range(trials):
        buf = bytearray(data)
        if t % 3 == 2:
            cut = int(rng.integers(0, len(buf)))
            out.append((f"truncated to {cut}", bytes(buf[:cut])))
            continue
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(0, hot if rng.random() < 0.5 else len(buf)))
            buf[pos] = int(rng.integers(0, 256))
        out.append(("flipped", bytes(buf)))
    return out


def test_corrupted_tokenizer_files_fail_cleanly(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    pieces = [bytes(rng.integers(0, 256, size=int(rng.integers(1, 9))).astype(np.uint8)) for _ in range(300)]
    good = tmp_path / "good.bin"
    write_tokenizer_file(good, pieces, 299)
    exe = build_driver("tokenizer_dump.c", tmp_path)
    path = tmp_path / "tok.bin"
    for what, data in corruptions(good.read_bytes(), rng, 90, 1024 + 64):
        path.write_bytes(data)
        res = subprocess.run([str(exe), str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert_clean_outcome(res, path, what)


def test_corrupted_shards_fail_cleanly(dataloader_dump: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    good = tmp_path / "good.bin"
    write_shard(good, rng.integers(0, 50257, size=400))
    path = tmp_path / "shard_000.bin"
    for what, data in corruptions(good.read_bytes(), rng, 60, 16):
        path.write_bytes(data)
        res = subprocess.run([str(dataloader_dump), str(path), "2", "8", "0", "1", "1", "50257", "30"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert_clean_outcome(res, path, what)


def test_corrupted_eval_files_fail_cleanly(dataloader_dump: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "dev" / "data"))
    try:
        from data_common import write_evalfile
    finally:
        sys.path.pop(0)
    good = tmp_path / "good.bin"
    write_evalfile(good, eval_examples(6, 13))
    rng = np.random.default_rng(13)
    path = tmp_path / "eval.bin"
    for what, data in corruptions(good.read_bytes(), rng, 90, 1024 + 40):
        path.write_bytes(data)
        res = subprocess.run([str(dataloader_dump), "--eval", str(path), "8", "24", "0", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert_clean_outcome(res, path, what)
