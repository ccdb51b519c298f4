"""The C GPT-2 BPE encoder (llmc/bpe.h via ./encode) gives exactly tiktoken's ids."""
from __future__ import annotations

import os
import random
import struct
import subprocess
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if "TIKTOKEN_CACHE_DIR" not in os.environ and (REPO.parent / "shared" / "tiktoken_cache").is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(REPO.parent / "shared" / "tiktoken_cache")

import tiktoken  # noqa: E402  (after the cache directory is set)

from conftest import assert_one_error_line, make, run  # noqa: E402

ENC = tiktoken.get_encoding("gpt2")


def corpus_path() -> Path:
    for p in (REPO / "dev/data/tinyshakespeare/tiny_shakespeare.txt", REPO.parent / "shared/data/tinyshakespeare/input.txt"):
        if p.is_file():
            return p
    raise AssertionError("tinyshakespeare text not found: run `python dev/data/tinyshakespeare.py` (make data)")


@pytest.fixture(scope="module")
def encode_bin() -> Path:
    make("encode")
    return REPO / "encode"


@pytest.fixture(scope="module")
def bpe_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bpe") / "gpt2_bpe.bin"
    subprocess.run([str(REPO / ".venv/bin/python") if (REPO / ".venv/bin/python").exists() else "python",
                    str(REPO / "dev/write_bpe.py"), "-o", str(path)], check=True, capture_output=True)
    return path


def c_encode(encode_bin: Path, bpe_file: Path, data: bytes, *flags: str) -> list[int]:
    out = subprocess.run([str(encode_bin), "-b", str(bpe_file), *flags], input=data, capture_output=True, check=True).stdout
    assert out.endswith(b"\n") and out.count(b"\n") == 1, "ids must be on one line"
    return [int(x) for x in out.split()]


def c_decode(encode_bin: Path, bpe_file: Path, ids: list[int]) -> bytes:
    return subprocess.run([str(encode_bin), "-b", str(bpe_file), "-d"], input=" ".join(map(str, ids)).encode(),
                          capture_output=True, check=True).stdout


TRICKY = [
    "Hello world",
    "",
    "naïve café, Straße, Ελληνικά, русский текст, עברית, العربية",
    "1234567890 3.14159 12,345 ١٢٣ Ⅻ ½ 2nd 10x",
    "it's they'll we've you're I'm he'd don't IT'S THEY'LL She'S 'tis ''s '' 'x",
    "  two leading, trailing   \n\n\n\t\t tabs\t\n  \r\n mixed \u00a0nbsp\u3000ideographic  ",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flags 🇫🇷🇯🇵 !!!",
    "中文文本，日本語のテキスト、한국어 텍스트。",
    "combining e\u0301 a\u0308 n\u0303 Z\u0335\u0321\u0327 and zero\u200bwidth",
    "<|endoftext|> is ordinary text here",
    "x = f(a, b) -> {'k': [1, 2]}  # code!\n    return None\n",
    " ",
    "\n",
    "   ",
    "a\n\nb",
    "trailing space ",
]


def test_encode_matches_tiktoken_on_tinyshakespeare(encode_bin: Path, bpe_file: Path) -> None:
    text = corpus_path().read_text(encoding="utf-8")
    assert c_encode(encode_bin, bpe_file, text.encode()) == ENC.encode_ordinary(text)


@pytest.mark.parametrize("text", TRICKY)
def test_encode_matches_tiktoken_on_tricky_text(encode_bin: Path, bpe_file: Path, text: str) -> None:
    assert c_encode(encode_bin, bpe_file, text.encode()) == ENC.encode_ordinary(text)


def test_encode_matches_tiktoken_on_random_unicode(encode_bin: Path, bpe_file: Path) -> None:
    rng = random.Random(1234)
    assigned = [cp for cp in range(0x30000) if unicodedata.category(chr(cp)) not in ("Cn", "Cs")]
    pool = list(" \t\n  'sdtmlvreS09aZ!.,-=") + ["'s", "'ll", "\u00a0", "\u0301", "é", "日本", "😀", "١", "½"]
    for _ in range(60):
        text = "".join(rng.choice(pool) if rng.random() < 0.6 else chr(rng.choice(assigned))
                       for _ in range(rng.randint(1, 80)))
        assert c_encode(encode_bin, bpe_file, text.encode()) == ENC.encode_ordinary(text), repr(text)


@pytest.mark.parametrize("text", ["a" * 1000, "ab" * 600, "=" * 777, " " * 500 + "x", "\n" * 300,
                                  "aaaa" * 50 + "bbbb" * 50, "Supercalifragilistic" * 40])
def test_long_pieces_match_tiktoken(encode_bin: Path, bpe_file: Path, text: str) -> None:
    # pieces over 128 bytes take the linked-list + heap merge path
    assert c_encode(encode_bin, bpe_file, text.encode()) == ENC.encode_ordinary(text)


def test_allow_special_turns_endoftext_into_eot(encode_bin: Path, bpe_file: Path) -> None:
    text = "first doc  <|endoftext|>second<|endoftext|><|endoftext|> third "
    assert c_encode(encode_bin, bpe_file, text.encode(), "--allow-special") == ENC.encode(text, allowed_special="all")
    assert c_encode(encode_bin, bpe_file, text.encode()) == ENC.encode_ordinary(text)


def test_decode_round_trips_text_and_invalid_utf8(encode_bin: Path, bpe_file: Path) -> None:
    for data in ["naïve 😀 中文 it's  \n".encode(), b"ok \xff\xfe bad \xc3 cut \xed\xa0\x80 surrogate \xf0\x9f\x98"]:
        assert c_decode(encode_bin, bpe_file, c_encode(encode_bin, bpe_file, data)) == data


def test_decode_with_llmc_tokenizer_file_matches(encode_bin: Path, bpe_file: Path, tmp_path: Path) -> None:
    # gpt2_tokenizer.bin (llm.c format, version 2), decoded through llmc/tokenizer.h
    pieces = [ENC.decode_single_token_bytes(i) for i in range(ENC.n_vocab)]
    header = struct.pack("<256I", 20240328, 2, len(pieces), ENC.eot_token, *([0] * 252))
    tok = tmp_path / "gpt2_tokenizer.bin"
    tok.write_bytes(header + b"".join(bytes([len(p)]) + p for p in pieces))
    data = "naïve 😀 中文 it's\x00  \n".encode() + b"raw \xff\xfe"
    ids = c_encode(encode_bin, bpe_file, data) + [ENC.eot_token]
    out = subprocess.run([str(encode_bin), "-d", "-t", str(tok)], input=" ".join(map(str, ids)).encode(),
                         capture_output=True, check=True).stdout
    assert out == data + b"<|endoftext|>" == c_decode(encode_bin, bpe_file, ids)
    assert "not found" in run_fail([str(encode_bin), "-d", "-t", str(tmp_path / "none.bin")], b"1")


def test_invalid_utf8_bytes_are_single_other_characters(encode_bin: Path, bpe_file: Path) -> None:
    # llmc's documented rule: each invalid byte is one "other" character (like punctuation)
    byte_tok = {bytes([b]): r for r, b in ((ENC._mergeable_ranks[bytes([b])], b) for b in range(256))}
    ids = c_encode(encode_bin, bpe_file, b"hello \xff world")
    assert ids == ENC.encode_ordinary("hello") + [byte_tok[b" "], byte_tok[b"\xff"]] + ENC.encode_ordinary(" world")
    ids = c_encode(encode_bin, bpe_file, b"abc\xffdef")
    assert ids == ENC.encode_ordinary("abc") + [byte_tok[b"\xff"]] + ENC.encode_ordinary("def")


def test_empty_input_prints_empty_line(encode_bin: Path, bpe_file: Path) -> None:
    out = subprocess.run([str(encode_bin), "-b", str(bpe_file)], input=b"", capture_output=True, check=True).stdout
    assert out == b"\n"


def run_fail(args: list[str], stdin: bytes = b"") -> str:
    """The error line of a run that must fail with exit 1 and print only that line."""
    return assert_one_error_line(run(args, check=False, input=stdin), alone=True)


def test_missing_bpe_file_says_how_to_create_it(encode_bin: Path, tmp_path: Path) -> None:
    line = run_fail([str(encode_bin), "-b", str(tmp_path / "nope.bin")], b"hi")
    assert "nope.bin" in line and "python dev/write_bpe.py" in line


def test_corrupt_bpe_files_fail_with_one_line(encode_bin: Path, bpe_file: Path, tmp_path: Path) -> None:
    good = bpe_file.read_bytes()
    header = list(struct.unpack("<256i", good[:1024]))
    cases: dict[str, tuple[bytes, str]] = {}
    cases["magic"] = (struct.pack("<i", 20240328) + good[4:], "magic")
    cases["version"] = (good[:4] + struct.pack("<i", 9) + good[8:], "version")
    cases["truncated"] = (good[:len(good) // 2], "size")
    cases["short"] = (good[:100], "too short")
    bad = header.copy()
    bad[5] = 300
    cases["max_len"] = (struct.pack("<256i", *bad) + good[1024:], "max_len")
    bad = header.copy()
    bad[3] = 5
    cases["eot"] = (struct.pack("<256i", *bad) + good[1024:], "eot_token")
    body = bytearray(good)
    body[1024] = 0  # first token length 0
    cases["length"] = (bytes(body), "length")
    for name, (data, needle) in cases.items():
        p = tmp_path / f"{name}.bin"
        p.write_bytes(data)
        line = run_fail([str(encode_bin), "-b", str(p)], b"hi")
        assert str(p) in line and needle in line, (name, line)


def test_decode_rejects_bad_ids(encode_bin: Path, bpe_file: Path) -> None:
    assert "out of range" in run_fail([str(encode_bin), "-b", str(bpe_file), "-d"], b"15496 50257")
    assert "not a token id" in run_fail([str(encode_bin), "-b", str(bpe_file), "-d"], b"15496 abc")


def test_unknown_flag_is_one_error_line(encode_bin: Path) -> None:
    assert "unknown argument" in run_fail([str(encode_bin), "--bogus"])
