"""
GPT-2's tokenizer: tiktoken's gpt2 encoding, and the tokenizer file the C programs decode with (llm.c's format,
version 2: the header carries the end-of-text id).
"""

from __future__ import annotations

import struct
from pathlib import Path

from pyllmc.families.gpt2 import GPT2
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


def write_gpt2_tokenizer(filename: str | Path) -> None:
    """Tokenizer: header (version 2 carries the EOT id) then, per token, a length byte and the raw bytes."""
    enc = gpt2_encoding()
    pieces = [enc.decode_bytes([i]) for i in range(enc.max_token_value + 1)]
    body = b"".join(struct.pack("<B", len(b)) + b for b in pieces)
    header = header_bytes([GPT2.tokenizer_magic, GPT2.tokenizer_version, len(pieces), enc.eot_token], "<u4")
    atomic_write(filename, [header, body])
    print0(f"wrote {filename}")
