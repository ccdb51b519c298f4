"""./generate --chat (llmc/chat.h) for every family, and dev/eval/chat_eval.py.

The turns C renders must be pyllmc/chat.py's ids (the ids the chat shards train on): a multi-turn conversation with a
system message through --jsonl, and the turns of an interactive chat driven through a pseudo-terminal (two turns, then
/reset), whose ids with the answers taken out are the template's rendering of the same conversation with empty
answers: the KV cache keeps the conversation, each turn appends to it (--check-kv recomputes it whole at every step).
The models are tiny and random, so their text is noise: the tests check structure (ids, where answers stop, what is
printed). Two GPT-2 models have a constant favourite answer token (their final LayerNorm gives every position the same
output), so where answers end and what chat_eval.py counts is known.
"""
from __future__ import annotations

import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import PYTHON, REPO, assert_one_error_line, make, run, trained_tokenizer  # noqa: E402
from test_qwen3_encode import QWEN_SPLIT_PATTERN  # noqa: E402

from pyllmc.families import NAMES  # noqa: E402
from pyllmc.chat import ChatTemplate, chat_format, gpt2_template, tokenizer_json_template  # noqa: E402
from pyllmc.llama3_tokenizer import load_llama3_tokenizer  # noqa: E402
from pyllmc.model_file import atomic_write  # noqa: E402
from pyllmc.reference.tokenizer_files import gpt2_encoding, gpt2_tokenizer_file_bytes  # noqa: E402

ONE_THREAD = {"OMP_NUM_THREADS": "1"}
FAMILIES = list(NAMES)  # every family of the registry
GPT2_END = 50260  # <|assistant_end|>
GPT2_YES = 3763  # " yes" in GPT-2's vocabulary

SYSTEM = "You answer in one word."
# a multi-turn conversation with a system message, its texts touching the encoders' corners: special-token text (stays
# text), newlines, non-ASCII and an emoji outside the BMP (a surrogate pair in the JSON line)
CONVERSATION = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What is the capital of France?\nAnswer: <|endoftext|> <|im_end|> <|eot_id|>"},
    {"role": "assistant", "content": "Paris, naïve café 😀"},
    {"role": "user", "content": "And of Italy?  "},
]


@dataclass(frozen=True)
class ChatModel:
    name: str
    model: Path
    tokenizer: Path
    template: ChatTemplate
    pieces: list[bytes]  # the tokenizer file's pieces by id (decoding)


def tokenizer_pieces(path: Path) -> list[bytes]:
    data = path.read_bytes()
    n = struct.unpack_from("<I", data, 8)[0]
    pieces, at = [], 1024
    for _ in range(n):
        length = data[at]
        pieces.append(data[at + 1:at + 1 + length])
        at += 1 + length
    return pieces


def write_gpt2_model(path: Path, V: int, favourite: int | None = None, maxT: int = 64) -> Path:
    """A random fp32 GPT-2 model file (L=2, C=48) of vocabulary V; with favourite, the final LayerNorm's weight is 0,
    so every position's output is its bias b, and wte[favourite] = 8 b: greedy always picks favourite."""
    L, C, Vp = 2, 48, (V + 127) // 128 * 128
    rng = np.random.default_rng(0)
    shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
              (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    ts = [rng.normal(0.0, 0.3, s).astype(np.float32) for s in shapes]
    for i in (2, 8, 14):
        ts[i] += 1.0
    if favourite is not None:
        ts[14][:] = 0.0
        ts[15] = rng.normal(0.0, 1.0, C).astype(np.float32)
        ts[0][favourite] = 8.0 * ts[15]
    ts[0][V:] = 0.0
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, 3, maxT, V, L, 4, C, Vp]
    path.write_bytes(header.tobytes() + b"".join(t.tobytes() for t in ts))
    return path


def gpt2_chat_tokenizer(out: Path) -> Path:
    atomic_write(out / "gpt2_chat_tokenizer.bin", gpt2_tokenizer_file_bytes(chat=True))
    atomic_write(out / "gpt2_tokenizer.bin", gpt2_tokenizer_file_bytes())
    return out / "gpt2_chat_tokenizer.bin"


def decoder_model(name: str, out: Path, V: int) -> Path:
    """A small random model file of a decoder family (its reference's writer), V tokens, a context of 256."""
    if name == "llama3":
        import train_llama3 as ref
        cfg = ref.LlamaConfig(block_size=256, vocab_size=V, n_layer=1, n_head=2, n_kv_head=1, n_embd=32, multiple_of=32)
        model = ref.Llama(cfg)
    elif name == "qwen3":
        import train_qwen3 as ref
        cfg = ref.Qwen3Config(block_size=256, vocab_size=V, n_layer=1, n_head=2, n_kv_head=1, n_embd=32, head_dim=12,
                              ffn_hidden=48)
        model = ref.Qwen3(cfg)
    else:
        import train_nanochat as ref
        cfg = ref.NanoChatConfig(block_size=256, vocab_size=V, n_layer=1, n_head=2, n_kv_head=1, n_embd=32, ffn_hidden=64)
        model = ref.NanoChat(cfg)
    model.init_weights(3)
    ref.FILES.write_model(model, out / f"{name}.bin", "float32")
    return out / f"{name}.bin"


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory) -> Path:
    """GPT-2's chat tokenizer file (and the plain one) and GPT-2 models: V = 50261 (fine-tuned for chat: noise, and the
    two with a favourite answer token), V = 50257 (a base model)."""
    make("generate")
    out = tmp_path_factory.mktemp("gpt2_chat")
    gpt2_chat_tokenizer(out)
    write_gpt2_model(out / "chat.bin", 50261)
    write_gpt2_model(out / "base.bin", 50257)
    write_gpt2_model(out / "ends.bin", 50261, favourite=GPT2_END)
    write_gpt2_model(out / "yes.bin", 50261, favourite=GPT2_YES)
    return out


def qwen_tokenizer_json(src: Path, out: Path) -> Path:
    """The --delimiter endoftext --chat test tokenizer with Qwen's pre-tokenizer (every digit a piece) and its NFC
    normalizer, as llmc/bpe.h's Qwen pattern encodes (tests/test_qwen3_encode.py)."""
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers

    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    out.mkdir()
    tok.save(str(out / "tokenizer.json"))
    return out


def build_chat_model(name: str, tmp_path_factory, gpt2_dir: Path) -> ChatModel:
    """A family's chat model: a random model of its chat vocabulary, its tokenizer file and pyllmc/chat.py's template
    of the same tokenizer."""
    if name in ("gpt2", "nanochat"):
        tok_file = gpt2_dir / "gpt2_chat_tokenizer.bin"
        template = gpt2_template(gpt2_encoding().encode_ordinary)
        if name == "gpt2":
            return ChatModel(name, gpt2_dir / "chat.bin", tok_file, template, tokenizer_pieces(tok_file))
        model = decoder_model("nanochat", tmp_path_factory.mktemp("nanochat_chat"), 50304)
        return ChatModel(name, model, tok_file, template, tokenizer_pieces(tok_file))
    out = tmp_path_factory.mktemp(f"{name}_chat")
    if name == "llama3":
        json_dir = trained_tokenizer(tmp_path_factory, "llama3_chat_tokenizer", "--chat")
        import train_llama3 as ref
    else:
        json_dir = qwen_tokenizer_json(trained_tokenizer(tmp_path_factory, "qwen3_chat_tokenizer", "--delimiter",
                                                         "endoftext", "--chat"), out / "tok")
        import train_qwen3 as ref
    tok = load_llama3_tokenizer(str(json_dir))
    tok_file = out / f"{name}_tokenizer.bin"
    ref.write_tokenizer(tok, tok_file)
    template = tokenizer_json_template(tok.tok, tok.encode, tok.source, chat_format("llama3" if name == "llama3" else "chatml"))
    return ChatModel(name, decoder_model(name, out, tok.vocab_size), tok_file, template, tokenizer_pieces(tok_file))


@pytest.fixture(scope="module", params=FAMILIES)
def chat_model(request, tmp_path_factory, gpt2_dir: Path, tinyshakespeare) -> ChatModel:
    return build_chat_model(request.param, tmp_path_factory, gpt2_dir)


def generate(m: ChatModel, *flags: object, input: str | None = None, check: bool = True,
             model: Path | None = None) -> subprocess.CompletedProcess:
    return run([REPO / "generate", "-e", model or m.model, "-t", m.tokenizer, "--chat", *flags], env=ONE_THREAD,
               input=input, check=check, timeout=600)


def id_lines(what: str, text: str) -> list[list[int]]:
    """The ids of every "<what> ids: ..." line (--print-ids)."""
    return [[int(x) for x in m.split()] for m in re.findall(rf"^{what} ids:(.*)$", text, re.M)]


def decoded(m: ChatModel, ids: list[int]) -> bytes:
    return b"".join(m.pieces[i] for i in ids)


def same_text(json_answer: str, raw: bytes) -> bool:
    """--jsonl's answer against the answer's bytes: equal, up to how each writes the U+FFFD of bytes that are not UTF-8."""
    try:
        return json_answer == raw.decode("utf-8")
    except UnicodeDecodeError:
        return json_answer.replace("\ufffd", "") == raw.decode("utf-8", "replace").replace("\ufffd", "")


# ---------------------------------------------------------------------------- the rendered ids


def test_c_renders_a_multi_turn_conversation_with_a_system_message_as_pyllmc_chat(chat_model: ChatModel) -> None:
    m = chat_model
    if m.name == "qwen3":  # Qwen's tokenizer normalises to NFC; the texts already are
        assert all(unicodedata.is_normalized("NFC", c["content"]) for c in CONVERSATION)
    conversations = [CONVERSATION, CONVERSATION[1:2], [{"role": "system", "content": ""}, *CONVERSATION[1:]]]
    lines = "".join(json.dumps({"messages": c}) + "\n" for c in conversations)
    proc = generate(m, "--jsonl", "--print-ids", "-n", 3, "--temperature", 0, input=lines)
    assert id_lines("prompt", proc.stderr) == [m.template.render_prompt(c) for c in conversations]
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    answers = id_lines("answer", proc.stderr)
    assert len(replies) == 3 and len(answers) == 3
    for reply, ids in zip(replies, answers):
        assert same_text(reply["answer"], decoded(m, ids)), (reply, ids)
        assert reply["tokens"] == len(ids) <= 3 and (reply["ended"] or len(ids) == 3)
        assert m.template.end_id not in ids


def test_each_turn_appends_to_the_conversation_and_reset_starts_a_new_one_in_a_terminal(chat_model: ChatModel) -> None:
    m = chat_model
    term = Terminal([REPO / "generate", "-e", m.model, "-t", m.tokenizer, "--chat", "--system", SYSTEM, "--print-ids",
                     "-n", 4, "--temperature", 0, "--check-kv"])
    turns = ["Hello there", "How are you?", "/reset", "Again"]
    for k, turn in enumerate(turns, 1):
        term.read_until(b"you> ", k)
        term.send(turn + "\n")
    term.read_until(b"you> ", len(turns) + 1)
    term.send("\x04")  # end of input
    out = term.finish()
    text = out.decode("utf-8", "replace")
    assert text.count("you> ") == 5 and "(a new conversation)" in text and "/reset starts a new conversation" in text
    assert all(f"you> {turn}\n" in text for turn in turns)  # the transcript: each prompt and what was typed
    prompts, answers = id_lines("prompt", text), id_lines("answer", text)
    assert len(prompts) == 3 and len(answers) == 3
    system = {"role": "system", "content": SYSTEM}
    user = [{"role": "user", "content": t} for t in turns]
    no_answer = {"role": "assistant", "content": ""}
    # the second turn went into the cache after the first and its answer: the answer's end, then the turn alone
    assert prompts[0] == m.template.render_prompt([system, user[0]])
    assert prompts[0] + prompts[1] == m.template.render_prompt([system, user[0], no_answer, user[1]])
    assert prompts[1][0] == m.template.end_id
    assert prompts[2] == m.template.render_prompt([system, user[3]])  # after /reset: a new conversation
    for ids in answers:  # each answer printed as it came, up to -n tokens or the end token
        assert len(ids) <= 4 and m.template.end_id not in ids
        assert decoded(m, ids) in out
    check = re.search(r"check-kv: (\d+) steps, max \|cached - full\| logit difference (\S+)", text)
    assert check and int(check.group(1)) >= 3 and float(check.group(2)) < 1e-4, text[-2000:]


def test_one_turn_with_p_prints_the_answer_and_exits(chat_model: ChatModel) -> None:
    m = chat_model
    proc = generate(m, "-p", "Hello", "--system", SYSTEM, "--print-ids", "-n", 5, "--temperature", 0, "--seed", 3)
    assert id_lines("prompt", proc.stderr) == [m.template.render_prompt([{"role": "system", "content": SYSTEM},
                                                                         {"role": "user", "content": "Hello"}])]
    [answer] = id_lines("answer", proc.stderr)
    raw = run([REPO / "generate", "-e", m.model, "-t", m.tokenizer, "--chat", "-p", "Hello", "--system", SYSTEM, "-n", 5,
               "--temperature", 0], env=ONE_THREAD, input=b"").stdout
    assert raw == decoded(m, answer) + b"\n"


# ---------------------------------------------------------------------------- where answers end, the context


def test_an_answer_ends_at_the_end_token_and_the_next_turn_follows_it(gpt2_dir: Path) -> None:
    m = gpt2_chat(gpt2_dir)
    proc = generate(m, "--print-ids", "-n", 5, "--temperature", 0, model=gpt2_dir / "ends.bin", input="Hi\nBye\n")
    prompts, answers = id_lines("prompt", proc.stderr), id_lines("answer", proc.stderr)
    assert answers == [[], []] and proc.stdout == "\n\n"
    assert prompts[1] == [GPT2_END, *m.template.render_prompt([{"role": "user", "content": "Bye"}])[1:]]
    assert "note:" not in proc.stderr  # ended by the model: nothing to say
    # an answer cut at -n says so, and the end token is appended for it
    proc = generate(m, "--print-ids", "-n", 2, "--temperature", 0, model=gpt2_dir / "yes.bin", input="Hi\nBye\n")
    assert proc.stdout == " yes yes\n yes yes\n"
    assert id_lines("answer", proc.stderr) == [[GPT2_YES] * 2] * 2
    assert id_lines("prompt", proc.stderr)[1][0] == GPT2_END
    assert proc.stderr.count("note: the answer reached -n 2 tokens before its end token (the end token is appended "
                             "to the conversation)") == 2


def test_a_full_context_says_so_and_the_chat_starts_over_from_the_turn(gpt2_dir: Path) -> None:
    m = gpt2_chat(gpt2_dir)  # a context of 64 tokens
    long_turn, too_long = "word " * 40, "word " * 70
    proc = generate(m, "--print-ids", "-n", 20, "--temperature", 0, input=f"{long_turn}\nHi\n{too_long}\nOk\n")
    prompts = id_lines("prompt", proc.stderr)
    assert prompts[1] == m.template.render_prompt([{"role": "user", "content": "Hi"}])  # started over
    assert prompts[2] == m.template.render_prompt([{"role": "user", "content": "Ok"}])
    assert "note: the context of 64 tokens is full: the chat starts over from this turn" in proc.stderr
    # a turn longer than the context alone: one error line, and the chat goes on
    assert re.search(r"^error: the turn is \d+ tokens, the model's context is 64", proc.stderr, re.M), proc.stderr
    assert len(id_lines("answer", proc.stderr)) == 3
    line = assert_one_error_line(generate(m, "-p", too_long, check=False))
    assert "-p: the turn is" in line and "the model's context is 64" in line


# ---------------------------------------------------------------------------- refusals


def gpt2_chat(gpt2_dir: Path) -> ChatModel:
    tok = gpt2_dir / "gpt2_chat_tokenizer.bin"
    return ChatModel("gpt2", gpt2_dir / "chat.bin", tok, gpt2_template(gpt2_encoding().encode_ordinary), tokenizer_pieces(tok))


def test_flags_chat_refuses_and_models_without_chat_tokens_are_one_error_line(gpt2_dir: Path, tmp_path: Path) -> None:
    m = gpt2_chat(gpt2_dir)

    def line_of(*flags: object, model: Path | None = None, input: str | None = None) -> str:
        return assert_one_error_line(generate(m, *flags, model=model, input=input, check=False), alone=True)

    assert "--ids" in line_of("--ids", "1 2")
    assert line_of("-i").startswith("error: -i: --chat without -p is interactive already")
    assert "--no-stop" in line_of("--no-stop")
    assert "--jsonl" in line_of("--jsonl", "-p", "Hi")
    assert "--jsonl" in line_of("--jsonl", "--system", "x")
    plain = [REPO / "generate", "-e", m.model]
    assert "--system" in assert_one_error_line(run([*plain, "--system", "x"], check=False), alone=True)
    assert "--jsonl" in assert_one_error_line(run([*plain, "--jsonl"], check=False), alone=True)
    # a base GPT-2 model (V = 50257) has no rows for the chat tokens
    line = line_of("-p", "Hi", model=gpt2_dir / "base.bin")
    assert "the model's vocabulary has no chat tokens" in line and "fine-tune it on chat shards first (doc/chat.md)" in line
    # a tokenizer file without them names itself and the token
    proc = run([REPO / "generate", "-e", m.model, "-t", gpt2_dir / "gpt2_tokenizer.bin", "--chat", "-p", "Hi"], check=False)
    line = assert_one_error_line(proc, alone=True)
    assert "gpt2_tokenizer.bin: the tokenizer has no <|user_start|> token" in line, line
    proc = run([REPO / "generate", "-e", m.model, "-t", tmp_path / "none.bin", "--chat", "-p", "Hi"], check=False)
    assert "none.bin: no such tokenizer file" in assert_one_error_line(proc, alone=True)
    # conversations that are not JSON or not one to answer: the line and why
    assert line_of("--jsonl", input='{"messages": [}\n').startswith("error: stdin:1: ")
    last_assistant = json.dumps({"messages": CONVERSATION[1:3]})
    assert "stdin:2: the last message is not a user message" in line_of("--jsonl", input=f"\n{last_assistant}\n")
    bad_role = json.dumps({"messages": [{"role": "robot", "content": "x"}]})
    assert "stdin:1: unknown role" in line_of("--jsonl", input=bad_role + "\n")
    two_users = json.dumps({"messages": [CONVERSATION[1], CONVERSATION[1]]})
    assert "two user messages in a row" in line_of("--jsonl", input=two_users + "\n")


def test_a_llama3_tokenizer_without_chat_tokens_is_named_with_the_token(gpt2_dir: Path, tmp_path: Path,
                                                                        tmp_path_factory, tinyshakespeare) -> None:
    import train_llama3 as ref

    m = build_chat_model("llama3", tmp_path_factory, gpt2_dir)
    plain = load_llama3_tokenizer(str(trained_tokenizer(tmp_path_factory, "llama3_tokenizer")))
    ref.write_tokenizer(plain, tmp_path / "plain.bin")
    line = assert_one_error_line(run([REPO / "generate", "-e", m.model, "-t", tmp_path / "plain.bin", "--chat",
                                      "-p", "Hi"], check=False), alone=True)
    assert "plain.bin: the tokenizer has no <|start_header_id|> token, which the llama3 chat format needs" in line, line


# ---------------------------------------------------------------------------- chat_eval.py


def chat_eval(model: Path, tokenizer: Path, conversations: list[list[dict]], tmp_path: Path, *flags: object,
              check: bool = True) -> subprocess.CompletedProcess:
    data = tmp_path / "val.jsonl"
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in conversations), encoding="utf-8")
    return run([PYTHON, REPO / "dev" / "eval" / "chat_eval.py", "-e", model, "-t", tokenizer, "--input", data, *flags],
               env=ONE_THREAD, check=check)


def qa(question: str, answer: str) -> list[dict]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def test_chat_eval_counts_exact_answers_and_answers_ended_by_the_model(gpt2_dir: Path, tmp_path: Path) -> None:
    tok = gpt2_dir / "gpt2_chat_tokenizer.bin"
    multi_turn = [{"role": "system", "content": SYSTEM}, *qa("a", "b"), *qa("Say yes", "  yes\n")]
    # the "yes" model answers " yes" (-n 1: cut before its end token)
    proc = chat_eval(gpt2_dir / "yes.bin", tok, [qa("Say yes", "yes"), qa("Say no", "no"), multi_turn], tmp_path, "-n", 1)
    assert proc.stdout.splitlines() == ["accuracy: 2/3 (66.7 %)", "ended with end token: 0/3 (0.0 %)"], proc.stdout
    assert "chat_eval" in proc.stderr  # the progress bar
    # the "ends" model answers nothing and ends at once
    proc = chat_eval(gpt2_dir / "ends.bin", tok, [qa("x", ""), qa("y", "y"), multi_turn], tmp_path, "--limit", 2)
    assert proc.stdout.splitlines() == ["accuracy: 1/2 (50.0 %)", "ended with end token: 2/2 (100.0 %)"], proc.stdout


def test_chat_eval_refuses_a_conversation_without_an_answer_and_a_model_without_chat_tokens(gpt2_dir: Path,
                                                                                             tmp_path: Path) -> None:
    tok = gpt2_dir / "gpt2_chat_tokenizer.bin"
    proc = chat_eval(gpt2_dir / "chat.bin", tok, [qa("x", "y"), qa("x", "y")[:1]], tmp_path, check=False)
    line = assert_one_error_line(proc, alone=True)
    assert "val.jsonl:2: message 1: the conversation must end with an assistant turn" in line, line
    proc = chat_eval(gpt2_dir / "base.bin", tok, [qa("x", "y")], tmp_path, check=False)
    line = assert_one_error_line(proc)
    assert "stopped" in line and "the model's vocabulary has no chat tokens" in line, line


# ---------------------------------------------------------------------------- the pseudo-terminal


class Terminal:
    """A program on a pseudo-terminal (stdin, stdout and stderr), as a person at a terminal runs it: line editing, the
    typed lines echoed, end of input by ^D; without output processing, so its output comes back byte for byte."""

    def __init__(self, cmd: list[object]) -> None:
        master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.OPOST  # oflag: no \n -> \r\n
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        self.proc = subprocess.Popen([str(c) for c in cmd], stdin=slave, stdout=slave, stderr=slave, cwd=REPO,
                                     env={**os.environ, **ONE_THREAD}, close_fds=True)
        os.close(slave)
        self.master = master
        self.out = b""

    def _read(self, deadline: float) -> bool:
        """More output (False at its end: the program closed the terminal)."""
        ready, _, _ = select.select([self.master], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError(f"no output for a while; so far:\n{self.out[-3000:].decode(errors='replace')}")
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: no process holds the terminal any more
            return False
        self.out += data
        return bool(data)

    def read_until(self, marker: bytes, count: int, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while self.out.count(marker) < count:
            if not self._read(deadline):
                raise AssertionError(f"ended before {marker!r} x{count}:\n{self.out[-3000:].decode(errors='replace')}")

    def send(self, text: str) -> None:
        os.write(self.master, text.encode("utf-8"))

    def finish(self, timeout: float = 300.0) -> bytes:
        """The whole output once the program has ended, which it must with status 0."""
        deadline = time.monotonic() + timeout
        while self._read(deadline):
            pass
        code = self.proc.wait(timeout=timeout)
        os.close(self.master)
        assert code == 0, self.out[-3000:].decode(errors="replace")
        return self.out
