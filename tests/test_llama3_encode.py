"""Llama 3 text prompts in C: `./generate -e <llama3 model> -p TEXT` (and `./encode -t llama3_tokenizer.bin`) encode
TEXT with llmc/bpe.h (Llama 3's split pattern, ranks = token ids of the tokenizer file) and must give exactly the ids
of the `tokenizers` library on the same tokenizer.json (the local test tokenizer, in the form of Llama 3's:
dev/data/make_test_tokenizer.py)."""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import REPO, assert_one_error_line, make, run, tinyshakespeare_text  # noqa: E402

from pyllmc.llama3_tokenizer import LlamaTokenizer, load_llama3_tokenizer  # noqa: E402

ONE_THREAD = {"OMP_NUM_THREADS": "1"}

# unseen texts in several scripts, and the pattern's corners (contractions in any case, digit groups,
# whitespace runs with and without \r\n, punctuation runs, special-token text, pieces longer than 128 bytes)
TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "def f(x):\n    if x > 0:\n        return x * 2\n\treturn None\n",
    "1234567 and 3.14159, 1,000,000 or 42nd",
    "DON'T you KNOW it's, we'LL've they'RE we'd I'M 'S 'ſ",
    "naïve café Ångström señor Æsir façade",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε, αβγ",
    "日本語のテキスト、中文字符和한국어",
    "emoji 😀👍🏽 family 👨\u200d👩\u200d👧 flags 🇫🇷",
    "مرحبا بالعالم ١٢٣٤",
    "mixed \t tabs  \u00a0nbsp\u3000ideographic   \n\n  trailing   ",
    "line one\r\nline two\r\n\r\n  indented\r\n",
    "<|begin_of_text|>special <|end_of_text|> tokens stay text",
    "quotes \"double\" (parens) [brackets] {braces} ... !!!\n\n??",
    "ROMEO:\nBut, soft! what light through yonder window breaks?",
    "x" * 200 + " " + "ab" * 90,
]


@pytest.fixture(scope="module")
def llama3(tmp_path_factory, llama3_tokenizer: Path) -> tuple[Path, Path, LlamaTokenizer]:
    """(model file, tokenizer file, the tokenizers-library tokenizer): a small random Llama 3 model with a
    context of 1024 and the test tokenizer's llama3_tokenizer.bin, both from train_llama3.py's writers."""
    make("generate", "encode")
    import train_llama3 as ref

    out = tmp_path_factory.mktemp("llama3_encode")
    tok = load_llama3_tokenizer(str(llama3_tokenizer))
    ref.write_tokenizer(tok, out / "llama3_tokenizer.bin")
    cfg = ref.LlamaConfig(block_size=1024, vocab_size=tok.vocab_size, n_layer=1, n_head=2, n_kv_head=1, n_embd=32,
                          multiple_of=32)
    model = ref.Llama(cfg)
    model.init_weights(3)
    ref.write_model(model, out / "llama3.bin", "float32")
    return out / "llama3.bin", out / "llama3_tokenizer.bin", tok


def generate(llama3, *flags: object, check: bool = True, input: str | bytes | None = None):
    model, tok_file, _ = llama3
    return run([REPO / "generate", "-e", model, "-t", tok_file, *flags], env=ONE_THREAD, check=check, input=input)


def prompt_ids(stderr: str) -> list[list[int]]:
    """The ids of every "prompt ids: ..." line (--print-ids)."""
    return [[int(x) for x in m.split()] for m in re.findall(r"^prompt ids:(.*)$", stderr, re.M)]


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_text_prompt_ids_equal_the_tokenizers_library(llama3, text: str) -> None:
    tok = llama3[2]
    proc = generate(llama3, "-p", text, "--print-ids", "-n", 1)
    assert prompt_ids(proc.stderr) == [[tok.bos, *tok.encode(text)]]


def test_random_unicode_lines_equal_the_tokenizers_library(llama3) -> None:
    """200 random lines (-i: one prompt per line) mixing letters, digits, marks, punctuation, spaces, \\r and
    emoji from many scripts give the tokenizers library's ids."""
    rng = random.Random(24)
    pools = ["abcXYZ", "'sStTmMdDlLrReEvV", "0123456789٠١٢٣४५", " ", "  \t\r\u00a0\u2009\u3000", ".,;:!?-_()[]{}\"'<|>/\\@#",
             "éèñüÅßœſ", "жЖщЯё", "αΩλΔ", "日本語中文한국", "مرحبا", "\u0301\u0308\u200d", "😀👍🏽🇫🇷"]
    lines = ["".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 40))) for _ in range(200)]
    proc = generate(llama3, "-i", "--print-ids", "-n", 1, input="".join(line + "\n" for line in lines))
    tok = llama3[2]
    assert prompt_ids(proc.stderr) == [[tok.bos, *tok.encode(line)] for line in lines]


def test_text_prompt_generates_what_its_ids_generate(llama3) -> None:
    tok = llama3[2]
    text = "ROMEO:\nDON'T 1234567 ГРЕЦИЯ 日本\r\n  ok"
    ids = " ".join(map(str, [tok.bos, *tok.encode(text)]))
    flags = ["-n", 24, "--seed", 11, "--no-stop"]
    by_text = generate(llama3, "-p", text, *flags, input=b"").stdout  # bytes: \r\n kept as printed
    by_ids = generate(llama3, "--ids", ids, *flags, input=b"").stdout
    assert by_text == by_ids and by_text.startswith(text.encode()) and len(by_text) > len(text.encode()) + 1


def test_invalid_utf8_bytes_are_byte_tokens_that_decode_back(llama3) -> None:
    """`tokenizers` takes only valid text; llmc's rule: an invalid byte is one "other" character (a byte token)
    and the valid text around it is encoded as usual, so the ids decode to exactly the prompt's bytes."""
    tok = llama3[2]
    raw = b"caf\xe9 ok \xff\xfe\xc3 end \xe2\x82"
    proc = generate(llama3, "-p", raw.decode("utf-8", "surrogateescape"), "--print-ids", "-n", 1)
    [ids] = prompt_ids(proc.stderr)
    pieces = tok.token_bytes()
    assert ids[0] == tok.bos and b"".join(pieces[i] for i in ids[1:]) == raw
    assert ids[1:1 + len(tok.encode("caf"))] == tok.encode("caf") and ids[-2:] == [pieces.index(b"\xe2"), pieces.index(b"\x82")]


def test_text_and_ids_together_are_one_error_line(llama3) -> None:
    line = assert_one_error_line(generate(llama3, "-p", "Hello", "--ids", "512", check=False))
    assert "--ids" in line and "-p" in line


def test_a_tokenizer_file_without_the_256_byte_tokens_before_its_specials_is_one_error_line(llama3, tmp_path: Path) -> None:
    model, tok_file, _ = llama3
    data = bytearray(tok_file.read_bytes())
    data[16:20] = (100).to_bytes(4, "little")  # header [4]: BOS = 100, inside the byte tokens
    bad = tmp_path / "llama3_tokenizer.bin"
    bad.write_bytes(bytes(data))
    proc = run([REPO / "generate", "-e", model, "-t", bad, "-p", "Hello", "-n", 1], check=False)
    assert "the first special token is id 100" in assert_one_error_line(proc)


def c_encode(tok_file: Path, text: str, *flags: str) -> list[int]:
    out = run([REPO / "encode", "-t", tok_file, *flags], input=text.encode()).stdout
    return [int(x) for x in out.split()]


def test_encode_tool_gives_the_tokenizers_librarys_ids_on_tinyshakespeare_and_every_text(llama3) -> None:
    _, tok_file, tok = llama3
    text = tinyshakespeare_text().read_text(encoding="utf-8")
    assert c_encode(tok_file, text) == tok.encode(text)
    joined = "\n".join(TEXTS)
    assert c_encode(tok_file, joined) == tok.encode(joined)


def test_encode_tool_allow_special_turns_end_of_text_into_its_id(llama3) -> None:
    _, tok_file, tok = llama3
    text = "one<|end_of_text|>two <|begin_of_text|>"
    assert c_encode(tok_file, text, "--allow-special") == [*tok.encode("one"), tok.eot, *tok.encode("two <|begin_of_text|>")]


def test_encode_tool_with_a_gpt2_tokenizer_file_is_one_error_line(llama3, tmp_path: Path) -> None:
    data = bytearray(llama3[1].read_bytes())
    data[4:8] = (2).to_bytes(4, "little")  # header [1]: version 2, a GPT-2 tokenizer file
    gpt2 = tmp_path / "gpt2_tokenizer.bin"
    gpt2.write_bytes(bytes(data))
    assert "only decodes (-d)" in assert_one_error_line(run([REPO / "encode", "-t", gpt2], check=False, input="Hello"))


def test_without_the_tokenizer_file_ids_prompts_run_and_text_prompts_are_one_error_line(llama3, tmp_path: Path) -> None:
    """Every decoder family alike (llmc/cpu/decoder_inference.h): no tokenizer file, then --ids prompts still run and
    the tokens print as ids; a text prompt is one error line that names --ids."""
    model, _, tok = llama3
    missing = tmp_path / "none.bin"
    proc = run([REPO / "generate", "-e", model, "-t", missing, "--ids", f"{tok.bos} 300", "-n", 4, "--no-stop"],
               env=ONE_THREAD)
    assert re.fullmatch(r"( <\d+>)+\n", proc.stdout) and len(proc.stdout.split()) == 2 + 4, proc.stdout  # the prompt echoed, then 4
    line = assert_one_error_line(run([REPO / "generate", "-e", model, "-t", missing, "-p", "Hello"], check=False))
    assert "none.bin: no such llama3 tokenizer file" in line and "--ids" in line, line
