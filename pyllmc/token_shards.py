"""
Token shards, the files every trainer reads its tokens from (llm.c's format), and the errors of llmc's data files.

    token shard: int32 header[256] = {magic, version, ntok, 0...}, then ntok little-endian tokens; each family
                 names its format (family.py's ShardFormat):
                 gpt-2:   magic 20240520, version 1, uint16 tokens (families/gpt2.py)
                 llama-3: magic 20240801, version 7, uint32 tokens (families/llama3.py)

`write_datafile` writes one atomically (`write_atomically`: a file under its final name is always complete);
`read_datafile` validates magic, version, length against the file's real size and the token range.
Every problem with a file is a `DataError` whose message is one line naming the file and what is wrong.
The references (train_gpt2.py, train_llama3.py) and the data scripts (dev/data/data_common.py) read and write
shards through here. numpy only; importing it has no side effects.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from pyllmc.family import ShardFormat
from pyllmc.families.gpt2 import GPT2
from pyllmc.families.llama3 import LLAMA3

HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4  # every llm.c-compatible file starts with 256 little-endian int32

# Magic numbers of the other llmc/llm.c files, to say what a wrongly passed file is.
KNOWN_MAGICS = {
    GPT2.model_magic: "a model checkpoint",
    GPT2.debug_state_magic: "a debug state file",
    GPT2.tokenizer_magic: "a tokenizer file",
    20240522: "an eval file",
    20240527: "a training state file",
}


class DataError(Exception):
    """A problem the user can fix; the message is one line naming the file (or flag) at fault."""


class DataFormatError(DataError, ValueError):
    """A file is not in the format it should be (wrong magic, truncated, out-of-range token, ...)."""


SHARD_FORMATS: dict[str, ShardFormat] = {family.shards.model_desc: family.shards for family in (GPT2, LLAMA3)}
MODEL_DESCS = tuple(SHARD_FORMATS)
_FORMAT_BY_MAGIC = {fmt.magic: fmt for fmt in SHARD_FORMATS.values()}


def shard_format(model_desc: str) -> ShardFormat:
    """The shard format for a model descriptor ("gpt-2" or "llama-3")."""
    if model_desc not in SHARD_FORMATS:
        raise DataError(f"unknown model descriptor {model_desc!r}, expected one of {', '.join(MODEL_DESCS)}")
    return SHARD_FORMATS[model_desc]


def one_line(message: object) -> str:
    """A message flattened to one line (library exceptions sometimes span several)."""
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


# ----------------------------------------------------------------------------- atomic writes


def write_atomically(path: Path, write: Callable[[Any], None]) -> Path:
    """Call write(file) on a temporary file in path's directory, then rename it to path.

    On any failure (or Ctrl-C) the temporary file is removed and path is left untouched, so a
    file that exists under its final name is always complete.
    """
    path = Path(path)
    # Not tempfile.mkstemp: its 0600 mode would stay on the final file; this honours the umask.
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise DataError(f"{path}: cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise DataError(f"{path}: cannot write: {e.strerror or e}") from None
        raise
    return path


# ----------------------------------------------------------------------------- token shards


def check_token_range(where: str, tokens: np.ndarray, vocab_size: int) -> None:
    """Every id in 0 .. vocab_size - 1; else a DataFormatError naming `where`, the first bad id and its position."""
    if tokens.size == 0:
        return
    if tokens.min() < 0:
        position = int(np.argmax(tokens < 0))
        raise DataFormatError(f"{where}: token id {int(tokens[position])} at position {position} is negative")
    if tokens.max() >= vocab_size:
        position = int(np.argmax(tokens >= vocab_size))
        raise DataFormatError(
            f"{where}: token id {int(tokens[position])} at position {position} >= vocab size {vocab_size}"
        )


def write_datafile(filename: str | Path, toks: Iterable[int] | np.ndarray, model_desc: str = "gpt-2",
                   vocab_size: int | None = None) -> Path:
    """Write a token shard (header + tokens) atomically; token ids must be < vocab_size (default: the format's
    vocab size; a tokenizer's own may be larger, up to what the format's token type holds: 65536 for gpt-2)."""
    fmt = shard_format(model_desc)
    path = Path(filename)
    vocab_size = fmt.vocab_size if vocab_size is None else vocab_size
    if not 1 <= vocab_size <= np.iinfo(fmt.dtype).max + 1:
        raise DataFormatError(f"{path}: vocab size {vocab_size} does not fit {model_desc} shards ({fmt.dtype.name} ids)")
    tokens = np.asarray(toks if isinstance(toks, (np.ndarray, list, tuple)) else list(toks))
    if tokens.size == 0:
        tokens = tokens.astype(np.int64)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise DataFormatError(f"{path}: tokens must be a 1-D sequence of integers, got {tokens.dtype} {tokens.shape}")
    if len(tokens) >= 2**31:
        raise DataFormatError(f"{path}: {len(tokens):,} tokens do not fit the int32 header count")
    check_token_range(str(path), tokens, vocab_size)
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = fmt.magic, fmt.version, len(tokens)
    body = np.ascontiguousarray(tokens, dtype=fmt.dtype)

    def write(f: Any) -> None:
        f.write(header.tobytes())
        f.write(memoryview(body).cast("B"))

    return write_atomically(path, write)


def read_header(path: Path, kind: str) -> tuple[np.ndarray, int]:
    """(header as int32[256], file size); names the file when it is missing or too short."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except FileNotFoundError:
        raise DataFormatError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataFormatError(f"{path}: is a directory, expected {kind}") from None
    except OSError as e:
        raise DataFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(raw) < HEADER_BYTES:
        raise DataFormatError(f"{path}: truncated: {len(raw)} bytes, shorter than the {HEADER_BYTES}-byte header")
    return np.frombuffer(raw, dtype="<i4"), size


def wrong_magic(path: Path, magic: int, expected: str, kind: str) -> DataFormatError:
    """The error for a file of `kind` whose magic is not `expected`, naming the file it is when KNOWN_MAGICS knows."""
    what = KNOWN_MAGICS.get(magic)
    why = f"this is {what}, not {kind}" if what else f"not {kind}"
    return DataFormatError(f"{path}: wrong magic {magic}, expected {expected} ({why})")


def read_datafile(path: str | Path, vocab_size: int | None = None) -> np.ndarray:
    """The tokens of a shard (a read-only np.memmap, uint16 or uint32 as the header says), validated.

    vocab_size defaults to 50257 for gpt-2 shards and 128256 for llama-3 shards.
    """
    path = Path(path)
    header, size = read_header(path, "a token shard")
    magic, version, ntok = int(header[0]), int(header[1]), int(header[2])
    fmt = _FORMAT_BY_MAGIC.get(magic)
    if fmt is None:
        expected = " or ".join(str(f.magic) for f in SHARD_FORMATS.values())
        raise wrong_magic(path, magic, expected, "a token shard")
    if version != fmt.version:
        raise DataFormatError(
            f"{path}: wrong version {version} for magic {magic} ({fmt.model_desc}), expected {fmt.version}"
        )
    if ntok < 0:
        raise DataFormatError(f"{path}: negative token count {ntok} in the header")
    expected_bytes = ntok * fmt.dtype.itemsize
    actual_bytes = size - HEADER_BYTES
    if actual_bytes != expected_bytes:
        problem = "truncated" if actual_bytes < expected_bytes else "trailing data"
        raise DataFormatError(
            f"{path}: {problem}: header says {ntok} tokens ({expected_bytes} bytes) "
            f"but {actual_bytes} bytes follow the header"
        )
    if ntok == 0:
        tokens: np.ndarray = np.zeros(0, dtype=fmt.dtype)
    else:
        tokens = np.memmap(path, dtype=fmt.dtype, mode="r", offset=HEADER_BYTES, shape=(ntok,))
    check_token_range(str(path), tokens, fmt.vocab_size if vocab_size is None else vocab_size)
    return tokens
