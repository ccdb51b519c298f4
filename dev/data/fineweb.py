"""FineWeb / FineWeb-Edu → fixed-size token shards for llmc.

Every document gets an EOT token before it; the token stream is cut into shards of exactly
--shard_size tokens (documents continue across shard boundaries), the last shard holds the rest.
Shard 0 is the validation split. Files are named like the reference ones so existing scripts
find them: {edu_}fineweb_val_000000.bin, {edu_}fineweb_train_000001.bin, ...

    python dev/data/fineweb.py -t classic -v 10B            # HuggingFaceFW/fineweb sample-10BT
    python dev/data/fineweb.py -t edu -v 100B -s 100000000  # HuggingFaceFW/fineweb-edu sample-100BT
    python dev/data/fineweb.py --data_files my/*.parquet    # any local parquet/jsonl with a "text" column
    python dev/data/fineweb.py --model_desc llama-3 --tokenizer path/to/tokenizer.json  # uint32 shards, BOS per document
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np
from tqdm import tqdm

from data_common import (
    add_model_desc_arg,
    add_num_proc_arg,
    get_tokenizer,
    positive_int,
    run_script,
    script_parser,
)
from pyllmc.llama3_tokenizer import huggingface_reachable
from pyllmc.token_shards import DataError, DataFormatError, one_line, shard_format, write_datafile

HUB_DATASETS = {"classic": "HuggingFaceFW/fineweb", "edu": "HuggingFaceFW/fineweb-edu"}
HUB_CONFIGS = {"10B": "sample-10BT", "100B": "sample-100BT"}
SHARD_PREFIXES = {"classic": "fineweb", "edu": "edu_fineweb"}
LOCAL_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}
CHUNK_SIZE = 16  # documents per task sent to a tokenizing process


def shard_path(out_dir: Path, prefix: str, index: int) -> Path:
    split = "val" if index == 0 else "train"
    return out_dir / f"{prefix}_{split}_{index:06d}.bin"


def tokenize_document(model_desc: str, item: tuple[int, Mapping[str, Any]], tokenizer: str = "") -> np.ndarray:
    """EOT (llama-3: <|begin_of_text|>) followed by the tokens of one {"text": ...} row; item is (row number, row);
    tokenizer is llama-3's --tokenizer path."""
    index, row = item
    text = row.get("text") if isinstance(row, Mapping) else None
    if not isinstance(text, str):
        raise DataFormatError(f"row {index} has no 'text' string")
    tok = get_tokenizer(model_desc, tokenizer)
    tokens = [tok.eot]
    tokens.extend(tok.encode(text))
    return np.asarray(tokens, dtype=shard_format(model_desc).dtype)


@contextmanager
def document_mapper(num_proc: int) -> Iterator[Callable[..., Iterable[np.ndarray]]]:
    """An ordered, lazy map over documents: a process pool's imap, or plain map for one process."""
    if num_proc <= 1:
        yield lambda fn, items, chunksize: map(fn, items)
        return
    with mp.Pool(num_proc) as pool:
        yield pool.imap


def write_shards(
    rows: Iterable[Mapping[str, Any]],
    out_dir: Path,
    prefix: str = "fineweb",
    shard_size: int = 10**8,
    model_desc: str = "gpt-2",
    num_proc: int = 1,
    source: str = "dataset",
    tokenizer: str = "",
) -> list[Path]:
    """Tokenize rows ({"text": ...}) into shards of shard_size tokens in out_dir; returns the shard paths."""
    if not 1 <= shard_size < 2**31:
        raise DataError(f"--shard_size must be in 1..{2**31 - 1}, got {shard_size}")
    # a missing tokenizer fails here, once, before any worker starts; its vocab bounds the shards' ids
    vocab_size = get_tokenizer(model_desc, tokenizer).vocab_size
    out_dir.mkdir(parents=True, exist_ok=True)
    buffer = np.empty(shard_size, dtype=shard_format(model_desc).dtype)
    filled = 0
    written: list[Path] = []
    bar: tqdm | None = None
    try:
        with document_mapper(num_proc) as imap:
            for tokens in imap(partial(tokenize_document, model_desc, tokenizer=tokenizer), enumerate(rows), chunksize=CHUNK_SIZE):
                start = 0
                while start < len(tokens):
                    if bar is None:
                        bar = tqdm(total=shard_size, unit="tokens", desc=f"shard {len(written)}")
                    take = min(shard_size - filled, len(tokens) - start)
                    buffer[filled : filled + take] = tokens[start : start + take]
                    filled += take
                    start += take
                    bar.update(take)
                    if filled == shard_size:
                        path = shard_path(out_dir, prefix, len(written))
                        written.append(write_datafile(path, buffer, model_desc, vocab_size))
                        bar.close()
                        bar = None
                        filled = 0
    except DataFormatError as e:
        raise DataFormatError(f"{source}: {e}") from None
    finally:
        if bar is not None:
            bar.close()
    if filled:
        written.append(write_datafile(shard_path(out_dir, prefix, len(written)), buffer[:filled], model_desc, vocab_size))
    if not written:
        raise DataFormatError(f"{source}: no documents")
    return written


def root_cause(error: BaseException) -> str:
    """`Type: message` of the innermost exception: `datasets` wraps the useful one in generic errors."""
    while error.__cause__ is not None or (error.__context__ is not None and not error.__suppress_context__):
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return f"{type(error).__name__}: {one_line(error)[:300]}"


def load_local(data_files: list[Path]) -> tuple[Any, str]:
    """A local parquet or jsonl dataset through `datasets`, and a name for it in messages."""
    for path in data_files:
        if not path.is_file():
            raise DataError(f"--data_files: {path}: no such file")
    builders = {LOCAL_BUILDERS.get(path.suffix.lower()) for path in data_files}
    if None in builders or len(builders) != 1:
        raise DataError("--data_files: give only .parquet files or only .jsonl/.json files")
    source = str(data_files[0]) if len(data_files) == 1 else f"{data_files[0]} (+{len(data_files) - 1} files)"
    import datasets

    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its own error logs would repeat ours
    try:
        dataset = datasets.load_dataset(builders.pop(), data_files=[str(p) for p in data_files], split="train")
    except Exception as e:
        raise DataFormatError(f"{source}: cannot load: {root_cause(e)}") from None
    return dataset, source


def load_hub(kind: str, version: str) -> tuple[Any, str]:
    """The FineWeb sample from the Hugging Face hub (or its local cache when offline)."""
    name, config = HUB_DATASETS[kind], HUB_CONFIGS[version]
    source = f"{name} {config}"
    if not huggingface_reachable():
        # Offline the hub client retries for half a minute; offline mode goes straight to the local cache.
        os.environ["HF_HUB_OFFLINE"] = "1"
    import datasets

    try:
        dataset = datasets.load_dataset(name, name=config, split="train")
    except Exception as e:
        raise DataError(
            f"cannot load {source}: {root_cause(e)} "
            "(offline? run this where huggingface.co is reachable, or pass local files with --data_files)"
        ) from None
    return dataset, source


def check_text_column(dataset: Any, source: str) -> None:
    columns = getattr(dataset, "column_names", None)
    if columns is not None and "text" not in columns:
        raise DataFormatError(f"{source}: no 'text' column (columns: {', '.join(columns)})")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    parser = script_parser("Tokenize FineWeb or FineWeb-Edu (or local parquet/jsonl files) into llmc token shards.")
    parser.add_argument("-t", "--type", choices=tuple(HUB_DATASETS), default="classic",
                        help="classic: HuggingFaceFW/fineweb, edu: HuggingFaceFW/fineweb-edu (also the shard name prefix)")
    parser.add_argument("-v", "--version", choices=tuple(HUB_CONFIGS), default="10B",
                        help="sample size: 10B → sample-10BT, 100B → sample-100BT")
    add_model_desc_arg(parser)
    parser.add_argument("-s", "--shard_size", type=positive_int, default=10**8, help="tokens per shard")
    add_num_proc_arg(parser)
    parser.add_argument("--data_files", "--local_files", nargs="+", type=Path, default=None,
                        help="tokenize these local .parquet or .jsonl files (a 'text' column) instead of the hub dataset")
    parser.add_argument("--data_dir", type=Path, default=None,
                        help=f"output directory (default: {here}/{{edu_}}fineweb{{10B,100B}}, "
                             f"or {here}/{{edu_}}fineweb_local with --data_files)")
    args = parser.parse_args(argv)
    if args.data_dir is None:
        prefix = SHARD_PREFIXES[args.type]
        args.data_dir = here / (f"{prefix}_local" if args.data_files else f"{prefix}{args.version}")
    return args


def build(args: argparse.Namespace) -> str:
    """Load the hub sample or the local files and write the shards; returns the summary line."""
    dataset, source = load_local(args.data_files) if args.data_files else load_hub(args.type, args.version)
    check_text_column(dataset, source)
    shards = write_shards(dataset, args.data_dir, SHARD_PREFIXES[args.type], args.shard_size,
                          args.model_desc, args.num_proc, source, args.tokenizer)
    return f"wrote {len(shards)} shards ({shards[0].name} … {shards[-1].name}) to {args.data_dir}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_script(lambda: build(args))


if __name__ == "__main__":
    sys.exit(main())
