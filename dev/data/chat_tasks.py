"""Small chat tasks made offline, each with an exact expected answer: conversations a small model can learn on a CPU
in minutes of fine-tuning, for dev/data/chat.py (chat shards) and dev/eval/chat_eval.py (exact-answer accuracy).

    lookup   a table of 3 to 5 "word: number" lines in the user's message, then "What is WORD?"; the answer is its
             number ("What is king?" -> "42")
    reverse  "Reverse: WORD WORD WORD"; the answer is the three words in reverse order, space separated

The words are the most frequent short lowercase words of Tiny Shakespeare (dev/data/tinyshakespeare.py's cached
text). A quarter of the conversations open with a system message. Everything follows from --seed; train and val hold
no user message in common. Writes <data_dir>/<task>_train.jsonl and <task>_val.jsonl, one {"messages": [...]} per line
(the answer is the last assistant message's content).

    python dev/data/chat_tasks.py --task lookup --n_train 2000 --n_val 200 --seed 1 --data_dir DIR
    python dev/data/chat.py --input DIR/lookup_train.jsonl --val DIR/lookup_val.jsonl -t 64 --data_dir DIR
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Callable

from data_common import find_corpus, positive_int, read_utf8, run_script, script_parser
from pyllmc.token_shards import DataError, write_atomically

WORDS = 100  # how many of the corpus's most frequent words the tasks draw from
WORD_LENGTHS = range(3, 7)  # letters per word
SYSTEM_SHARE = 0.25  # of conversations open with a system message
Conversation = list[dict[str, str]]


def corpus_words(text: str, count: int = WORDS) -> list[str]:
    """The `count` most frequent all-lowercase words of WORD_LENGTHS letters (ties in alphabetical order)."""
    counts = Counter(word for word in re.findall(r"\b[a-z]+\b", text) if len(word) in WORD_LENGTHS)
    words = [word for word, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:count]]
    if len(words) < count:
        raise DataError(f"the corpus has only {len(words)} distinct lowercase words of {WORD_LENGTHS.start} to "
                        f"{WORD_LENGTHS.stop - 1} letters, the tasks need {count}")
    return words


def lookup(rng: random.Random, words: list[str]) -> tuple[str, str, str]:
    """(system message, user message, answer): a table of 3 to 5 words with distinct numbers, one word asked."""
    keys = rng.sample(words, rng.randint(3, 5))
    values = rng.sample(range(100), len(keys))
    asked = rng.randrange(len(keys))
    table = "\n".join(f"{key}: {value}" for key, value in zip(keys, values))
    return "Answer with the number only.", f"{table}\nWhat is {keys[asked]}?", str(values[asked])


def reverse(rng: random.Random, words: list[str]) -> tuple[str, str, str]:
    """(system message, user message, answer): three distinct words, to be said in reverse order."""
    picked = rng.sample(words, 3)
    return "Answer with the words only.", "Reverse: " + " ".join(picked), " ".join(reversed(picked))


TASKS: dict[str, Callable[[random.Random, list[str]], tuple[str, str, str]]] = {"lookup": lookup, "reverse": reverse}


def conversations(task: str, words: list[str], count: int, seed: int) -> list[Conversation]:
    """`count` conversations of the task with distinct user messages, drawn in order from the seed."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[Conversation] = []
    for _ in range(20 * count):
        system, user, answer = TASKS[task](rng, words)
        with_system = rng.random() < SYSTEM_SHARE
        if user in seen:
            continue
        seen.add(user)
        messages = [{"role": "system", "content": system}] if with_system else []
        out.append(messages + [{"role": "user", "content": user}, {"role": "assistant", "content": answer}])
        if len(out) == count:
            return out
    raise DataError(f"--task {task}: only {len(out)} distinct conversations in {20 * count} draws, {count} asked")


def write_jsonl(paths: dict[Path, list[Conversation]]) -> None:
    """Each file, one {"messages": [...]} per line, written atomically; on a failure the ones written are removed."""
    written: list[Path] = []
    try:
        for path, items in paths.items():
            text = "".join(json.dumps({"messages": messages}, ensure_ascii=False) + "\n" for messages in items)
            written.append(write_atomically(path, lambda f, text=text: f.write(text.encode("utf-8"))))
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise


def build(args: argparse.Namespace) -> str:
    source = find_corpus(args.corpus)
    words = corpus_words(read_utf8(source, hint=" (run python dev/data/tinyshakespeare.py, or pass --corpus)"))
    drawn = conversations(args.task, words, args.n_train + args.n_val, args.seed)
    train, val = args.data_dir / f"{args.task}_train.jsonl", args.data_dir / f"{args.task}_val.jsonl"
    write_jsonl({train: drawn[: args.n_train], val: drawn[args.n_train :]})
    return (f"wrote {train} ({args.n_train:,} conversations) and {val} ({args.n_val:,}): task {args.task}, seed "
            f"{args.seed}, {len(words)} words from {source}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = script_parser("Write a small chat task with exact answers as train and val JSONL "
                           "(<task>_train.jsonl, <task>_val.jsonl) for dev/data/chat.py.",
                           "chat", "where the JSONL files are written")
    parser.add_argument("--task", choices=list(TASKS), required=True,
                        help="lookup: a number from a small table in the prompt; reverse: three words reversed")
    parser.add_argument("--n_train", type=positive_int, default=2000, help="training conversations")
    parser.add_argument("--n_val", type=positive_int, default=200, help="held-out conversations")
    parser.add_argument("--seed", type=int, default=1337, help="everything follows from it")
    parser.add_argument("--corpus", type=Path, default=None,
                        help="the text the words come from (default: the cached Tiny Shakespeare)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_script(lambda: build(args))


if __name__ == "__main__":
    sys.exit(main())
