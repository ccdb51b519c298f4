"""Tiny Shakespeare → token shards for llmc.

Downloads the corpus (unless it is already in the data directory), tokenizes it and writes
tiny_shakespeare_val.bin (the first 32,768 tokens) and tiny_shakespeare_train.bin (the rest)
in the llm.c-compatible shard format. With gpt-2 that is 32,768 val and 305,260 train tokens.

    python dev/data/tinyshakespeare.py                 # works from any directory
    python dev/data/tinyshakespeare.py --model_desc llama-3
    python dev/data/tinyshakespeare.py --model_desc llama-3 --tokenizer dev/data/test_tokenizer --data_dir /tmp/ts
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from data_common import (
    Tokenizer,
    add_url_arg,
    corpus_parser,
    download_unless_cached,
    get_tokenizer,
    read_utf8,
    run_script,
    write_splits,
)
from pyllmc.token_shards import DataFormatError, shard_format

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TEXT_NAME = "tiny_shakespeare.txt"
VAL_TOKENS = 32768  # the first 32,768 tokens are the validation split


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


def build(data_dir: Path, model_desc: str, url: str, tokenizer: str = "") -> str:
    """Download, tokenize and write both shards; returns the summary line."""
    text_path = download_unless_cached(url, data_dir / TEXT_NAME)
    text = read_utf8(text_path, hint="; delete it to download again")
    tokens = tokenize(text, get_tokenizer(model_desc, tokenizer))
    if len(tokens) <= VAL_TOKENS:
        raise DataFormatError(
            f"{text_path}: only {len(tokens):,} tokens, need more than {VAL_TOKENS:,} for val and train; "
            "delete it to download again"
        )
    splits = {"val": tokens[:VAL_TOKENS], "train": tokens[VAL_TOKENS:]}
    return write_splits(data_dir, "tiny_shakespeare", splits, model_desc, tokenizer)


def main(argv: list[str] | None = None) -> int:
    parser = corpus_parser("Tokenize Tiny Shakespeare into llmc token shards (tiny_shakespeare_{val,train}.bin).",
                           "tinyshakespeare", f"where {TEXT_NAME} is cached and the shards are written")
    add_url_arg(parser, URL, "corpus")
    args = parser.parse_args(argv)
    return run_script(lambda: build(args.data_dir, args.model_desc, args.url, args.tokenizer))


if __name__ == "__main__":
    sys.exit(main())
