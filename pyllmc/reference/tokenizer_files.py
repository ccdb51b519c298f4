"""
GPT-2's tokenizer: tiktoken's gpt2 encoding (and as BPE: its merges and the byte-level printing that vocab.json,
merges.txt and GGUF use), and the tokenizer file the C programs decode with (llm.c's format,
version 2: the header carries the end-of-text id) with its chat twin gpt2_chat_tokenizer.bin (nanochat's chat tokens
after the 50257 entries); and the BPE families' tokenizer file (Llama 3's layout, version 3:
the header carries the end-of-text and BOS ids), written from a LlamaTokenizer.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Callable

from pyllmc.family import Family
from pyllmc.families.gpt2 import CHAT_TOKENIZER_FILE as GPT2_CHAT_TOKENIZER_FILE, CHAT_TOKENS as GPT2_CHAT_TOKENS, GPT2
from pyllmc.llama3_tokenizer import LlamaTokenizer
from pyllmc.model_file import atomic_write, header_bytes
from pyllmc.reference.common import UserError, print0


def gpt2_encoding():
    """tiktoken's GPT-2 BPE; its two files are downloaded once into tiktoken's cache."""
    import tiktoken

    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # tiktoken raises requests' errors when offline
        raise UserError(f"cannot load tiktoken's gpt2 encoding (offline? set TIKTOKEN_CACHE_DIR to a cache holding it): "
                        f"{type(e).__name__}") from None


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (used in vocab.json and merges.txt)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def merge_of(ranks: dict[bytes, int], token: bytes) -> tuple[bytes, bytes]:
    """The pair that forms `token`: BPE of its bytes using only merges ranked below it leaves two parts."""
    limit = ranks[token]
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best, best_i = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < limit and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            break
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    if len(parts) != 2:
        raise UserError(f"token {token!r} (rank {limit}) is not a merge of two lower-ranked tokens")
    return parts[0], parts[1]


def gpt2_bpe() -> tuple[int, dict[bytes, int], list[tuple[bytes, bytes]], Callable[[bytes], str]]:
    """tiktoken's gpt2 encoding as BPE: its end-of-text id, its ranks, its merges in rank order (the merges take
    seconds) and the byte-level printer of a token (bytes_to_unicode) that vocab.json, merges.txt and GGUF use."""
    enc = gpt2_encoding()
    b2u = bytes_to_unicode()
    ranks = enc._mergeable_ranks
    merges = [merge_of(ranks, tok) for tok, _ in sorted(ranks.items(), key=lambda kv: kv[1]) if len(tok) > 1]
    return enc.eot_token, ranks, merges, lambda b: "".join(b2u[x] for x in b)


def gpt2_tokenizer_file_bytes(chat: bool = False) -> list[bytes]:
    """Header (version 2 carries the EOT id) and body (per token a length byte and the raw bytes) of GPT-2's tokenizer
    file; with chat, nanochat's four chat tokens' strings follow the 50257 entries (vocab size 50261)."""
    enc = gpt2_encoding()
    pieces = [enc.decode_bytes([i]) for i in range(enc.max_token_value + 1)]
    if chat:
        pieces += [token.encode("utf-8") for token in GPT2_CHAT_TOKENS]
    body = b"".join(struct.pack("<B", len(b)) + b for b in pieces)
    header = header_bytes([GPT2.tokenizer_magic, GPT2.tokenizer_version, len(pieces), enc.eot_token], "<u4")
    return [header, body]


def write_gpt2_tokenizer(filename: str | Path) -> None:
    """GPT-2's tokenizer file, and beside it the chat tokenizer file (gpt2_chat_tokenizer.bin: the same entries, then
    the chat tokens), which the chat programs decode and encode with."""
    atomic_write(filename, gpt2_tokenizer_file_bytes())
    print0(f"wrote {filename}")
    chat_file = Path(filename).with_name(GPT2_CHAT_TOKENIZER_FILE)
    atomic_write(chat_file, gpt2_tokenizer_file_bytes(chat=True))
    print0(f"wrote {chat_file}")


def bpe_tokenizer_file_bytes(family: Family, tok: LlamaTokenizer) -> list[bytes]:
    """Header and body of a BPE family's tokenizer file: uint32 header {family's magic, version, vocab, end-of-text id,
    BOS id}, then per id a length byte and its bytes; UserError when a token is empty or longer than 255 bytes."""
    body = bytearray()
    for i, piece in enumerate(tok.token_bytes()):
        if not 1 <= len(piece) <= 255:
            raise UserError(f"token {i} is {len(piece)} bytes long: the tokenizer file holds 1 to 255 bytes per token")
        body.append(len(piece))
        body += piece
    header = header_bytes([family.tokenizer_magic, family.tokenizer_version, tok.vocab_size, tok.eot, tok.bos], "<u4")
    return [header, bytes(body)]


def write_bpe_tokenizer(family: Family, tok: LlamaTokenizer, filename: str | Path) -> None:
    atomic_write(filename, bpe_tokenizer_file_bytes(family, tok))
    print0(f"wrote {filename}")
