"""Qwen3 text prompts in C: `./generate -e <qwen3 model> -p TEXT` encodes TEXT with llmc/bpe.h's Qwen pattern (Llama 3's
split, but every number a piece of its own; ranks = token ids of the tokenizer file, no BOS) and must give exactly the
ids of the `tokenizers` library on a tokenizer.json in the form of Qwen3's: an <|endoftext|> test tokenizer
(dev/data/make_test_tokenizer.py --delimiter endoftext, trained on Tiny Shakespeare and lines of numbers, so that its
vocabulary has tokens of two and three digits, which Llama 3's split would produce and Qwen's never does) given Qwen's
pre-tokenizer and its NFC normalizer. The texts are in NFC, as llmc/bpe.h says it needs (it does not normalise)."""

from __future__ import annotations

import random
import sys
import unicodedata
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import PYTHON, REPO, assert_one_error_line, make, run, tinyshakespeare_text  # noqa: E402
# generate(model, *flags): ./generate -e MODEL -t TOKENIZER FLAGS, one thread; prompt_ids: the --print-ids lines
from test_llama3_encode import TEXTS as LLAMA3_TEXTS, generate, prompt_ids  # noqa: E402

from pyllmc.llama3_tokenizer import LlamaTokenizer, load_llama3_tokenizer  # noqa: E402

# Qwen2's and Qwen3's pre-tokenizer split pattern (their tokenizer.json): Llama 3's with \p{N} for \p{N}{1,3}
QWEN_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                      r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Llama 3's texts (scripts, contractions, whitespace with and without \r\n, long pieces), and numbers in every place
TEXTS = [*LLAMA3_TEXTS,
         "2024-11-29 12:35:07 UTC, pi = 3.14159265358979, 1e-10, 0x1F, v1.2.3",
         "digits 0 12 345 6789 01234 and 98765432109876543210",
         "x1y22z333 a1b2c3 1a 22bb 333ccc",
         "numbers in other scripts: ١٢٣٤٥ ४५६ 一二三 ½ ² Ⅻ ①②",
         " 12\n34\r\n\r\n  56  \t78\u00a090\n"]


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory, tinyshakespeare) -> tuple[Path, Path, LlamaTokenizer]:
    """(model file, tokenizer file, the tokenizers-library tokenizer): a small random Qwen3 model with a context of
    4096 (head_dim 12, not C / NH), and the test tokenizer in Qwen's form, written by train_qwen3.py's writers."""
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers

    make("generate")
    import train_qwen3 as ref

    out = tmp_path_factory.mktemp("qwen3_encode")
    rng = random.Random(7)
    numbers = "\n\n".join(" ".join(str(rng.choice([rng.randint(0, 99), rng.randint(100, 999)])) for _ in range(20))
                          for _ in range(1500))
    corpus = out / "corpus.txt"
    corpus.write_text(tinyshakespeare_text().read_text(encoding="utf-8")[:100_000] + "\n\n" + numbers, encoding="utf-8")
    run([PYTHON, REPO / "dev" / "data" / "make_test_tokenizer.py", "--delimiter", "endoftext", "--corpus", corpus,
         "--out_dir", out / "llama_split"])
    tok = Tokenizer.from_file(str(out / "llama_split" / "tokenizer.json"))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    (out / "tok").mkdir()
    tok.save(str(out / "tok" / "tokenizer.json"))
    qwen_tok = load_llama3_tokenizer(str(out / "tok"))
    ref.write_tokenizer(qwen_tok, out / "qwen3_tokenizer.bin")
    cfg = ref.Qwen3Config(block_size=4096, vocab_size=qwen_tok.vocab_size, n_layer=1, n_head=2, n_kv_head=1, n_embd=32,
                          head_dim=12, ffn_hidden=48)
    model = ref.Qwen3(cfg)
    model.init_weights(3)
    ref.FILES.write_model(model, out / "qwen3.bin", "float32")
    return out / "qwen3.bin", out / "qwen3_tokenizer.bin", qwen_tok


def test_the_test_tokenizer_has_qwens_digit_split_and_numbers_llama_3s_would_make(qwen3) -> None:
    tok = qwen3[2]
    assert tok.bos == tok.eot  # <|endoftext|>, no BOS of its own
    pieces = tok.token_bytes()
    assert [pieces[i] for i in tok.encode("2024 17")] == [b"2", b"0", b"2", b"4", b" ", b"1", b"7"]
    assert sum(len(p) >= 2 and p.isdigit() for p in pieces) >= 20, "no number tokens: the test would not tell the splits apart"


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_text_prompt_ids_equal_the_tokenizers_library(qwen3, text: str) -> None:
    text = unicodedata.normalize("NFC", text)
    proc = generate(qwen3, "-p", text, "--print-ids", "-n", 1)
    assert prompt_ids(proc.stderr) == [qwen3[2].encode(text)]  # no BOS


def test_random_unicode_lines_equal_the_tokenizers_library(qwen3) -> None:
    """200 random lines (-i: one prompt per line) mixing letters, digits of several scripts, punctuation, spaces, \\r
    and emoji give the tokenizers library's ids (each line in NFC)."""
    rng = random.Random(25)
    pools = ["abcXYZ", "'sStTmMdDlLrReEvV", "0123456789٠١٢٣४५", "0123456789", " ", "  \t\r\u00a0\u2009\u3000",
             ".,;:!?-_()[]{}\"'<|>/\\@#", "éèñüÅßœſ", "жЖщЯё", "αΩλΔ", "日本語中文한국", "مرحبا", "\u200d", "😀👍🏽🇫🇷"]
    lines = [unicodedata.normalize("NFC", "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 40))))
             for _ in range(200)]
    proc = generate(qwen3, "-i", "--print-ids", "-n", 1, input="".join(line + "\n" for line in lines))
    assert prompt_ids(proc.stderr) == [qwen3[2].encode(line) for line in lines]


def test_encode_of_tinyshakespeare_with_digits_equals_the_tokenizers_library(qwen3, tmp_path: Path) -> None:
    """A long prompt: the first 3000 characters of Tiny Shakespeare with numbers put between its lines."""
    lines = tinyshakespeare_text().read_text(encoding="utf-8")[:3000].split("\n")
    text = "\n".join(f"{line} {i * 7919}" for i, line in enumerate(lines))
    proc = generate(qwen3, "-p", text, "--print-ids", "-n", 1)
    assert prompt_ids(proc.stderr) == [qwen3[2].encode(text)]


def test_text_prompt_generates_what_its_ids_generate(qwen3) -> None:
    tok = qwen3[2]
    text = "ROMEO:\nDON'T 1234567 ГРЕЦИЯ 日本\r\n  ok"
    ids = " ".join(map(str, tok.encode(text)))
    flags = ["-n", 24, "--seed", 11, "--no-stop"]
    by_text = generate(qwen3, "-p", text, *flags, input=b"").stdout  # bytes: \r\n kept as printed
    by_ids = generate(qwen3, "--ids", ids, *flags, input=b"").stdout
    assert by_text == by_ids and by_text.startswith(text.encode()) and len(by_text) > len(text.encode()) + 1


def test_a_prompt_longer_than_the_context_is_one_error_line(qwen3) -> None:
    line = assert_one_error_line(generate(qwen3, "-p", " 1" * 2100, check=False))  # " ", "1", " ", ...
    assert "the prompt is 4200 tokens" in line and "4096" in line, line
