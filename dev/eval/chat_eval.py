"""
Exact-answer accuracy of a chat model on held-out conversations, with greedy answers from ./generate --chat.

    python dev/eval/chat_eval.py -e nanochat_sft.bin --input data/chat/reverse_val.jsonl
    python dev/eval/chat_eval.py -e llama3_sft.bin -t llama3_tokenizer.bin --input val.jsonl -n 32 --limit 50

Each line of --input is a conversation ({"messages": [{"role", "content"}, ...]}, dev/data/chat.py's layout) whose
last message is the assistant's: that is the expected answer. The messages before it (an optional system message,
then user and assistant turns, ending with a user turn) go to ONE ./generate process for all conversations
(`--chat --jsonl --temperature 0`: a conversation per JSON line in, its answer as a JSON line out, each from an empty
KV cache), so the model is loaded once. An answer is exact when it equals the expected one after stripping
whitespace at both ends. It prints

    accuracy: k/N (p %)                  exact answers
    ended with end token: k/N (p %)      answers the model ended itself, with its chat format's end token

and a progress bar with the time left on stderr. -t, -n, --generate go to ./generate (its -t default is the family's
chat tokenizer file: gpt2_chat_tokenizer.bin for GPT-2 and nanochat's GPT).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pyllmc.chat import check_conversation
from pyllmc.token_shards import DataError

REPO = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class Example:
    prompt: list[dict[str, str]]  # the conversation up to the expected answer: it ends with a user turn
    expected: str  # the last assistant message's content


@dataclass
class Tally:
    total: int = 0
    exact: int = 0
    ended: int = 0
    no_room: int = 0  # conversations that left no room to answer in the model's context


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-e", "--model", required=True, help="the model file (any family ./generate reads)")
    p.add_argument("--input", type=Path, required=True, help="held-out conversations, JSONL, each ending with the expected answer")
    p.add_argument("-t", "--tokenizer", default=None, help="the tokenizer file with the chat tokens (./generate --chat's -t)")
    p.add_argument("-n", "--max_tokens", type=int, default=64, help="the longest answer in tokens (default 64)")
    p.add_argument("--limit", type=int, default=0, help="the first K conversations only (default 0: all)")
    p.add_argument("--show", type=int, default=0, help="print the first K wrong answers beside the expected ones")
    p.add_argument("--generate", type=Path, default=REPO / "generate", help="the generate program (default ./generate)")
    args = p.parse_args(argv)
    if args.max_tokens < 1:
        p.error(f"-n {args.max_tokens}: an answer needs at least 1 token")
    if args.limit < 0 or args.show < 0:
        p.error("--limit and --show take a count >= 0")
    return args


def read_examples(path: Path, limit: int) -> list[Example]:
    """The conversations of a JSONL file as prompts and expected answers; DataError naming the file and line for one
    that is not a conversation ending with an assistant message."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})") from None
    examples = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
            if not isinstance(record, dict) or "messages" not in record:
                raise DataError('not a JSON object with "messages"')
            messages = check_conversation(record["messages"], for_training=True)  # ends with the assistant's answer
        except UnicodeDecodeError:
            raise DataError(f"{path}:{number}: not UTF-8 text") from None
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{number}: bad JSON ({e.msg})") from None
        except DataError as e:
            raise DataError(f"{path}:{number}: {e}") from None
        examples.append(Example(messages[:-1], messages[-1]["content"]))
        if len(examples) == limit:
            break
    if not examples:
        raise DataError(f"{path}: no conversations")
    return examples


def generate_command(args: argparse.Namespace) -> list[str]:
    cmd = [str(args.generate), "-e", str(args.model), "--chat", "--jsonl", "--temperature", "0", "-n", str(args.max_tokens)]
    return cmd + (["-t", str(args.tokenizer)] if args.tokenizer else [])


def last_line(log: IO[bytes]) -> str:
    log.seek(0)
    lines = log.read().decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else "(no message)"


def evaluate(args: argparse.Namespace, examples: list[Example]) -> Tally:
    """Every example through one ./generate process, one JSON line in and one out at a time."""
    from tqdm import tqdm

    tally, shown = Tally(), 0
    with tempfile.TemporaryFile() as log:  # ./generate's stderr: its error line, if it stops
        proc = subprocess.Popen(generate_command(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            bar = tqdm(examples, desc="chat_eval", unit="conv", file=sys.stderr, dynamic_ncols=True)
            for example in bar:
                try:
                    proc.stdin.write(json.dumps({"messages": example.prompt}).encode("utf-8") + b"\n")
                    proc.stdin.flush()
                except BrokenPipeError:
                    pass  # it stopped: the empty read below says so
                line = proc.stdout.readline()
                if not line:
                    proc.wait()
                    raise DataError(f"{args.generate} stopped (exit {proc.returncode}): {last_line(log)}")
                reply = json.loads(line)
                exact = reply["answer"].strip() == example.expected.strip()
                tally.total += 1
                tally.exact += exact
                tally.ended += bool(reply["ended"])
                tally.no_room += "error" in reply
                if not exact and shown < args.show:
                    shown += 1
                    bar.write(f"expected {example.expected.strip()!r}, got {reply['answer'].strip()!r}")
                bar.set_postfix(exact=f"{tally.exact}/{tally.total}", refresh=False)
            bar.close()
        finally:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass  # it stopped already
            if proc.wait() != 0 and tally.total == len(examples):
                raise DataError(f"{args.generate} failed (exit {proc.returncode}): {last_line(log)}")
    return tally


def share(k: int, n: int) -> str:
    return f"{k}/{n} ({100.0 * k / n:.1f} %)"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if not args.generate.is_file():
            raise DataError(f"{args.generate}: no such program (make generate)")
        examples = read_examples(args.input, args.limit)
        tally = evaluate(args, examples)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if tally.no_room:
        print(f"note: {tally.no_room} conversations left no room to answer in the model's context (counted wrong)",
              file=sys.stderr)
    print(f"accuracy: {share(tally.exact, tally.total)}")
    print(f"ended with end token: {share(tally.ended, tally.total)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
