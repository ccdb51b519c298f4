"""HellaSwag → an llmc eval file (hellaswag_val.bin) for the trainers' `-h 1` evaluation.

Each example is rendered as its context tokens and four completions, every completion being the
tokens of " " + ending, plus the index of the right one (the label). The C/CUDA trainers score the
completions by their loss and count how often the lowest one is the label.

    python dev/data/hellaswag.py                  # downloads hellaswag_val.jsonl unless cached
    python dev/data/hellaswag.py --split train
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from data_common import (
    EVAL_NUM_COMPLETIONS,
    DataError,
    DataFormatError,
    Tokenizer,
    download_unless_cached,
    get_tokenizer,
    report_error,
    write_evalfile,
)

URL_TEMPLATE = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_{split}.jsonl"
SPLITS = ("val", "train")  # the test split has no labels


def default_data_dir() -> Path:
    return Path(__file__).resolve().parent / "hellaswag"


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
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFormatError(f"{path}: not UTF-8 text (bad byte at offset {e.start})") from None
    except OSError as e:
        raise DataFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    examples = [parse_example(path, n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
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


def build(data_dir: Path, split: str, url: str | None) -> tuple[Path, int]:
    jsonl = download_unless_cached(url or URL_TEMPLATE.format(split=split), data_dir / f"hellaswag_{split}.jsonl")
    examples = read_examples(jsonl)
    tok = get_tokenizer("gpt-2")  # the eval format stores uint16 tokens: gpt-2 only
    rendered = []
    with tqdm(total=len(examples), desc=f"hellaswag {split}", unit="example") as bar:
        for example in examples:
            rendered.append(render_example(example, tok))
            bar.update()
    out = data_dir / f"hellaswag_{split}.bin"
    write_evalfile(out, rendered)
    return out, len(rendered)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Render HellaSwag into an llmc eval file (hellaswag_{split}.bin).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--data_dir", type=Path, default=default_data_dir(),
                        help="where the jsonl is cached and the eval file is written")
    parser.add_argument("-s", "--split", choices=SPLITS, default="val", help="which split to render")
    parser.add_argument("--url", default=None,
                        help="where to download the jsonl from when it is not cached (default: the HellaSwag repository)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        out, count = build(args.data_dir, args.split, args.url)
    except (DataError, KeyboardInterrupt) as e:
        return report_error(e)
    print(f"wrote {count:,} examples to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
