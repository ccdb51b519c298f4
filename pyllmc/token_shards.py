"""
Token shards, the files every trainer reads its tokens from (llm.c's format), and the errors of llmc's data files.

    token shard: int32 header[256] = {magic, version, ntok, 0...}, then ntok little-endian tokens; each family
                 names its format (family.py's ShardFormat):
                 gpt-2:   magic 20240520, version 1, uint16 tokens (families/gpt2.py)
                 llama-3: magic 20240801, version 7, uint32 tokens (families/llama3.py)
    chat shard:  int32 header[256] = {magic, chat_version, ntok, T, 0...}, then the ntok tokens as above, then ntok
                 uint8 loss-mask bytes: 1 where the token is a supervised target (an assistant's reply and its end
                 token), else 0. Conversations of exactly T tokens each (padded with mask 0), so ntok is a multiple
                 of T, and the first token of each conversation has mask 0 (no target crosses into the next one).
                 gpt-2: version 2 (uint16 tokens); llama-3: version 8 (uint32 tokens). dev/data/chat.py writes them.

`write_datafile` writes one atomically (`write_atomically`: a file under its final name is always complete);
`read_datafile` validates magic, version, length against the file's real size and the token range;
`write_chat_datafile` and `read_chat_datafile` do the same for chat shards (and their masks).
Every problem with a file is a `DataError` whose message is one line naming the file and what is wrong.
The references (train_gpt2.py, train_llama3.py) and the data scripts (dev/data/data_common.py) read and write
shards through here. numpy only; importing it has no side effects.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Callable, Iterable

from dataclasses import dataclass

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


@dataclass(frozen=True)
class ChatShard:
    """A chat shard's contents: tokens (ntok), mask (ntok, uint8 0/1: the token is a supervised target) and the
    conversation length T (ntok is a multiple of it)."""

    tokens: np.ndarray
    mask: np.ndarray
    seq_len: int


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
    body = _token_body(path, toks, fmt, model_desc, vocab_size)
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = fmt.magic, fmt.version, len(body)

    def write(f: Any) -> None:
        f.write(header.tobytes())
        f.write(memoryview(body).cast("B"))

    return write_atomically(path, write)


def _token_body(path: Path, toks: Iterable[int] | np.ndarray, fmt: ShardFormat, model_desc: str,
                vocab_size: int | None) -> np.ndarray:
    """The tokens as the format's little-endian dtype, checked: 1-D integers, an int32 count, ids < vocab_size."""
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
    return np.ascontiguousarray(tokens, dtype=fmt.dtype)


def check_chat_mask(where: str, mask: np.ndarray, ntok: int, seq_len: int) -> None:
    """A chat shard's mask: ntok bytes of 0 or 1, ntok a positive multiple of seq_len, 0 at every conversation's
    first token; else a DataFormatError naming `where` and the first problem."""
    if seq_len < 2:
        raise DataFormatError(f"{where}: conversation length T = {seq_len}, expected at least 2")
    if ntok == 0 or ntok % seq_len != 0:
        raise DataFormatError(f"{where}: {ntok} tokens are not a whole number of {seq_len}-token conversations")
    if len(mask) != ntok:
        raise DataFormatError(f"{where}: {len(mask)} mask bytes for {ntok} tokens")
    if mask.size and mask.max() > 1:
        position = int(np.argmax(mask > 1))
        raise DataFormatError(f"{where}: mask byte {int(mask[position])} at position {position}, expected 0 or 1")
    starts = mask[::seq_len]
    if starts.any():
        position = int(np.argmax(starts)) * seq_len
        raise DataFormatError(f"{where}: mask 1 at position {position}, the first token of a conversation")


def write_chat_datafile(filename: str | Path, tokens: Iterable[int] | np.ndarray, mask: Iterable[int] | np.ndarray,
                        seq_len: int, model_desc: str = "gpt-2", vocab_size: int | None = None) -> Path:
    """Write a chat shard (header, tokens, mask bytes) atomically: conversations of exactly seq_len tokens each,
    mask 1 on the supervised targets (check_chat_mask's rules); ids < vocab_size as for write_datafile."""
    fmt = shard_format(model_desc)
    path = Path(filename)
    body = _token_body(path, tokens, fmt, model_desc, vocab_size)
    mask_bytes = np.ascontiguousarray(np.asarray(mask), dtype=np.uint8)
    if np.asarray(mask).size and (np.asarray(mask).min() < 0 or np.asarray(mask).max() > 1):
        raise DataFormatError(f"{path}: mask values must be 0 or 1")
    check_chat_mask(str(path), mask_bytes, len(body), seq_len)
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2], header[3] = fmt.magic, fmt.chat_version, len(body), seq_len

    def write(f: Any) -> None:
        f.write(header.tobytes())
        f.write(memoryview(body).cast("B"))
        f.write(mask_bytes.tobytes())

    return write_atomically(path, write)


def is_chat_shard(path: str | Path) -> bool:
    """Whether the file's header is a chat shard's (a known shard magic with its chat version); False otherwise,
    including for files that are not shards at all (read_datafile / read_chat_datafile say what is wrong)."""
    try:
        header, _ = read_header(Path(path), "a token shard")
    except DataFormatError:
        return False
    fmt = _FORMAT_BY_MAGIC.get(int(header[0]))
    return fmt is not None and int(header[1]) == fmt.chat_version


def read_chat_datafile(path: str | Path, vocab_size: int | None = None) -> ChatShard:
    """A chat shard's tokens, mask and T (read-only np.memmaps), validated as read_datafile does plus the mask."""
    path = Path(path)
    fmt, header = _shard_header(path, chat=True)
    ntok, seq_len = int(header[2]), int(header[3])
    tokens = np.memmap(path, dtype=fmt.dtype, mode="r", offset=HEADER_BYTES, shape=(ntok,))
    mask = np.memmap(path, dtype=np.uint8, mode="r", offset=HEADER_BYTES + ntok * fmt.dtype.itemsize, shape=(ntok,))
    check_token_range(str(path), tokens, fmt.vocab_size if vocab_size is None else vocab_size)
    check_chat_mask(str(path), mask, ntok, seq_len)
    return ChatShard(tokens, mask, seq_len)


def _shard_header(path: Path, chat: bool) -> tuple[ShardFormat, np.ndarray]:
    """The format and header of a token shard (chat: a chat shard), checked: magic, version (the other kind of shard
    named), token count, and the file's size against the count (tokens, and for a chat shard as many mask bytes)."""
    kind = "a chat shard" if chat else "a token shard"
    header, size = read_header(path, kind)
    magic, version, ntok = int(header[0]), int(header[1]), int(header[2])
    fmt = _FORMAT_BY_MAGIC.get(magic)
    if fmt is None:
        expected = " or ".join(str(f.magic) for f in SHARD_FORMATS.values())
        raise wrong_magic(path, magic, expected, kind)
    want, other = (fmt.chat_version, fmt.version) if chat else (fmt.version, fmt.chat_version)
    if version == other and chat:
        raise DataFormatError(f"{path}: a token shard without a loss mask (version {version}), not a chat shard "
                              f"(version {fmt.chat_version}); python dev/data/chat.py writes chat shards")
    if version == other:
        raise DataFormatError(f"{path}: a chat shard (tokens and a loss mask, version {version}): read it with "
                              "read_chat_datafile")
    if version != want:
        raise DataFormatError(f"{path}: wrong version {version} for magic {magic} ({fmt.model_desc}), expected {want}")
    if ntok < 0:
        raise DataFormatError(f"{path}: negative token count {ntok} in the header")
    if chat and ntok == 0:
        raise DataFormatError(f"{path}: token count 0 in the header, expected a positive one")
    expected_bytes = ntok * (fmt.dtype.itemsize + chat)
    actual_bytes = size - HEADER_BYTES
    if actual_bytes != expected_bytes:
        problem = "truncated" if actual_bytes < expected_bytes else "trailing data"
        counts = f"{ntok} tokens and {ntok} mask bytes" if chat else f"{ntok} tokens"
        raise DataFormatError(f"{path}: {problem}: header says {counts} ({expected_bytes} bytes) "
                              f"but {actual_bytes} bytes follow the header")
    return fmt, header


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
    fmt, header = _shard_header(path, chat=False)
    ntok = int(header[2])
    if ntok == 0:
        tokens: np.ndarray = np.zeros(0, dtype=fmt.dtype)
    else:
        tokens = np.memmap(path, dtype=fmt.dtype, mode="r", offset=HEADER_BYTES, shape=(ntok,))
    check_token_range(str(path), tokens, fmt.vocab_size if vocab_size is None else vocab_size)
    return tokens
