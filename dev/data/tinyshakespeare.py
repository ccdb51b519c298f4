"""Tiny Shakespeare → token shards for llmc.

Downloads the corpus (unless it is already in the data directory), tokenizes it and writes
tiny_shakespeare_val.bin (the first 32,768 tokens) and tiny_shakespeare_train.bin (the rest)
in the llm.c-compatible shard format. With gpt-2 that is 32,768 val and 305,260 train tokens.

    python dev/data/tinyshakespeare.py                 # works from any directory
    python dev/data/tinyshakespeare.py --model_desc llama-3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from data_common import (
    MODEL_DESCS,
    DataError,
    DataFormatError,
    Tokenizer,
    download_unless_cached,
    get_tokenizer,
    report_error,
    shard_format,
    write_datafile,
)

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TEXT_NAME = "tiny_shakespeare.txt"
VAL_TOKENS = 32768  # the first 32,768 tokens are the validation split


def default_data_dir() -> Path:
    return Path(__file__).resolve().parent / "tinyshakespeare"


def read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFormatError(f"{path}: not UTF-8 text (bad byte at offset {e.start}); delete it to download again") from None
    except OSError as e:
        raise DataFormatError(f"{path}: cannot read: {e.strerror or e}") from None


def tokenize(text: str, tok: Tokenizer) -> np.ndarray:
    """The text split into blank-line separated sections, each preceded by the EOT token.

    Each section keeps its trailing "\\n\\n" (all but the last), so the EOT token sits right after
    every blank line: that is the layout of the reference shards (32,768 + 305,260 gpt-2 tokens).
    """
    sections = text.split("\n\n")
    tokens: list[int] = []
    for i, section in enumerate(sections):
        tokens.append(tok.eot)
        tokens.extend(tok.encode(section + "\n\n" if i != len(sections) - 1 else section))
    return np.asarray(tokens, dtype=shard_format(tok.model_desc).dtype)


def build(data_dir: Path, model_desc: str, url: str) -> tuple[int, int]:
    """Download, tokenize and write both shards; returns (val tokens, train tokens)."""
    text_path = download_unless_cached(url, data_dir / TEXT_NAME)
    text = read_text(text_path)
    tokens = tokenize(text, get_tokenizer(model_desc))
    if len(tokens) <= VAL_TOKENS:
        raise DataFormatError(
            f"{text_path}: only {len(tokens):,} tokens, need more than {VAL_TOKENS:,} for val and train; "
            "delete it to download again"
        )
    val, train = tokens[:VAL_TOKENS], tokens[VAL_TOKENS:]
    for split, split_tokens in (("val", val), ("train", train)):
        path = data_dir / f"tiny_shakespeare_{split}.bin"
        print(f"writing {len(split_tokens):,} tokens to {path}")
        write_datafile(path, split_tokens, model_desc)
    return len(val), len(train)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Tokenize Tiny Shakespeare into llmc token shards (tiny_shakespeare_{val,train}.bin).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--data_dir", type=Path, default=default_data_dir(),
                        help=f"where {TEXT_NAME} is cached and the shards are written")
    parser.add_argument("-m", "--model_desc", choices=MODEL_DESCS, default="gpt-2",
                        help="tokenizer and shard format (llama-3 needs its gated Hugging Face tokenizer)")
    parser.add_argument("--url", default=URL, help="where to download the corpus from when it is not cached")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        n_val, n_train = build(args.data_dir, args.model_desc, args.url)
    except (DataError, KeyboardInterrupt) as e:
        return report_error(e)
    print(f"tiny_shakespeare ({args.model_desc}): {n_val:,} val tokens, {n_train:,} train tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
