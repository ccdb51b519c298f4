"""Chat data (issue 47): the three chat formats rendered against templates written out by hand (GPT-2's vocabulary with
nanochat's tokens, Llama 3's and ChatML's on the test tokenizer with --chat), the loss mask on exactly the assistants'
tokens and end tokens, dev/data/chat.py's chat shards read back, every bad conversation one error line with nothing
written, dev/data/chat_tasks.py's determinism and disjoint splits, and the chat tokenizer files."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import PYTHON, REPO, assert_one_error_line, run, tinyshakespeare_text, trained_tokenizer

from pyllmc.families import REGISTRY
from pyllmc.llama3_tokenizer import load_llama3_tokenizer
from pyllmc.token_shards import read_chat_datafile

sys.path.insert(0, str(REPO / "dev" / "data"))  # the scripts' modules (dev/data is not installed)
import chat as chat_script  # noqa: E402

CHAT = REPO / "dev" / "data" / "chat.py"
TASKS = REPO / "dev" / "data" / "chat_tasks.py"

# a multi-turn conversation with a system message, and how each format renders it by hand below
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "And 2+2?"},
    {"role": "assistant", "content": "4, of course."},
]
SECOND = [{"role": "user", "content": "Reverse: king lord love"}, {"role": "assistant", "content": "love lord king"}]


@pytest.fixture(scope="module")
def llama3_chat_tokenizer(tmp_path_factory, tinyshakespeare) -> Path:
    """The test tokenizer with Llama 3's chat tokens: <|begin_of_text|> 512, <|end_of_text|> 513,
    <|start_header_id|> 514, <|end_header_id|> 515, <|eot_id|> 516."""
    return trained_tokenizer(tmp_path_factory, "llama3_chat_tokenizer", "--chat")


@pytest.fixture(scope="module")
def chatml_tokenizer(tmp_path_factory, tinyshakespeare) -> Path:
    """The test tokenizer with ChatML's tokens (Qwen3's): <|endoftext|> 512, <|im_start|> 513, <|im_end|> 514."""
    return trained_tokenizer(tmp_path_factory, "chatml_tokenizer", "--chat", "--delimiter", "endoftext")


def write_jsonl(path: Path, conversations: list) -> Path:
    path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in conversations), encoding="utf-8")
    return path


def rendered(jsonl: Path, *flags: object) -> list[dict]:
    proc = run([PYTHON, CHAT, "--render", jsonl, *flags])
    return [json.loads(line) for line in proc.stdout.splitlines()]


def by_hand(parts: list[tuple[list[int], int]]) -> tuple[list[int], list[int]]:
    """(ids, mask) of (ids, mask value) parts in order."""
    return [i for ids, _ in parts for i in ids], [m for ids, m in parts for _ in ids]


def in_process(argv: list[object], capsys: pytest.CaptureFixture) -> subprocess.CompletedProcess:
    """dev/data/chat.py's main(argv) run here (no interpreter start-up), as a finished process."""
    status = chat_script.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, status, out, err)


def gpt2_encode():
    import tiktoken

    return tiktoken.get_encoding("gpt2").encode_ordinary


def test_render_nanochat_format_on_gpt2_vocabulary_masks_exactly_the_answers(tmp_path):
    enc = gpt2_encode()
    bos, user_start, user_end, assistant_start, assistant_end = 50256, 50257, 50258, 50259, 50260
    expected = by_hand([
        ([bos, user_start], 0), (enc("Be brief.\n\nHi there"), 0), ([user_end, assistant_start], 0),
        (enc("Hello!") + [assistant_end], 1),
        ([user_start] + enc("And 2+2?") + [user_end, assistant_start], 0), (enc("4, of course.") + [assistant_end], 1),
    ])
    second = by_hand([([bos, user_start] + enc("Reverse: king lord love") + [user_end, assistant_start], 0),
                      (enc("love lord king") + [assistant_end], 1)])
    lines = rendered(write_jsonl(tmp_path / "c.jsonl", [CONVERSATION, SECOND]))
    assert [(line["ids"], line["mask"]) for line in lines] == [expected, second]
    # --family gpt2 and nanochat are the same format; GPT-2's vocabulary has no other
    assert rendered(tmp_path / "c.jsonl", "--family", "nanochat") == lines


def test_render_llama3_format_on_the_chat_test_tokenizer(tmp_path, llama3_chat_tokenizer):
    enc = load_llama3_tokenizer(str(llama3_chat_tokenizer)).encode
    bot, start_header, end_header, eot = 512, 514, 515, 516

    def header(role: str) -> list[int]:
        return [start_header] + enc(role) + [end_header] + enc("\n\n")

    expected = by_hand([
        ([bot] + header("system") + enc("Be brief.") + [eot] + header("user") + enc("Hi there") + [eot]
         + header("assistant"), 0),
        (enc("Hello!") + [eot], 1),
        (header("user") + enc("And 2+2?") + [eot] + header("assistant"), 0), (enc("4, of course.") + [eot], 1),
    ])
    lines = rendered(write_jsonl(tmp_path / "c.jsonl", [CONVERSATION]), "-m", "llama-3", "--tokenizer",
                     llama3_chat_tokenizer)
    assert (lines[0]["ids"], lines[0]["mask"]) == expected
    prompt = rendered(write_jsonl(tmp_path / "p.jsonl", [CONVERSATION[:2]]), "-m", "llama-3", "--tokenizer",
                      llama3_chat_tokenizer, "--generation_prompt")
    assert prompt == [{"ids": [bot] + header("system") + enc("Be brief.") + [eot] + header("user") + enc("Hi there")
                              + [eot] + header("assistant")}]


def test_render_chatml_format_on_the_chat_test_tokenizer(tmp_path, chatml_tokenizer):
    enc = load_llama3_tokenizer(str(chatml_tokenizer)).encode
    im_start, im_end = 513, 514

    def message(role: str, content: str) -> list[int]:
        return [im_start] + enc(role + "\n") + enc(content) + [im_end] + enc("\n")

    expected = by_hand([
        (message("system", "Be brief.") + message("user", "Hi there") + [im_start] + enc("assistant\n"), 0),
        (enc("Hello!") + [im_end], 1), (enc("\n"), 0),
        (message("user", "And 2+2?") + [im_start] + enc("assistant\n"), 0), (enc("4, of course.") + [im_end], 1),
        (enc("\n"), 0),
    ])
    jsonl = write_jsonl(tmp_path / "c.jsonl", [CONVERSATION])
    lines = rendered(jsonl, "-m", "llama-3", "--tokenizer", chatml_tokenizer)
    assert (lines[0]["ids"], lines[0]["mask"]) == expected
    assert rendered(jsonl, "-m", "llama-3", "--tokenizer", chatml_tokenizer, "--family", "qwen3") == lines


def test_render_nanochat_format_from_a_checkpoints_tokenizer_json(tmp_path, capsys, llama3_tokenizer):
    """An imported NanoChat's tokenizer.json (-m gpt-2 --tokenizer DIR): its chat tokens' ids by their strings, and a
    chat token's text inside a content is ordinary text."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(llama3_tokenizer / "tokenizer.json"))
    tok.add_special_tokens(["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>"])
    (tmp_path / "nanochat").mkdir()
    tok.save(str(tmp_path / "nanochat" / "tokenizer.json"))
    enc = load_llama3_tokenizer(str(llama3_tokenizer)).encode
    bos, user_start, user_end, assistant_start, assistant_end = 514, 515, 516, 517, 518
    talk = [{"role": "user", "content": "Say <|user_end|>"}, {"role": "assistant", "content": "No."}]
    expected = by_hand([([bos, user_start] + enc("Say <|user_end|>") + [user_end, assistant_start], 0),
                        (enc("No.") + [assistant_end], 1)])
    proc = in_process(["--render", write_jsonl(tmp_path / "c.jsonl", [talk]), "--tokenizer", tmp_path / "nanochat"],
                      capsys)
    line = json.loads(proc.stdout)
    assert (line["ids"], line["mask"]) == expected and user_end not in enc("Say <|user_end|>")


def test_chat_shards_hold_each_conversation_padded_to_T_and_read_back(tmp_path):
    train_jsonl = write_jsonl(tmp_path / "talk_train.jsonl", [CONVERSATION, SECOND, CONVERSATION + CONVERSATION[1:] * 3])
    val_jsonl = write_jsonl(tmp_path / "talk_val.jsonl", [SECOND])
    proc = run([PYTHON, CHAT, "--input", train_jsonl, "--val", val_jsonl, "-t", 48, "--data_dir", tmp_path / "out"])
    lines = rendered(train_jsonl)[:2]
    assert "dropped 1 conversations longer than T = 48 tokens (1 train)" in proc.stdout
    train = read_chat_datafile(tmp_path / "out" / "talk_train.bin", 50261)
    assert train.seq_len == 48 and len(train.tokens) == 2 * 48
    for row, line in enumerate(lines):
        n = len(line["ids"])
        tokens, mask = train.tokens[row * 48 : (row + 1) * 48], train.mask[row * 48 : (row + 1) * 48]
        assert tokens[:n].tolist() == line["ids"] and (tokens[n:] == 50256).all()
        assert mask[:n].tolist() == line["mask"] and not mask[n:].any()
    val = read_chat_datafile(tmp_path / "out" / "talk_val.bin", 50261)
    assert val.tokens[: len(lines[1]["ids"])].tolist() == lines[1]["ids"]
    header = np.fromfile(tmp_path / "out" / "talk_train.bin", dtype="<i4", count=4).tolist()
    assert header == [20240520, 2, 96, 48]
    supervised = sum(sum(line["mask"]) for line in lines)
    assert f"train: 2 conversations, {sum(len(l['ids']) for l in lines)} tokens (96 padded), {supervised} supervised" \
        in proc.stdout


def test_chat_shards_in_llama3_format_are_uint32_and_val_fraction_splits_them(tmp_path, llama3_chat_tokenizer):
    conversations = [[{"role": "user", "content": f"Say {i}"}, {"role": "assistant", "content": str(i)}] for i in range(20)]
    jsonl = write_jsonl(tmp_path / "count.jsonl", conversations)
    run([PYTHON, CHAT, "--input", jsonl, "--val_fraction", 0.25, "-t", 32, "-m", "llama-3", "--tokenizer",
         llama3_chat_tokenizer, "--data_dir", tmp_path])
    train, val = (read_chat_datafile(tmp_path / f"count_{split}.bin", 517) for split in ("train", "val"))
    assert len(train.tokens) == 15 * 32 and len(val.tokens) == 5 * 32 and train.tokens.dtype == np.uint32
    assert np.fromfile(tmp_path / "count_val.bin", dtype="<i4", count=4).tolist() == [20240801, 8, 160, 32]
    rows = {tuple(t) for t in np.concatenate([train.tokens, val.tokens]).reshape(-1, 32).tolist()}
    assert len(rows) == 20, "every conversation in exactly one split"


GOOD = json.dumps({"messages": SECOND})
BAD_LINES = [
    (json.dumps({"messages": [{"role": "robot", "content": "x"}]}), "message 1: unknown role 'robot'"),
    (json.dumps({"messages": []}), "empty conversation"),
    (json.dumps({"messages": [SECOND[0], SECOND[0], SECOND[1]]}), "message 2: two user turns in a row"),
    (json.dumps({"messages": [*SECOND, SECOND[1]]}), "message 3: two assistant turns in a row"),
    (json.dumps({"messages": [*SECOND, CONVERSATION[0]]}), "message 3: a system message may only be the first"),
    (json.dumps({"messages": SECOND[:1]}), "must end with an assistant turn"),
    (json.dumps({"messages": SECOND[1:]}), "must start with a user turn"),
    (json.dumps({"messages": [{"role": "user", "content": 3}, SECOND[1]]}), "message 1: 'content' must be a string"),
    (json.dumps({"conversation": SECOND}), "expected an object with a 'messages' list"),
    ('{"messages": [', "not JSON"),
    (b'{"messages": [{"role": "user", "content": "caf\xe9"}]}', "not UTF-8 text"),
]


@pytest.mark.parametrize("line, reason", BAD_LINES, ids=[reason.split(": ")[-1][:30] for _, reason in BAD_LINES])
def test_a_bad_conversation_is_one_error_line_naming_file_and_line_and_nothing_is_written(tmp_path, capsys, line, reason):
    bad = tmp_path / "bad.jsonl"
    body = line if isinstance(line, bytes) else line.encode()
    bad.write_bytes(GOOD.encode() + b"\n\n" + body + b"\n" + GOOD.encode() + b"\n")
    out = tmp_path / "out"
    error = assert_one_error_line(in_process(["--input", bad, "--data_dir", out, "-t", 64], capsys), alone=True)
    assert error.startswith(f"error: {bad}:3: ") and reason in error, error
    assert not out.exists()
    proc = in_process(["--render", bad], capsys)
    assert_one_error_line(proc, alone=True)
    assert proc.stdout == "", "--render prints nothing before the whole file is checked"
    # a bad --val file: named, and the train shard is not written either
    good = write_jsonl(tmp_path / "good.jsonl", [SECOND])
    error = assert_one_error_line(in_process(["--input", good, "--val", bad, "--data_dir", out], capsys))
    assert error.startswith(f"error: {bad}:3: ") and not out.exists()


def test_the_command_prints_a_bad_line_as_one_error_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(GOOD.encode() + b"\n" + b'{"messages": [{"role": "user", "content": "\xff"}]}\n')
    proc = run([PYTHON, CHAT, "--input", bad, "--data_dir", tmp_path / "out"], check=False)
    assert assert_one_error_line(proc, alone=True) == f"error: {bad}:2: not UTF-8 text (bad byte at column 44)"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, message", [
    (["-m", "llama-3", "--tokenizer", "PLAIN"], "the tokenizer has no chat tokens"),
    (["--family", "llama3"], "GPT-2's vocabulary has only nanochat's chat tokens"),
    (["-m", "llama-3", "--tokenizer", "CHATML", "--family", "llama3"], "has no <|begin_of_text|> token"),
    (["-t", 8], "none of the 1 train conversations fits in T = 8 tokens"),
    (["--input", "no/such/file.jsonl"], "no/such/file.jsonl: no such file"),
])
def test_chat_data_refuses_in_one_line(tmp_path, llama3_tokenizer, chatml_tokenizer, flags, message):
    good = write_jsonl(tmp_path / "good.jsonl", [CONVERSATION])
    names = {"PLAIN": str(llama3_tokenizer), "CHATML": str(chatml_tokenizer)}
    flags = [names.get(str(f), f) for f in flags]
    args = flags if "--input" in flags else ["--input", good, "--val_fraction", 0, *flags]
    error = assert_one_error_line(run([PYTHON, CHAT, "--data_dir", tmp_path / "out", *args], check=False))
    assert message in error and not (tmp_path / "out").exists(), error


def test_a_hub_dataset_offline_is_one_error_line(tmp_path):
    proc = run([PYTHON, CHAT, "--input", "HuggingFaceTB/smoltalk", "--hub_config", "all", "--data_dir", tmp_path],
               check=False, env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert "cannot load the dataset HuggingFaceTB/smoltalk" in assert_one_error_line(proc)
    assert list(tmp_path.glob("*.bin")) == []


def tasks(tmp_path: Path, task: str, seed: int, n_train: int = 300, n_val: int = 60) -> tuple[list, list]:
    run([PYTHON, TASKS, "--task", task, "--n_train", n_train, "--n_val", n_val, "--seed", seed, "--data_dir", tmp_path,
         "--corpus", tinyshakespeare_text()])
    return tuple([json.loads(line)["messages"] for line in (tmp_path / f"{task}_{split}.jsonl").read_text().splitlines()]
                 for split in ("train", "val"))


@pytest.mark.parametrize("task", ["lookup", "reverse"])
def test_chat_tasks_are_deterministic_disjoint_and_answer_exactly(tmp_path, task):
    train, val = tasks(tmp_path / "a", task, 7)
    assert (train, val) == tasks(tmp_path / "b", task, 7)
    assert (train, val) != tasks(tmp_path / "c", task, 8)
    assert len(train) == 300 and len(val) == 60
    users = [[m["content"] for m in c if m["role"] == "user"][0] for c in train + val]
    assert len(set(users)) == len(users), "no user message twice, so train and val are disjoint"
    assert 0 < sum(c[0]["role"] == "system" for c in train) < len(train)
    for conversation, user in zip(train + val, users):
        answer = conversation[-1]["content"]
        if task == "lookup":
            *table, question = user.split("\n")
            pairs = dict(row.split(": ") for row in table)
            assert 3 <= len(pairs) <= 5 and answer == pairs[question.removeprefix("What is ").removesuffix("?")]
        else:
            assert answer.split() == user.removeprefix("Reverse: ").split()[::-1] and len(answer.split()) == 3
    # every conversation renders for training
    enc_lines = rendered(tmp_path / "a" / f"{task}_val.jsonl")
    assert len(enc_lines) == 60 and all(sum(line["mask"]) >= 2 for line in enc_lines)


def test_chat_tasks_without_the_corpus_say_how_to_get_it(tmp_path):
    proc = run([PYTHON, TASKS, "--task", "lookup", "--corpus", tmp_path / "missing.txt", "--data_dir", tmp_path / "out"],
               check=False)
    assert "dev/data/tinyshakespeare.py" in assert_one_error_line(proc, alone=True)
    assert not (tmp_path / "out").exists()


def tokenizer_file_entries(data: bytes) -> tuple[list[int], list[bytes]]:
    """(header's first five uint32, every entry's bytes) of a tokenizer file."""
    header = list(struct.unpack("<5I", data[:20]))
    entries, pos = [], 1024
    while pos < len(data):
        entries.append(data[pos + 1 : pos + 1 + data[pos]])
        pos += 1 + data[pos]
    return header, entries


def test_gpt2_chat_tokenizer_file_is_the_gpt2_file_then_the_chat_tokens(tmp_path):
    from pyllmc.reference.tokenizer_files import write_gpt2_tokenizer

    write_gpt2_tokenizer(tmp_path / "gpt2_tokenizer.bin")
    plain = (tmp_path / "gpt2_tokenizer.bin").read_bytes()
    assert hashlib.sha256(plain).hexdigest() == "6f3abc21e444e4e8300e225f4e03da48ea121cf17e30f67009b8dad7a66c2f13", \
        "gpt2_tokenizer.bin byte for byte as before"
    header, entries = tokenizer_file_entries((tmp_path / "gpt2_chat_tokenizer.bin").read_bytes())
    plain_header, plain_entries = tokenizer_file_entries(plain)
    assert header[:4] == [20240328, 2, 50261, 50256] and plain_header[:4] == [20240328, 2, 50257, 50256]
    assert entries[:50257] == plain_entries
    assert entries[50257:] == [b"<|user_start|>", b"<|user_end|>", b"<|assistant_start|>", b"<|assistant_end|>"]


def test_a_chat_test_tokenizers_file_holds_its_chat_tokens_at_their_ids(llama3_chat_tokenizer, chatml_tokenizer,
                                                                        llama3_tokenizer):
    from pyllmc.families.llama3 import LLAMA3
    from pyllmc.families.qwen3 import QWEN3
    from pyllmc.reference.tokenizer_files import bpe_tokenizer_file_bytes

    plain = tokenizer_file_entries(b"".join(bpe_tokenizer_file_bytes(LLAMA3, load_llama3_tokenizer(str(llama3_tokenizer)))))
    for family, path, specials in [
        (LLAMA3, llama3_chat_tokenizer, {512: "<|begin_of_text|>", 513: "<|end_of_text|>", 514: "<|start_header_id|>",
                                         515: "<|end_header_id|>", 516: "<|eot_id|>"}),
        (QWEN3, chatml_tokenizer, {512: "<|endoftext|>", 513: "<|im_start|>", 514: "<|im_end|>"}),
    ]:
        header, entries = tokenizer_file_entries(b"".join(bpe_tokenizer_file_bytes(family, load_llama3_tokenizer(str(path)))))
        assert header[2] == 512 + len(specials) and len(entries) == header[2]
        assert {i: entries[i].decode() for i in specials} == specials
        assert entries[:512] == plain[1][:512], "--chat leaves the ordinary tokens as they are"


def test_every_family_names_its_chat_format():
    from pyllmc.chat import CHAT_FORMATS

    formats = {row.name: row.family.chat_format for row in REGISTRY}
    assert formats == {"gpt2": "nanochat", "llama3": "llama3", "nanochat": "nanochat", "qwen3": "chatml"}
    assert set(formats.values()) <= set(CHAT_FORMATS)
