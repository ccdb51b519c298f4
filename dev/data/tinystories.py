"""TinyStories → token shards for llmc.

Downloads TinyStories_all_data.tar.gz (unless cached), unpacks it safely, tokenizes every story
with an EOT token before it, and writes TinyStories_val.bin (the first data*.json shard) and
TinyStories_train.bin (all the others) in the llm.c-compatible shard format.

    python dev/data/tinystories.py
    python dev/data/tinystories.py --model_desc llama-3 --num_proc 4
    python dev/data/tinystories.py --model_desc llama-3 --tokenizer dev/data/test_tokenizer
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import shutil
import sys
import tarfile
import zlib
from functools import partial
from pathlib import Path, PurePosixPath

import numpy as np
from tqdm import tqdm

from data_common import (
    add_num_proc_arg,
    add_url_arg,
    corpus_parser,
    download_unless_cached,
    get_tokenizer,
    run_script,
    write_splits,
)
from pyllmc.token_shards import DataError, DataFormatError, one_line, shard_format

URL = "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/TinyStories_all_data.tar.gz"
ARCHIVE_NAME = "TinyStories_all_data.tar.gz"
EXTRACTED_NAME = "TinyStories_all_data"
SHARD_PATTERN = "data*.json"
# Python >= 3.11.4 also vets members itself (the "data" filter); check_member does it on every version.
EXTRACT_OPTIONS = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
SHUFFLE_SEED = 1337  # stories of the i-th shard of a split are shuffled by random.Random(1337 + i), as the reference shards are


def check_member(archive: Path, member: tarfile.TarInfo) -> None:
    """Only plain files and directories with relative paths that stay inside the target directory."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts or member.name.startswith(("/", "\\")):
        raise DataFormatError(f"{archive}: unsafe member path {member.name!r} (absolute or with '..'); refusing to extract")
    if not (member.isfile() or member.isdir()):
        raise DataFormatError(f"{archive}: member {member.name!r} is a link or device, not a file; refusing to extract")


def extract_archive(archive: Path, dest: Path) -> Path:
    """Unpack archive into dest (skipped when dest exists); an interrupted unpack leaves no dest behind."""
    if dest.is_dir():
        print(f"using extracted {dest}")
        return dest
    tmp = dest.parent / f".{dest.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()  # reads the whole archive: a truncated one fails here
            for member in members:
                check_member(archive, member)
            with tqdm(total=len(members), desc=f"unpacking {archive.name}", unit="file") as bar:
                for member in members:
                    tar.extract(member, tmp, **EXTRACT_OPTIONS)
                    bar.update()
        os.replace(tmp, dest)
    except (tarfile.TarError, EOFError, zlib.error) as e:
        raise DataFormatError(f"{archive}: corrupt archive ({one_line(e)}); delete it to download again") from None
    except OSError as e:
        raise DataError(f"{archive}: cannot unpack into {dest.parent}: {one_line(e)}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def load_stories(path: Path) -> list[str]:
    """The "story" strings of one shard (a JSON list of objects); errors name the file and the item."""
    try:
        data = json.loads(path.read_bytes())
    except json.JSONDecodeError as e:
        raise DataFormatError(f"{path}: bad JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except UnicodeDecodeError as e:
        raise DataFormatError(f"{path}: not UTF-8 text (bad byte at offset {e.start})") from None
    except OSError as e:
        raise DataFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    if not isinstance(data, list):
        raise DataFormatError(f"{path}: expected a JSON list of stories, got {type(data).__name__}")
    stories = []
    for i, item in enumerate(data):
        story = item.get("story") if isinstance(item, dict) else None
        if not isinstance(story, str):
            raise DataFormatError(f"{path}: item {i} has no 'story' string")
        stories.append(story)
    return stories


def tokenize_shard(model_desc: str, shard: tuple[int, Path], tokenizer: str = "") -> np.ndarray:
    """All stories of one shard, shuffled reproducibly, each stripped and preceded by the EOT token
    (llama-3: <|begin_of_text|>).

    shard is (index of the shard within its split, path); the index seeds the shuffle; tokenizer is
    llama-3's --tokenizer path.
    """
    index, path = shard
    tok = get_tokenizer(model_desc, tokenizer)
    dtype = shard_format(model_desc).dtype
    stories = load_stories(path)
    random.Random(SHUFFLE_SEED + index).shuffle(stories)
    eot = np.array([tok.eot], dtype=dtype)
    parts = [eot[:0]]  # an empty start, so a shard without stories still concatenates
    for story in stories:  # small arrays per story: a shard of Python ints would take GBs
        parts.append(eot)
        parts.append(np.asarray(tok.encode(story.strip()), dtype=dtype))
    return np.concatenate(parts)


def find_shards(directory: Path) -> list[Path]:
    shards = sorted(directory.glob(SHARD_PATTERN))
    if len(shards) < 2:
        raise DataFormatError(
            f"{directory}: found {len(shards)} {SHARD_PATTERN} shard(s), need at least 2 (one val, the rest train); "
            "delete it and the archive to download again"
        )
    return shards


def tokenize_shards(shards: list[Path], model_desc: str, num_proc: int, tokenizer: str = "") -> list[np.ndarray]:
    """Token arrays of the shards, in order, tokenized by a pool of num_proc processes."""
    get_tokenizer(model_desc, tokenizer)  # a missing tokenizer fails here, once, before any worker starts
    work = partial(tokenize_shard, model_desc, tokenizer=tokenizer)
    # The shuffle seed counts shards within each split: val is shard 0, and so is the first train shard.
    items = [(0, shards[0])] + list(enumerate(shards[1:]))
    desc = f"tokenizing {len(shards)} shards"
    arrays = []
    with tqdm(total=len(items), desc=desc, unit="shard") as bar:  # closed before an error is printed
        if num_proc <= 1:
            for item in items:
                arrays.append(work(item))
                bar.update()
        else:
            with mp.Pool(min(num_proc, len(items))) as pool:
                for tokens in pool.imap(work, items):
                    arrays.append(tokens)
                    bar.update()
    return arrays


def build(data_dir: Path, model_desc: str, num_proc: int, url: str, tokenizer: str = "") -> str:
    """Download (unless cached), unpack, tokenize and write both shards; returns the summary line."""
    archive = download_unless_cached(url, data_dir / ARCHIVE_NAME)
    shards = find_shards(extract_archive(archive, data_dir / EXTRACTED_NAME))
    arrays = tokenize_shards(shards, model_desc, num_proc, tokenizer)
    splits = {"val": arrays[0], "train": np.concatenate(arrays[1:])}
    return write_splits(data_dir, "TinyStories", splits, model_desc, tokenizer)


def main(argv: list[str] | None = None) -> int:
    parser = corpus_parser("Tokenize TinyStories into llmc token shards (TinyStories_{val,train}.bin).",
                           "tinystories", f"where {ARCHIVE_NAME} is cached and unpacked and the shards are written")
    add_num_proc_arg(parser)
    add_url_arg(parser, URL, "archive")
    args = parser.parse_args(argv)
    return run_script(lambda: build(args.data_dir, args.model_desc, args.num_proc, args.url, args.tokenizer))


if __name__ == "__main__":
    sys.exit(main())
