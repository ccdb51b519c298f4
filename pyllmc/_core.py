"""The compiled extension, the error type, and the checks every call makes before reaching C."""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    from pyllmc._llmc import ffi, lib
except ImportError as e:  # pragma: no cover - exercised only without a build
    raise ImportError(f"pyllmc: the C extension pyllmc/_llmc is not built: run `make pyllmc` in the repository "
                      f"({e})") from e

INT_MAX = 2**31 - 1


class LlmcError(RuntimeError):
    """An error reported by the C core (llmc_die), turned into an exception instead of exit(1)."""


def check_rc(rc: int) -> None:
    """Raise LlmcError with the C core's one-line message when a guarded call failed."""
    if rc != 0:
        raise LlmcError(ffi.string(lib.pyllmc_last_error()).decode("utf-8", "replace"))


def _describe(a: Any) -> str:
    return f"{type(a).__name__} of dtype {a.dtype} and shape {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__


def check_array(name: str, a: Any, dtype: type, shape: tuple[int, ...] | None = None,
                writable: bool = False) -> None:
    """TypeError unless `a` is a C-contiguous numpy array of `dtype`; ValueError on a shape mismatch."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name}: expected a numpy array of {np.dtype(dtype).name}, got {_describe(a)}")
    if a.dtype != np.dtype(dtype):
        raise TypeError(f"{name}: expected dtype {np.dtype(dtype).name}, got {a.dtype} "
                        f"(convert once with .astype(np.{np.dtype(dtype).name}))")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name}: array must be C-contiguous (use np.ascontiguousarray)")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name}: array is read-only but is written to")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(a.shape)}")
    if a.size > INT_MAX * 4:
        raise ValueError(f"{name}: array too large ({a.size} elements)")


def fptr(name: str, a: Any, shape: tuple[int, ...] | None = None, writable: bool = False) -> Any:
    """A float* into a checked float32 array (no copy)."""
    check_array(name, a, np.float32, shape, writable)
    return ffi.from_buffer("float[]", a, require_writable=writable)


def iptr(name: str, a: Any, shape: tuple[int, ...] | None = None) -> Any:
    """An int* into a checked int32 array (no copy)."""
    check_array(name, a, np.int32, shape)
    return ffi.from_buffer("int[]", a)


def check_dims(**dims: int) -> None:
    """ValueError unless every named dimension is an int in [1, 2^31)."""
    for k, v in dims.items():
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not 1 <= int(v) <= INT_MAX:
            raise ValueError(f"{k} must be an integer in [1, {INT_MAX}], got {v!r}")


def check_ids(name: str, ids: np.ndarray, upper: int, lower: int = 0) -> None:
    """ValueError unless every id is in [lower, upper) (C indexes memory with them; targets may be -1: not
    supervised)."""
    if ids.size and (int(ids.min()) < lower or int(ids.max()) >= upper):
        bad = int(np.flatnonzero((ids < lower) | (ids >= upper))[0])
        raise ValueError(f"{name}: id {int(ids.flat[bad])} at flat position {bad} is outside [{lower}, {upper})")


def float_view(ptr: Any, n: int, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """A float32 numpy view of n floats at ptr (no copy; valid while the C buffer lives)."""
    arr = np.frombuffer(ffi.buffer(ptr, 4 * n), dtype=np.float32)
    return arr.reshape(shape) if shape is not None else arr


def int_view(ptr: Any, n: int, shape: tuple[int, ...] | None = None) -> np.ndarray:
    arr = np.frombuffer(ffi.buffer(ptr, 4 * n), dtype=np.int32)
    return arr.reshape(shape) if shape is not None else arr
