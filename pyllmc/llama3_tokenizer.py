"""
Llama 3 style tokenizers: a `tokenizers` tokenizer.json (byte-level BPE) with <|begin_of_text|> and
<|end_of_text|>, from a local path or the hub's gated Meta Llama 3 tokenizer (families.llama3.HUB_TOKENIZER), or of
the same kind with <|endoftext|> as its document delimiter and no BOS (a Qwen tokenizer: that id is its bos and eot);
and a checkpoint's own tokenizer.json of the same kind whose documents start with <|bos|> (a NanoChat's,
load_checkpoint_tokenizer). train_llama3.py and train_nanochat.py write their tokenizer files from them; the data
scripts (dev/data/data_common.py) tokenize with them.
A tokenizer that cannot be loaded is a DataError (token_shards.py) with a one-line message.
"""

from __future__ import annotations

import http.client
import os
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from pyllmc.families.llama3 import BOS, EOT, HUB_TOKENIZER
from pyllmc.families.nanochat import BOS_NAMES
from pyllmc.token_shards import DataError, one_line

DELIMITER_WITHOUT_BOS = "<|endoftext|>"  # the document delimiter of a tokenizer with no BOS: it starts every document

def huggingface_reachable(timeout: float = 10.0) -> bool:
    """False when HF_HUB_OFFLINE is set or huggingface.co does not answer within timeout seconds."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        return False
    try:
        urllib.request.urlopen(urllib.request.Request("https://huggingface.co", method="HEAD"), timeout=timeout).close()
    except (OSError, http.client.HTTPException, ValueError):
        return False
    return True


@lru_cache(maxsize=1)
def _byte_level_decoder() -> dict[str, int]:
    """Byte-level BPE's printable character for each byte, inverted: char -> byte (the GPT-2 / Llama 3 table)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


@dataclass(frozen=True)
class LlamaTokenizer:
    """A byte-level BPE tokenizer in the Llama 3 style (a `tokenizers` tokenizer.json) with its two special ids."""

    source: str  # where it came from, for messages
    tok: Any  # tokenizers.Tokenizer
    vocab_size: int
    bos: int  # <|begin_of_text|>: starts every document
    eot: int  # <|end_of_text|>

    def encode(self, text: str) -> list[int]:
        """Plain text to ids, no BOS added; special-token text is encoded as ordinary text."""
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def token_bytes(self) -> list[bytes]:
        """The raw bytes of every id in order: byte-level pieces decoded to bytes, special tokens as their text."""
        table = _byte_level_decoder()
        special = {i for i, t in self.tok.get_added_tokens_decoder().items() if t.special}
        out = []
        for i in range(self.vocab_size):
            piece = self.tok.id_to_token(i)
            if piece is None:
                raise DataError(f"{self.source}: no token has id {i} (ids must run 0..{self.vocab_size - 1})")
            if i in special:
                out.append(piece.encode("utf-8"))
            elif all(ch in table for ch in piece):
                out.append(bytes(table[ch] for ch in piece))
            else:
                raise DataError(f"{self.source}: token {i} {piece!r} is not byte-level BPE (need a ByteLevel tokenizer)")
        return out


def _llama3_tokenizer_json(path: str) -> Path:
    """tokenizer.json for --tokenizer PATH ("" = the hub's gated Llama 3 tokenizer, from the cache or downloaded)."""
    if path:
        p = Path(path)
        p = p / "tokenizer.json" if p.is_dir() else p
        if not p.is_file():
            raise DataError(f"--tokenizer {path}: no such tokenizer.json (pass a tokenizer.json or a directory holding one)")
        return p
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    try:
        return Path(hf_hub_download(HUB_TOKENIZER, "tokenizer.json", local_files_only=True))
    except Exception:
        if not huggingface_reachable():
            raise DataError(
                f"cannot load the llama-3 tokenizer {HUB_TOKENIZER}: it is not in the Hugging Face cache and "
                "huggingface.co cannot be reached (offline? pass --tokenizer with a local tokenizer.json or directory, "
                "e.g. one made by dev/data/make_test_tokenizer.py)"
            ) from None
    try:
        return Path(hf_hub_download(HUB_TOKENIZER, "tokenizer.json"))
    except Exception as e:
        raise DataError(
            f"cannot load the llama-3 tokenizer {HUB_TOKENIZER}: {one_line(e)[:200]} (a gated repository: accept its "
            "licence on huggingface.co and run `hf auth login`, or pass --tokenizer with a local tokenizer.json)"
        ) from None


def read_tokenizer_json(json_path: Path, purpose: str) -> Any:
    """A `tokenizers` Tokenizer from a tokenizer.json; DataError (one line) when it cannot be read."""
    try:
        from tokenizers import Tokenizer as HFTokenizer

        return HFTokenizer.from_file(str(json_path))
    except ImportError:
        raise DataError(f"{purpose} needs the tokenizers package (pip install tokenizers)") from None
    except Exception as e:
        raise DataError(f"{json_path}: not a tokenizers tokenizer.json ({one_line(e)[:200]})") from None


@lru_cache(maxsize=None)
def load_llama3_tokenizer(path: str = "") -> LlamaTokenizer:
    """The Llama 3 tokenizer from --tokenizer PATH (tokenizer.json or its directory; "" = the hub's), validated:
    it must know <|begin_of_text|> and <|end_of_text|>, or else <|endoftext|> (a delimiter without BOS, then both
    its bos and eot); DataError (one line) otherwise."""
    json_path = _llama3_tokenizer_json(path)
    tok = read_tokenizer_json(json_path, "llama-3 tokenizing")
    tok.encode_special_tokens = True
    ids = {name: tok.token_to_id(name) for name in (BOS, EOT)}
    missing = [name for name, i in ids.items() if i is None]
    delimiter = tok.token_to_id(DELIMITER_WITHOUT_BOS)
    if missing and delimiter is not None:
        return LlamaTokenizer(str(json_path), tok, tok.get_vocab_size(with_added_tokens=True), delimiter, delimiter)
    if missing:
        raise DataError(f"{json_path}: the tokenizer has no {missing[0]} token (not a Llama 3 style tokenizer) and no "
                        f"{DELIMITER_WITHOUT_BOS} delimiter")
    return LlamaTokenizer(str(json_path), tok, tok.get_vocab_size(with_added_tokens=True), ids[BOS], ids[EOT])



@lru_cache(maxsize=None)
def load_checkpoint_tokenizer(path: str) -> LlamaTokenizer:
    """A checkpoint's own tokenizer.json (PATH: the file or a directory holding it; a NanoChat's), byte-level BPE
    whose document delimiter is the first of families.nanochat.BOS_NAMES it knows (its bos and eot); DataError (one
    line) otherwise."""
    json_path = Path(path) / "tokenizer.json" if Path(path).is_dir() else Path(path)
    if not json_path.is_file():
        raise DataError(f"--tokenizer {path}: no such tokenizer.json (pass a tokenizer.json or a directory holding one)")
    tok = read_tokenizer_json(json_path, "a checkpoint's tokenizer.json")
    tok.encode_special_tokens = True  # as load_llama3_tokenizer: special-token text in a document is ordinary text
    bos = next((i for i in map(tok.token_to_id, BOS_NAMES) if i is not None), None)
    if bos is None:
        raise DataError(f"{json_path}: the tokenizer has none of {', '.join(BOS_NAMES)} (its document delimiter)")
    return LlamaTokenizer(str(json_path), tok, tok.get_vocab_size(with_added_tokens=True), bos, bos)
