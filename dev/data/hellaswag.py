"""HellaSwag → an llmc eval file (hellaswag_val.bin) for the trainers' `-h 1` evaluation.

Each example is rendered as its context tokens and four completions, every completion being the
tokens of " " + ending, plus the index of the right one (the label). The C/CUDA trainers score the
completions by their loss and count how often the lowest one is the label.

    python dev/data/hellaswag.py                  # downloads hellaswag_val.jsonl unless cached
    python dev/data/hellaswag.py --split train
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from data_common import (
    EVAL_NUM_COMPLETIONS,
    Tokenizer,
    download_unless_cached,
    get_tokenizer,
    read_utf8,
    run_script,
    script_parser,
    write_evalfile,
)
from pyllmc.token_shards import DataFormatError

URL_TEMPLATE = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_{split}.jsonl"
SPLITS = ("val", "train")  # the test split has no labels


def parse_example(path: Path, line_number: int, line: str) -> dict[str, Any]:
    """One jsonl line as {"ctx": str, "label": int, "endings": [4 str]}; errors name the file and line."""
    where = f"{path}:{line_number}"
    try:
        example = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataFormatError(f"{where}: bad JSON: {e.msg} at column {e.colno}") from None
    if not isinstance(example, dict):
        raise DataFormatError(f"{where}: expected a JSON object, got {type(example).__name__}")
    ctx, label, endings = example.get("ctx"), example.get("label"), example.get("endings")
    if not isinstance(ctx, str) or not ctx:
        raise DataFormatError(f"{where}: 'ctx' must be a non-empty string")
    if not isinstance(endings, list) or len(endings) != EVAL_NUM_COMPLETIONS or not all(
        isinstance(e, str) for e in endings
    ):
        raise DataFormatError(f"{where}: 'endings' must be a list of {EVAL_NUM_COMPLETIONS} strings")
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < EVAL_NUM_COMPLETIONS:
        raise DataFormatError(f"{where}: 'label' must be an integer in 0..{EVAL_NUM_COMPLETIONS - 1}, got {label!r}")
    return {"ctx": ctx, "label": label, "endings": endings}


def read_examples(path: Path) -> list[dict[str, Any]]:
    lines = read_utf8(path).splitlines()
    examples = [parse_example(path, n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    if not examples:
        raise DataFormatError(f"{path}: no examples")
    return examples


def render_example(example: dict[str, Any], tok: Tokenizer) -> dict[str, Any]:
    """Token form of one example: the context, and each ending with its leading space (as GPT-2 sees it)."""
    return {
        "label": example["label"],
        "ctx_tokens": tok.encode(example["ctx"]),
        "ending_tokens": [tok.encode(" " + ending) for ending in example["endings"]],
    }


def build(data_dir: Path, split: str, url: str | None) -> str:
    """Download (unless cached), render and write hellaswag_{split}.bin; returns the summary line."""
    jsonl = download_unless_cached(url or URL_TEMPLATE.format(split=split), data_dir / f"hellaswag_{split}.jsonl")
    examples = read_examples(jsonl)
    tok = get_tokenizer("gpt-2")  # the eval format stores uint16 tokens: gpt-2 only
    rendered = [render_example(example, tok) for example in tqdm(examples, desc=f"hellaswag {split}", unit="example")]
    out = write_evalfile(data_dir / f"hellaswag_{split}.bin", rendered)
    return f"wrote {len(rendered):,} examples to {out}"


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(
        "Render HellaSwag into an llmc eval file (hellaswag_{split}.bin).",
        "hellaswag", "where the jsonl is cached and the eval file is written",
    )
    parser.add_argument("-s", "--split", choices=SPLITS, default="val", help="which split to render")
    parser.add_argument("--url", default=None,
                        help="where to download the jsonl from when it is not cached (default: the HellaSwag repository)")
    args = parser.parse_args(argv)
    return run_script(lambda: build(args.data_dir, args.split, args.url))


if __name__ == "__main__":
    sys.exit(main())
