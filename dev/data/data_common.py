"""Shared pieces of the llmc dataset scripts.

- downloads that never leave a half-written file behind (`download_file`),
- the tokenizers the scripts use (`get_tokenizer`: tiktoken's gpt2, or a llama-3 tokenizer.json from the hub or
  a local path, llama3_tokenizer.py's `load_llama3_tokenizer`, or for gpt-2 shards a checkpoint's own
  tokenizer.json, a NanoChat's: `load_checkpoint_tokenizer`),
- the eval file, its writer and validating reader:
    eval file:   int32 header[256] = {20240522, 1, number of examples, longest example in bytes, 0...},
                 then per example a uint16 record:
                 65535, record bytes, example index, label, completions (4),
                 context length, context tokens, then per completion: length, tokens
  (the token shards, their writer and reader and the errors of every data file are token_shards.py's, in the
  repository root, which the references import too),

- what every dataset script's command line and main() share: `script_parser`, `add_model_desc_arg`,
  `corpus_parser` and `add_url_arg` (a downloaded corpus), `add_num_proc_arg`, `positive_int`, `run_script`, and
  the split writer `write_splits`.

Every problem with a file is reported as a `DataError` (token_shards.py) whose message is one line naming the file
and what is wrong; the scripts print it as `error: <message>` and exit 1 (`run_script`).

The root modules (token_shards, llama3_tokenizer, the families) are imported as installed: `make setup` installs
the project into the venv. Importing this module has no side effects.
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

import pyllmc.families.gpt2 as gpt2_family
from pyllmc.family import ShardFormat
from pyllmc.families.llama3 import HUB_TOKENIZER
from pyllmc.llama3_tokenizer import load_checkpoint_tokenizer, load_llama3_tokenizer
from pyllmc.token_shards import (
    HEADER_BYTES,
    HEADER_INTS,
    MODEL_DESCS,
    DataError,
    DataFormatError,
    check_token_range,
    one_line,
    read_header,
    shard_format,
    write_atomically,
    write_datafile,
    wrong_magic,
)

EVAL_MAGIC = 20240522
EVAL_VERSION = 1
EVAL_START_MARKER = 65535  # first uint16 of every eval record
EVAL_NUM_COMPLETIONS = 4  # HellaSwag: four endings per example (the C eval loader expects 4)
EVAL_VOCAB_SIZE = gpt2_family.VOCAB_SIZE  # eval files hold gpt-2 tokens as uint16


class DownloadError(DataError):
    """A download failed (offline, refused, timed out, cut short, HTTP error)."""


def report_error(error: BaseException) -> int:
    """Print `error: <message>` on one line to stderr; returns the exit status for main() (130 for Ctrl-C)."""
    if isinstance(error, KeyboardInterrupt):
        print("error: interrupted (files already written are complete; the others were not created)", file=sys.stderr)
        return 130
    print(f"error: {one_line(error)}", file=sys.stderr)
    return 1


# ----------------------------------------------------------------------------- command lines


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def script_parser(description: str, data_dir: str | None = None, data_dir_help: str = "") -> argparse.ArgumentParser:
    """The parser of a dataset script: its description, every default shown in --help and, when data_dir is
    given, a first option --data_dir defaulting to dev/data/<data_dir>."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    if data_dir is not None:
        parser.add_argument("--data_dir", type=Path, default=Path(__file__).resolve().parent / data_dir,
                            help=data_dir_help)
    return parser


def add_model_desc_arg(parser: argparse.ArgumentParser) -> None:
    """-m/--model_desc: the tokenizer and shard format; --tokenizer: llama-3's tokenizer.json (or its directory)."""
    parser.add_argument("-m", "--model_desc", choices=MODEL_DESCS, default="gpt-2",
                        help="tokenizer and shard format (llama-3: uint32 shards, <|begin_of_text|> starts every "
                             "document, or <|endoftext|> for a tokenizer without BOS)")
    parser.add_argument("--tokenizer", default="",
                        help=f"a tokenizer.json or a directory holding one: llama-3's (default: the hub's gated "
                             f"{HUB_TOKENIZER} tokenizer), or with gpt-2 a checkpoint's own (a NanoChat's: <|bos|> "
                             f"starts every document, ids below 65536; default: tiktoken's gpt2)")


def corpus_parser(description: str, data_dir: str, data_dir_help: str) -> argparse.ArgumentParser:
    """The parser of a script that tokenizes one downloaded corpus into shards: script_parser's --data_dir, then
    add_model_desc_arg's -m/--model_desc and --tokenizer."""
    parser = script_parser(description, data_dir, data_dir_help)
    add_model_desc_arg(parser)
    return parser


def add_url_arg(parser: argparse.ArgumentParser, url: str, what: str) -> None:
    """--url: where the corpus (`what`: the file's kind, in the help) is downloaded from when it is not cached."""
    parser.add_argument("--url", default=url, help=f"where to download the {what} from when it is not cached")


def add_num_proc_arg(parser: argparse.ArgumentParser) -> None:
    """-n/--num_proc: tokenizing processes, by default one per core but one."""
    parser.add_argument("-n", "--num_proc", type=positive_int, default=max(1, (os.cpu_count() or 1) - 1),
                        help="tokenizing processes")


def run_script(work: Callable[[], str]) -> int:
    """The body of every dataset script's main(): run work and print the summary line it returns (exit
    status 0), or print the DataError or Ctrl-C that stopped it as one `error:` line (1, or 130)."""
    try:
        summary = work()
    except (DataError, KeyboardInterrupt) as e:
        return report_error(e)
    print(summary)
    return 0


def read_utf8(path: Path, hint: str = "") -> str:
    """The text of path; a missing, unreadable or non-UTF-8 file is a DataFormatError (hint is appended)."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFormatError(f"{path}: not UTF-8 text (bad byte at offset {e.start}){hint}") from None
    except OSError as e:
        raise DataFormatError(f"{path}: cannot read: {e.strerror or e}") from None


# the cached Tiny Shakespeare text (dev/data/tinyshakespeare.py downloads it), else the machine's seed copy (../shared)
TINYSHAKESPEARE_TEXTS = [Path(__file__).resolve().parent / "tinyshakespeare" / "tiny_shakespeare.txt",
                         Path(__file__).resolve().parents[3] / "shared" / "data" / "tinyshakespeare" / "input.txt"]


def find_corpus(path: Path | None) -> Path:
    """The Tiny Shakespeare text: --corpus PATH, else the cached one (TINYSHAKESPEARE_TEXTS); DataError when none is."""
    if path is not None:
        if not path.is_file():
            raise DataError(f"--corpus {path}: no such file (python dev/data/tinyshakespeare.py downloads Tiny "
                            f"Shakespeare to {TINYSHAKESPEARE_TEXTS[0]})")
        return path
    for candidate in TINYSHAKESPEARE_TEXTS:
        if candidate.is_file():
            return candidate
    raise DataError(f"no corpus: {TINYSHAKESPEARE_TEXTS[0]} is missing (run python dev/data/tinyshakespeare.py, or "
                    "pass --corpus)")


# ----------------------------------------------------------------------------- downloads


def download_file(url: str, dest: Path, chunk_size: int = 1 << 20, timeout: float = 30.0) -> Path:
    """Download url to dest with a progress bar; raises DownloadError with a one-line reason.

    timeout bounds the connection and every read, so a dead server cannot hang us. The data goes to
    a temporary file that is renamed to dest only after the whole body (as announced by
    Content-Length, when the server sends one) has arrived.
    """
    from tqdm import tqdm

    dest = Path(dest)

    def failure(reason: object) -> DownloadError:
        return DownloadError(
            f"cannot download {url}: {one_line(reason)} (offline? place the file at {dest} to skip the download)"
        )

    def fetch(out: Any) -> None:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                length = response.headers.get("Content-Length")
                total = int(length) if length is not None and length.isdigit() else None
                received = 0
                with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=dest.name) as bar:
                    while chunk := response.read(chunk_size):
                        out.write(chunk)
                        received += len(chunk)
                        bar.update(len(chunk))
        except urllib.error.HTTPError as e:
            raise failure(f"HTTP {e.code} {e.reason}") from None
        except urllib.error.URLError as e:
            raise failure(e.reason) from None
        except TimeoutError:
            raise failure(f"no data for {timeout:g} s (timed out)") from None
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise failure(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__) from None
        if total is not None and received != total:
            raise failure(f"connection closed after {received} of {total} bytes")

    return write_atomically(dest, fetch)


def download_unless_cached(url: str, dest: Path) -> Path:
    """dest if it already exists (the offline cache), else download it there."""
    dest = Path(dest)
    if dest.is_file():
        print(f"using cached {dest}")
        return dest
    print(f"downloading {url} to {dest}")
    return download_file(url, dest)


# ----------------------------------------------------------------------------- tokenizers


@dataclass(frozen=True)
class Tokenizer:
    model_desc: str
    eot: int  # the token put before every document
    vocab_size: int
    encode: Callable[[str], list[int]]  # plain text; special-token text is encoded as ordinary text
    decode: Callable[[Sequence[int]], str]


@lru_cache(maxsize=None)
def get_tokenizer(model_desc: str, tokenizer_path: str = "") -> Tokenizer:
    """The tokenizer for "gpt-2" (tiktoken gpt2, or tokenizer_path: a checkpoint's tokenizer.json or its directory)
    or "llama-3" (tokenizer_path: a tokenizer.json or a directory holding one; "" = the hub's gated Llama 3
    tokenizer); cached per process."""
    fmt = shard_format(model_desc)
    if model_desc == "gpt-2" and tokenizer_path:
        tok = load_checkpoint_tokenizer(tokenizer_path)
        if tok.vocab_size > np.iinfo(fmt.dtype).max + 1:
            raise DataError(f"{tok.source}: {tok.vocab_size} tokens, more than gpt-2 shards' uint16 ids hold")
        return Tokenizer("gpt-2", tok.bos, tok.vocab_size, tok.encode, tok.decode)
    if model_desc == "gpt-2":
        return _load_gpt2(fmt)
    tok = load_llama3_tokenizer(tokenizer_path)
    if tok.vocab_size > np.iinfo(fmt.dtype).max + 1:  # the bound is the tokenizer's vocab, not Llama 3's 128,256
        raise DataError(f"{tok.source}: {tok.vocab_size} tokens, more than llama-3 shards' uint32 ids hold")
    return Tokenizer("llama-3", tok.bos, tok.vocab_size, tok.encode, tok.decode)


def _load_gpt2(fmt: ShardFormat) -> Tokenizer:
    try:
        import tiktoken

        enc = tiktoken.get_encoding("gpt2")
    except Exception as e:
        raise DataError(
            f"cannot load tiktoken's gpt2 encoding: {type(e).__name__}: {one_line(e)[:200]} "
            "(offline? set TIKTOKEN_CACHE_DIR to a directory holding tiktoken's cached gpt2 files)"
        ) from None
    return Tokenizer("gpt-2", enc.eot_token, fmt.vocab_size, enc.encode_ordinary, enc.decode)


# ----------------------------------------------------------------------------- token shards


def write_splits(data_dir: Path, name: str, splits: Mapping[str, np.ndarray], model_desc: str,
                 tokenizer: str = "") -> str:
    """Write {name}_{split}.bin in data_dir for each split (e.g. val, train), ids checked against the vocab of the
    tokenizer (get_tokenizer's); returns the summary line `name (model_desc): N val tokens, M train tokens`."""
    vocab_size = get_tokenizer(model_desc, tokenizer).vocab_size
    for split, tokens in splits.items():
        path = data_dir / f"{name}_{split}.bin"
        print(f"writing {len(tokens):,} tokens to {path}")
        write_datafile(path, tokens, model_desc, vocab_size)
    counts = ", ".join(f"{len(tokens):,} {split} tokens" for split, tokens in splits.items())
    return f"{name} ({model_desc}): {counts}"


# ----------------------------------------------------------------------------- eval files


def _eval_record(index: int, example: Mapping[str, Any]) -> list[int]:
    """The uint16 record of one example; raises DataFormatError naming the example when it is malformed."""
    where = f"example {index}"
    try:
        label = int(example["label"])
        ctx_tokens = [int(t) for t in example["ctx_tokens"]]
        ending_tokens = [[int(t) for t in ending] for ending in example["ending_tokens"]]
    except (KeyError, TypeError, ValueError) as e:
        raise DataFormatError(f"{where}: needs 'label', 'ctx_tokens' and 'ending_tokens' ({one_line(e)})") from None
    if len(ending_tokens) != EVAL_NUM_COMPLETIONS:
        raise DataFormatError(f"{where}: {len(ending_tokens)} completions, expected {EVAL_NUM_COMPLETIONS}")
    if not 0 <= label < EVAL_NUM_COMPLETIONS:
        raise DataFormatError(f"{where}: label {label} is not in 0..{EVAL_NUM_COMPLETIONS - 1}")
    if not ctx_tokens or not all(ending_tokens):
        raise DataFormatError(f"{where}: the context and every completion need at least one token")
    for name, tokens in [("context", ctx_tokens)] + [(f"completion {k}", e) for k, e in enumerate(ending_tokens)]:
        check_token_range(f"{where} {name}", np.asarray(tokens, dtype=np.int64), EVAL_VOCAB_SIZE)
    record = [EVAL_START_MARKER, 0, index, label, len(ending_tokens), len(ctx_tokens), *ctx_tokens]
    for ending in ending_tokens:
        record += [len(ending), *ending]
    record[1] = 2 * len(record)
    if record[1] > 0xFFFF:
        raise DataFormatError(f"{where}: {record[1]} bytes, longer than a uint16 record length allows")
    return record


def write_evalfile(filename: str | Path, examples: Sequence[Mapping[str, Any]]) -> Path:
    """Write an eval file atomically; each example has 'label', 'ctx_tokens' and 4 'ending_tokens' lists."""
    path = Path(filename)
    if len(examples) > 0xFFFF:
        raise DataFormatError(f"{path}: {len(examples)} examples, more than a uint16 example index allows")
    try:
        records = [_eval_record(i, example) for i, example in enumerate(examples)]
    except DataFormatError as e:
        raise DataFormatError(f"{path}: {e}") from None
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = EVAL_MAGIC, EVAL_VERSION, len(records)
    header[3] = max((r[1] for r in records), default=0)
    body = np.array([value for record in records for value in record], dtype="<u2")

    def write(f: Any) -> None:
        f.write(header.tobytes())
        f.write(body.tobytes())

    return write_atomically(path, write)


class _EvalStream:
    """Reads uint16 fields of an eval file body, naming the example and field when data runs out."""

    def __init__(self, path: Path, values: list[int], num_examples: int) -> None:
        self.path, self.values, self.num_examples, self.pos = path, values, num_examples, 0

    def take(self, example: int, field: str) -> int:
        if self.pos >= len(self.values):
            raise DataFormatError(
                f"{self.path}: truncated: header says {self.num_examples} examples "
                f"but the data ends in example {example} ({field})"
            )
        value = self.values[self.pos]
        self.pos += 1
        return value

    def take_tokens(self, example: int, field: str) -> list[int]:
        count = self.take(example, f"{field} length")
        if count == 0:
            raise DataFormatError(f"{self.path}: example {example}: {field} has no tokens")
        end = self.pos + count
        if end > len(self.values):
            raise DataFormatError(
                f"{self.path}: truncated: header says {self.num_examples} examples "
                f"but the data ends in example {example} ({field} tokens)"
            )
        tokens = self.values[self.pos : end]
        self.pos = end
        return tokens


def read_evalfile(path: str | Path, vocab_size: int = EVAL_VOCAB_SIZE) -> list[dict]:
    """The examples of an eval file, validated field by field.

    Each example is {"index", "label", "ctx_tokens": list[int], "ending_tokens": list[list[int]]}.
    """
    path = Path(path)
    header, _ = read_header(path, "an eval file")
    magic, version, num_examples, longest = (int(v) for v in header[:4])
    if magic != EVAL_MAGIC:
        raise wrong_magic(path, magic, str(EVAL_MAGIC), "an eval file")
    if version != EVAL_VERSION:
        raise DataFormatError(f"{path}: wrong version {version} for magic {magic} (eval file), expected {EVAL_VERSION}")
    if num_examples < 0 or longest < 0:
        raise DataFormatError(f"{path}: negative count in the header (examples {num_examples}, longest {longest})")
    body = path.read_bytes()[HEADER_BYTES:]
    if len(body) % 2:
        raise DataFormatError(f"{path}: truncated: {len(body)} bytes follow the header, not a whole number of uint16")
    stream = _EvalStream(path, np.frombuffer(body, dtype="<u2").tolist(), num_examples)
    examples = []
    longest_seen = 0
    for i in range(num_examples):
        start = stream.pos
        marker = stream.take(i, "start marker")
        if marker != EVAL_START_MARKER:
            raise DataFormatError(
                f"{path}: example {i}: start marker {marker} at byte {HEADER_BYTES + 2 * start}, "
                f"expected {EVAL_START_MARKER}"
            )
        record_bytes = stream.take(i, "record length")
        index = stream.take(i, "example index")
        if index != i:
            raise DataFormatError(f"{path}: example {i}: example index field says {index}")
        label = stream.take(i, "label")
        num_completions = stream.take(i, "number of completions")
        if num_completions != EVAL_NUM_COMPLETIONS:
            raise DataFormatError(
                f"{path}: example {i}: {num_completions} completions, expected {EVAL_NUM_COMPLETIONS}"
            )
        if label >= num_completions:
            raise DataFormatError(f"{path}: example {i}: label {label} >= number of completions {num_completions}")
        ctx_tokens = stream.take_tokens(i, "context")
        ending_tokens = [stream.take_tokens(i, f"completion {k}") for k in range(num_completions)]
        actual_bytes = 2 * (stream.pos - start)
        if actual_bytes != record_bytes:
            raise DataFormatError(
                f"{path}: example {i}: record length field says {record_bytes} bytes but the record is {actual_bytes}"
            )
        for name, tokens in [("context", ctx_tokens)] + [(f"completion {k}", e) for k, e in enumerate(ending_tokens)]:
            check_token_range(f"{path}: example {i} {name}", np.asarray(tokens), vocab_size)
        longest_seen = max(longest_seen, actual_bytes)
        examples.append({"index": index, "label": label, "ctx_tokens": ctx_tokens, "ending_tokens": ending_tokens})
    if stream.pos != len(stream.values):
        extra = 2 * (len(stream.values) - stream.pos)
        raise DataFormatError(f"{path}: trailing data: {extra} bytes after the {num_examples} examples the header announces")
    if longest != longest_seen:
        raise DataFormatError(
            f"{path}: header says the longest example is {longest} bytes but it is {longest_seen} bytes"
        )
    return examples
