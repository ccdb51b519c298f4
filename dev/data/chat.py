"""Conversations → chat shards for llmc's fine-tuning (tokens, then one loss-mask byte per token).

Reads conversations in JSONL, one {"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]} per line
(the layout of Hugging Face chat datasets such as SmolTalk; a hub dataset's name is loaded through `datasets` where the
network allows), renders each with its family's chat format (pyllmc/chat.py, doc/chat.md), pads it to exactly T tokens
and writes <data_dir>/<name>_train.bin and <name>_val.bin (pyllmc/token_shards.py's chat shards). Conversations longer
than T are dropped and counted. Every line is checked before anything is written: a bad one is one error line naming
the file and line, and nothing is written.

    python dev/data/chat.py --input lookup_train.jsonl --val lookup_val.jsonl --data_dir DIR -t 64   # lookup_{train,val}.bin
    python dev/data/chat.py --input chats.jsonl --val_fraction 0.1 --data_dir DIR      # GPT-2 vocabulary, nanochat's tokens
    python dev/data/chat.py --input chats.jsonl -m llama-3 --tokenizer DIR --data_dir DIR   # its tokenizer.json's format
    python dev/data/chat.py --input HuggingFaceTB/smoltalk --hub_config everyday-conversations --data_dir DIR
    python dev/data/chat.py --render chats.jsonl        # one {"ids": [...], "mask": [...]} line per conversation
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from data_common import add_model_desc_arg, get_tokenizer, positive_int, report_error, run_script, script_parser
from pyllmc.chat import CHAT_FORMATS, ChatTemplate, gpt2_template, tokenizer_json_template
from pyllmc.families import NAMES as FAMILY_NAMES, by_name
from pyllmc.families.gpt2 import CHAT_VOCAB_SIZE as GPT2_CHAT_VOCAB_SIZE
from pyllmc.llama3_tokenizer import huggingface_reachable, load_checkpoint_tokenizer, load_llama3_tokenizer
from pyllmc.token_shards import DataError, DataFormatError, one_line, shard_format, write_chat_datafile

DEFAULT_SEQ_LEN = 256


@dataclass(frozen=True)
class Vocabulary:
    """A chat template with what a shard of its ids needs: the pad id (the format's BOS or document delimiter) and the
    vocabulary size that bounds the ids."""

    template: ChatTemplate
    pad: int
    vocab_size: int
    model_desc: str


def load_vocabulary(model_desc: str, tokenizer: str, family: str | None) -> Vocabulary:
    """The template of -m/--tokenizer: GPT-2's vocabulary with nanochat's tokens (tiktoken gpt2), or a tokenizer.json
    (a NanoChat's with -m gpt-2, a Llama 3 style one with llama-3) with the format of its chat tokens; --family picks the
    format of that family instead."""
    fmt = CHAT_FORMATS[by_name(family).family.chat_format] if family else None
    if model_desc == "gpt-2" and not tokenizer:
        if fmt is not None and fmt.name != "nanochat":
            raise DataError(f"--family {family}: GPT-2's vocabulary has only nanochat's chat tokens, not the {fmt.name} "
                            f"format's (pass -m llama-3 --tokenizer DIR with a tokenizer.json that has them)")
        gpt2 = get_tokenizer("gpt-2")
        return Vocabulary(gpt2_template(gpt2.encode), gpt2.eot, GPT2_CHAT_VOCAB_SIZE, model_desc)
    tok = load_checkpoint_tokenizer(tokenizer) if model_desc == "gpt-2" else load_llama3_tokenizer(tokenizer)
    if tok.vocab_size > np.iinfo(shard_format(model_desc).dtype).max + 1:
        raise DataError(f"{tok.source}: {tok.vocab_size} tokens, more than {model_desc} shards' ids hold")
    template = tokenizer_json_template(tok.tok, tok.encode, tok.source, fmt)
    return Vocabulary(template, tok.bos, tok.vocab_size, model_desc)


# ----------------------------------------------------------------------------- reading conversations


def jsonl_rows(path: Path) -> Iterable[tuple[str, Any]]:
    """(FILE:LINE, the parsed JSON) of every non-blank line; DataError "FILE:LINE: reason" for bad UTF-8 or JSON."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    for number, raw in enumerate(data.split(b"\n"), 1):
        where = f"{path}:{number}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataFormatError(f"{where}: not UTF-8 text (bad byte at column {e.start + 1})") from None
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataFormatError(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
        yield where, row


def hub_rows(name: str, config: str | None, split: str) -> Iterable[tuple[str, Any]]:
    """(NAME row N, row) of a Hugging Face dataset through `datasets` (its local cache when offline)."""
    if not huggingface_reachable():
        os.environ["HF_HUB_OFFLINE"] = "1"  # offline the hub client retries for half a minute; the cache answers at once
    import datasets

    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        dataset = datasets.load_dataset(name, name=config, split=split)
    except Exception as e:
        raise DataError(f"cannot load the dataset {name}: {type(e).__name__}: {one_line(e)[:200]} (offline? run this "
                        "where huggingface.co is reachable, or pass a local .jsonl file to --input)") from None
    for number, row in enumerate(dataset, 1):
        yield f"{name} row {number}", row


Rendered = list[tuple[list[int], list[int]]]  # (ids, mask) per conversation


def read_conversations(rows: Iterable[tuple[str, Any]], source: str, template: ChatTemplate) -> Rendered:
    """Every row rendered (ids, mask); DataError "WHERE: reason" at the first bad one."""
    rendered = []
    for where, row in rows:
        if not isinstance(row, dict) or "messages" not in row:
            raise DataFormatError(f"{where}: expected an object with a 'messages' list")
        try:
            rendered.append(template.render(row["messages"]))
        except DataError as e:
            raise DataFormatError(f"{where}: {e}") from None
    if not rendered:
        raise DataFormatError(f"{source}: no conversations")
    return rendered


def input_rows(source: str, config: str | None, split: str) -> Iterable[tuple[str, Any]]:
    """A local JSONL file's rows, or a hub dataset's when `source` is no file and does not name one (.jsonl/.json)."""
    path = Path(source)
    if path.exists() or path.suffix.lower() in (".jsonl", ".json"):
        return jsonl_rows(path)
    return hub_rows(source, config, split)


# ----------------------------------------------------------------------------- shards


@dataclass(frozen=True)
class Split:
    """One shard's contents: its conversations padded to T, and counts for the summary."""

    tokens: np.ndarray
    mask: np.ndarray
    conversations: int
    dropped: int
    tokens_unpadded: int


def pad_split(rendered: Rendered, seq_len: int, pad: int, dtype: np.dtype) -> Split:
    """The conversations that fit in seq_len tokens, each padded to seq_len (pad id, mask 0), one after the other, as
    the shards' token type."""
    kept = [(ids, mask) for ids, mask in rendered if len(ids) <= seq_len]
    tokens = np.full((len(kept), seq_len), pad, dtype=dtype)
    masks = np.zeros((len(kept), seq_len), dtype=np.uint8)
    for row, (ids, mask) in enumerate(kept):
        tokens[row, : len(ids)] = ids
        masks[row, : len(mask)] = mask
    return Split(tokens.reshape(-1), masks.reshape(-1), len(kept), len(rendered) - len(kept),
                 sum(len(ids) for ids, _ in kept))


def split_off_val(rendered: Rendered, fraction: float, seed: int) -> tuple[Rendered, Rendered]:
    """(train, val): a seeded random `fraction` of the conversations is val, each part in the input's order."""
    n_val = round(fraction * len(rendered))
    picked = set(np.random.default_rng(seed).permutation(len(rendered))[:n_val].tolist())
    return ([c for i, c in enumerate(rendered) if i not in picked], [c for i, c in enumerate(rendered) if i in picked])


def write_shards(data_dir: Path, name: str, splits: dict[str, Split], seq_len: int, vocab: Vocabulary) -> list[Path]:
    """<name>_<split>.bin for each split; when one cannot be written the ones written before are removed."""
    written: list[Path] = []
    try:
        for split, part in splits.items():
            path = data_dir / f"{name}_{split}.bin"
            written.append(write_chat_datafile(path, part.tokens, part.mask, seq_len, vocab.model_desc, vocab.vocab_size))
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return written


def default_name(source: str) -> str:
    """The shards' name: the input file's stem without a trailing _train (lookup_train.jsonl: lookup), or the hub
    dataset's name."""
    path = Path(source)
    if path.exists() or path.suffix.lower() in (".jsonl", ".json"):
        return path.stem.removesuffix("_train")
    return source.rstrip("/").split("/")[-1].lower()


def summary(split: str, part: Split) -> str:
    return (f"{split}: {part.conversations:,} conversations, {part.tokens_unpadded:,} tokens "
            f"({len(part.tokens):,} padded), {int(part.mask.sum()):,} supervised")


def build(args: argparse.Namespace) -> str:
    """Read and render every conversation, then write the shards; returns the summary line."""
    vocab = load_vocabulary(args.model_desc, args.tokenizer, args.family)
    if args.seq_len < 2:
        raise DataError(f"-t {args.seq_len}: a conversation needs at least 2 tokens")
    train = read_conversations(input_rows(args.input, args.hub_config, args.hub_split), args.input, vocab.template)
    if args.val is not None:
        val = read_conversations(jsonl_rows(args.val), str(args.val), vocab.template)
    else:
        train, val = split_off_val(train, args.val_fraction, args.seed)
    dtype = shard_format(vocab.model_desc).dtype
    parts = {"train": pad_split(train, args.seq_len, vocab.pad, dtype)}
    if val or args.val_fraction > 0:
        parts["val"] = pad_split(val, args.seq_len, vocab.pad, dtype)
    for split, part in parts.items():
        if part.dropped and not part.conversations:
            raise DataError(f"none of the {part.dropped:,} {split} conversations fits in T = {args.seq_len} tokens "
                            "(raise -t)")
        if not part.conversations:
            raise DataError(f"no {split} conversations (raise --val_fraction, or pass --val)")
    dropped = {split: part.dropped for split, part in parts.items() if part.dropped}
    if dropped:
        print(f"dropped {sum(dropped.values()):,} conversations longer than T = {args.seq_len} tokens ("
              + ", ".join(f"{n:,} {split}" for split, n in dropped.items()) + ")")
    name = args.name or default_name(args.input)
    paths = write_shards(args.data_dir, name, parts, args.seq_len, vocab)
    fmt = vocab.template.fmt.name
    return (f"wrote {', '.join(str(p) for p in paths)} ({vocab.model_desc}, {fmt} format, T = {args.seq_len}): "
            + "; ".join(summary(split, part) for split, part in parts.items()))


def render(args: argparse.Namespace) -> None:
    """Print {"ids": [...], "mask": [...]} per conversation of --render's file, once the whole file is checked."""
    template = load_vocabulary(args.model_desc, args.tokenizer, args.family).template
    lines = []
    for where, row in jsonl_rows(args.render):
        if not isinstance(row, dict) or "messages" not in row:
            raise DataFormatError(f"{where}: expected an object with a 'messages' list")
        try:
            if args.generation_prompt:
                ids, mask = template.render_prompt(row["messages"]), None
            else:
                ids, mask = template.render(row["messages"])
        except DataError as e:
            raise DataFormatError(f"{where}: {e}") from None
        lines.append(json.dumps({"ids": ids} if mask is None else {"ids": ids, "mask": mask}))
    for line in lines:
        print(line)


def fraction(text: str) -> float:
    """argparse type: a number in [0, 1)."""
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = script_parser("Render conversations (JSONL of {\"messages\": [...]}) with a family's chat format into "
                           "chat shards (<name>_train.bin, <name>_val.bin: tokens, then a loss-mask byte per token).",
                           "chat", "where the shards are written")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--input", help="conversations: a .jsonl file, or a Hugging Face dataset's name (its rows' "
                                      "'messages'; needs the network or its cache)")
    what.add_argument("--render", type=Path, help="print each conversation of this .jsonl file as one JSON line "
                                                  "{\"ids\": [...], \"mask\": [...]} (mask 1: a supervised target) "
                                                  "and write nothing")
    parser.add_argument("-t", "--seq_len", type=positive_int, default=DEFAULT_SEQ_LEN,
                        help="T: every conversation is padded to T tokens, longer ones are dropped (the trainer's -t)")
    add_model_desc_arg(parser)
    parser.add_argument("--family", choices=FAMILY_NAMES, default=None,
                        help="use this family's chat format (default: the vocabulary's: GPT-2's is nanochat's, a "
                             "tokenizer.json's the one whose special tokens it has)")
    val = parser.add_mutually_exclusive_group()
    val.add_argument("--val", type=Path, default=None, help="validation conversations (.jsonl); default: "
                                                            "--val_fraction of --input")
    val.add_argument("--val_fraction", type=fraction, default=0.05,
                        help="without --val: this fraction of --input (seeded random) is the val shard; 0: none")
    parser.add_argument("--seed", type=int, default=1337, help="the seed of --val_fraction's pick")
    parser.add_argument("--name", default="", help="the shards' name (default: --input's stem without _train, or the "
                                                   "dataset's name)")
    parser.add_argument("--hub_config", default=None, help="a hub dataset's configuration (subset)")
    parser.add_argument("--hub_split", default="train", help="a hub dataset's split")
    parser.add_argument("--generation_prompt", action="store_true",
                        help="with --render: conversations that end with a user turn, printed as {\"ids\": [...]} "
                             "followed by the generation prompt (what the model answers)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render is not None:
        try:
            render(args)
        except (DataError, KeyboardInterrupt) as e:
            return report_error(e)
        return 0
    return run_script(lambda: build(args))


if __name__ == "__main__":
    sys.exit(main())
