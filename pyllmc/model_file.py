"""
The mechanism every family's model file is written and read with: header bytes (256 int32, or 256 int32 then 256
float32), atomic writes, tensors in float32 (version 3) or bfloat16 (version 5, the high half of the float32 bits;
widened when read), the header's magic, version and the file's length checked against the tensors a header
describes. Each family's header fields, checks, tensor shapes, reader and writer header are its own module's
(pyllmc/families/<name>.py, which document their files); the references write through here and pyllmc, dev/eval
and the tests read through the family modules. numpy only (torch just to write a torch tensor).

A file that cannot be read raises ModelFileError (a ValueError): one line naming the file and what is wrong.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import numpy as np

from pyllmc.family import MODEL_VERSIONS, Family

VERSIONS = MODEL_VERSIONS  # tensor dtype -> the header's version field
ITEMSIZE = {VERSIONS["float32"]: 4, VERSIONS["bfloat16"]: 2}  # version -> bytes per parameter
C = TypeVar("C")  # a family's config


class ModelFileError(ValueError):
    """A model file that cannot be read: the message is one line naming the file."""


# ----------------------------------------------------------------------------- bytes on disk


def header_bytes(values: Iterable[int | float], dtype: str = "<i4") -> bytes:
    """256 values of `dtype`: `values`, then zeros."""
    header = np.zeros(256, dtype=dtype)
    vals = list(values)
    header[: len(vals)] = vals
    return header.tobytes()


def atomic_write(path: str | Path, chunks: Iterable[bytes]) -> None:
    """Write to a temporary file beside `path`, fsync, then rename: a crash never leaves a half file."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def tensor_bytes(t: Any, dtype: str) -> bytes:
    """A torch tensor's bytes as float32 or bfloat16 (rounded to nearest even)."""
    import torch

    t = t.detach().cpu()
    if dtype == "float32":
        return t.float().numpy().tobytes()
    return t.bfloat16().view(torch.int16).numpy().tobytes()


def write_model_file(path: str | Path, header: bytes, tensors: Iterable[Any], dtype: str) -> None:
    """A model file, atomically: its header bytes, then each torch tensor in `dtype` (float32 or bfloat16)."""
    atomic_write(path, [header, *(tensor_bytes(t, dtype) for t in tensors)])


def file_size(path: Path) -> int:
    """The file's length in bytes (opening it: a directory or an unreadable file fails here)."""
    try:
        with path.open("rb") as f:
            return os.fstat(f.fileno()).st_size
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read: {e.strerror or e}") from None


def read_ints(path: Path, dtype: str, count: int, offset: int = 0) -> np.ndarray:
    """`count` values of `dtype` at byte `offset` (the caller has checked that the file holds them)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return np.frombuffer(f.read(count * np.dtype(dtype).itemsize), dtype=dtype)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read: {e.strerror or e}") from None


def read_magic(path: Path) -> int:
    """The first int32 of a model file, to tell the families apart (pyllmc.families.by_magic)."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(head) < 4:
        raise ModelFileError(f"{path}: not a model file (shorter than a header)")
    return int(np.frombuffer(head, dtype="<i4")[0])


def read_tensors(path: Path, offset: int, version: int, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The tensors after the header, in file order, as float32 arrays (bf16 widened: its bits are the high half)."""
    n = sum(math.prod(s) for s in shapes.values())
    try:
        flat = np.fromfile(path, dtype="<f4" if ITEMSIZE[version] == 4 else "<u2", count=n, offset=offset)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read: {e.strerror or e}") from None
    if ITEMSIZE[version] == 2:
        flat = (flat.astype(np.uint32) << 16).view(np.float32)
    tensors, at = {}, 0
    for name, shape in shapes.items():
        k = math.prod(shape)
        tensors[name] = flat[at:at + k].reshape(shape)
        at += k
    return tensors


def read_two_part_header(path: Path, magic: int, header_length: int, family: str) -> tuple[int, np.ndarray, np.ndarray]:
    """The file's size and its 256 int32 + 256 float32 header (the model files of the families after GPT-2), its
    length, magic and version checked."""
    size = file_size(path)
    if size < header_length:
        raise ModelFileError(f"{path}: truncated: {size} bytes, shorter than the {header_length}-byte {family} header")
    hi, hf = read_ints(path, "<i4", 256), read_ints(path, "<f4", 256, offset=1024)
    if int(hi[0]) != magic:
        raise ModelFileError(f"{path}: wrong magic {int(hi[0])}, expected {magic} (a {family} model file)")
    if int(hi[1]) not in ITEMSIZE:
        raise ModelFileError(f"{path}: wrong version {int(hi[1])}, expected 3 (float32) or 5 (bfloat16)")
    return size, hi, hf


def check_body_size(path: Path, size: int, header_length: int, shapes: dict[str, tuple[int, ...]], version: int) -> None:
    """The file holds exactly the header and the tensors of `shapes` at `version`'s width."""
    want = header_length + sum(math.prod(s) for s in shapes.values()) * ITEMSIZE[version]
    if size != want:
        problem = "truncated" if size < want else "trailing data"
        raise ModelFileError(f"{path}: {problem}: the header's config needs {want} bytes, the file has {size}")


def attention_problem(n_head: int, n_kv_head: int, norm_eps: float, rope_theta: float) -> str:
    """What the decoders' shared checks find ("" when nothing): grouped-query heads, a norm epsilon in (0, 1) and a
    finite RoPE theta above 1 (the C readers' rules and words)."""
    if n_kv_head > n_head or n_head % n_kv_head:
        return f"heads NH {n_head} is not a multiple of kv heads NKV {n_kv_head}"
    if not 0 < norm_eps < 1:
        return f"norm_eps {norm_eps} must be in (0, 1)"
    if not (math.isfinite(rope_theta) and rope_theta > 1):
        return f"rope_theta {rope_theta} must be finite and > 1"
    return ""


def read_config_header(path: str | Path, family: Family, label: str, config_of: Callable[[Path, np.ndarray, np.ndarray], C],
                       problem_of: Callable[[C], str], shapes_of: Callable[[C], dict[str, tuple[int, ...]]]) -> tuple[C, int]:
    """A two-part model file's config and version (3 fp32, 5 bf16): the header's length, magic and version, the config
    config_of builds from its int32 and float32 halves (raising on fields it refuses), what problem_of finds in it,
    and the file's length against shapes_of's tensors; one ModelFileError line each, naming the family by `label`."""
    path = Path(path)
    size, hi, hf = read_two_part_header(path, family.model_magic, family.model_header_bytes, label)
    c = config_of(path, hi, hf)
    problem = problem_of(c)
    if problem:
        raise ModelFileError(f"{path}: bad {label} header: {problem}")
    check_body_size(path, size, family.model_header_bytes, shapes_of(c), int(hi[1]))
    return c, int(hi[1])


def read_config_model(path: str | Path, family: Family, read_header: Callable[[str | Path], tuple[C, int]],
                      shapes_of: Callable[[C], dict[str, tuple[int, ...]]]) -> tuple[C, dict[str, np.ndarray]]:
    """A model file's config (read_header's, validated) and its tensors (float32, file order)."""
    c, version = read_header(path)
    return c, read_tensors(Path(path), family.model_header_bytes, version, shapes_of(c))


def cast_to(a: np.ndarray, dtype: str) -> np.ndarray:
    """A contiguous copy in the saved dtype (float32, or float16)."""
    return np.ascontiguousarray(a, dtype=np.float32).astype(np.float16 if dtype == "float16" else np.float32)
