"""
What every part of the PyTorch references uses: the error a user's input raises (printed as one `error:` line by
cli.run_main) and the check of a family's config that raises it, the dN model names, printing on rank 0 only, and
whether the Hugging Face hub answers.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Callable


class UserError(Exception):
    """A problem with the user's input: printed as one `error:` line, exit 1."""


def config_checker(problem_of: Callable[[Any], str | None], what: str) -> Callable[[Any, str], None]:
    """check_config(config, where) of a family: its description's problem_of(config) (empty or None when the model can
    be built) as a UserError `<where>: bad <what> config: <problem>`."""
    def check_config(config: Any, where: str) -> None:
        problem = problem_of(config)
        if problem:
            raise UserError(f"{where}: bad {what} config: {problem}")
    return check_config


def is_depth_name(name: str) -> bool:
    """Whether a --model name is dN (a model from scratch of depth N) rather than a file or a Hugging Face name."""
    return name.startswith("d") and name[1:].isdigit()


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
