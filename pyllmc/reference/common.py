"""
What every part of the PyTorch references uses: the error a user's input raises (printed as one `error:` line by
cli.run_main), printing on rank 0 only, and whether the Hugging Face hub answers.
"""

from __future__ import annotations

import os
import socket


class UserError(Exception):
    """A problem with the user's input: printed as one `error:` line, exit 1."""


def print0(*args, **kwargs) -> None:
    if int(os.environ.get("RANK", 0)) == 0:
        print(*args, **kwargs, flush=True)


def huggingface_reachable(timeout: float = 3.0) -> bool:
    """Whether huggingface.co answers on port 443; False without asking when HF_HUB_OFFLINE is set, as the hub's own
    library reads it, so an offline run says so instead of trying a download."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False
