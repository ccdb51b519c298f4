"""
The model files of every family, described once: header fields, validation, tensor shapes, reader and
writer; each family's magic, header length and tensor order are its description's (families/gpt2.py,
families/llama3.py, families/nanochat.py). The train_*.py references write them through here; train_llama3.py,
train_nanochat.py,
dev/eval/export_hf.py, dev/eval/export_gguf.py and pyllmc read them through here. numpy only (torch just to
write a torch tensor).

GPT-2 checkpoint (llm.c-compatible; llmc/checkpoint.h reads it in C with the same rules):
  256 int32: [0]=20240326 [1]=3 (fp32) or 5 (bf16) [2]=maxT [3]=V [4]=L [5]=NH [6]=C [7]=Vp
  then 16 tensors: wte (Vp, C; rows V.. are zero), wpe (maxT, C), ln1w ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C),
  attprojw (L, C, C), attprojb ln2w ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C), fcprojb (L, C),
  lnfw lnfb (C,).
Llama 3 model file (llmc/llama3.h reads it in C):
  256 int32: [0]=20240803 [1]=3 or 5 [2]=block size [3]=V [4]=L [5]=NH [6]=NKV [7]=C [8]=int(ffn_dim_multiplier)
  [9]=multiple_of [10]=int(norm_eps) [11]=int(rope_theta) [12]=use_scaled_rope [13]=4 [14]=3 (major version)
  [15]=minor version [16]=tied embeddings [17]=FFN hidden size F;
  then 256 float32: [0]=ffn_dim_multiplier [1]=norm_eps [2]=rope_theta [3]=rope factor [4]=low_freq_factor
  [5]=high_freq_factor [6]=original max positions
  then wte (V, C), ln1w (L, C), qkvw (L, (NH + 2 NKV) HS, C), attprojw (L, C, C), ln2w (L, C), fcw (L, F, C),
  fcw2 (L, F, C), fcprojw (L, C, F), lnfw (C,), and lm_head (V, C) unless the embeddings are tied.
nanochat model file (llmc/nanochat.h reads it in C):
  256 int32: [0]=20251013 [1]=3 or 5 [2]=block size [3]=V [4]=L [5]=NH [6]=NKV [7]=C [8]=FFN (MLP hidden size);
  then 256 float32: [0]=norm_eps [1]=rope_theta [2]=softcap (0 = none)
  then wte (V, C), qkvw (L, (NH + 2 NKV) HS, C), attprojw (L, C, C), fcw (L, FFN, C), fcprojw (L, C, FFN),
  lm_head (V, C).
Tensors are float32 (version 3) or bfloat16 (version 5, the high half of the float32 bits; widened when read).
A file that cannot be read raises ModelFileError (a ValueError): one line naming the file and what is wrong.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from pyllmc.family import MODEL_VERSIONS
from pyllmc.families.gpt2 import GPT2, VOCAB_PADDING
from pyllmc.families.llama3 import LLAMA3
from pyllmc.families.nanochat import NANOCHAT

GPT2_MAGIC, LLAMA3_MAGIC, NANOCHAT_MAGIC = GPT2.model_magic, LLAMA3.model_magic, NANOCHAT.model_magic
GPT2_HEADER_BYTES, LLAMA3_HEADER_BYTES = GPT2.model_header_bytes, LLAMA3.model_header_bytes
NANOCHAT_HEADER_BYTES = NANOCHAT.model_header_bytes
VERSIONS = MODEL_VERSIONS  # tensor dtype -> the header's version field
ITEMSIZE = {VERSIONS["float32"]: 4, VERSIONS["bfloat16"]: 2}  # version -> bytes per parameter


class ModelFileError(ValueError):
    """A model file that cannot be read: the message is one line naming the file."""


# ----------------------------------------------------------------------------- bytes on disk (both families)


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
    """The first int32 of a model file, to tell the families apart."""
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


# ----------------------------------------------------------------------------- GPT-2 checkpoint


@dataclass(frozen=True)
class Gpt2Header:
    """A GPT-2 checkpoint's header: the version (3 fp32, 5 bf16) and the model's sizes."""
    version: int
    maxT: int
    V: int
    L: int
    NH: int
    C: int
    Vp: int


# field -> (header index, its name in error lines, largest value): llmc/checkpoint.h's table; the smallest is 1
GPT2_FIELDS: dict[str, tuple[int, str, int]] = {
    "maxT": (2, "maxT (header[2])", 1 << 20), "V": (3, "vocab size V (header[3])", 1 << 24),
    "L": (4, "layers L (header[4])", 4096), "NH": (5, "heads NH (header[5])", 1 << 16),
    "C": (6, "channels C (header[6])", 1 << 17), "Vp": (7, "padded vocab Vp (header[7])", 1 << 24),
}

def gpt2_padded_vocab(V: int) -> int:
    """Vp: V rounded up to a multiple of 128 (families.gpt2.VOCAB_PADDING)."""
    return (V + VOCAB_PADDING - 1) // VOCAB_PADDING * VOCAB_PADDING


def gpt2_tensor_shapes(h: Gpt2Header) -> dict[str, tuple[int, ...]]:
    """The 16 checkpoint tensors in file order (GPT2.tensor_names)."""
    L, C = h.L, h.C
    return {
        "wte": (h.Vp, C), "wpe": (h.maxT, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
        "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C),
        "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,), "lnfb": (C,),
    }


def gpt2_header_bytes(h: Gpt2Header) -> bytes:
    return header_bytes([GPT2_MAGIC, h.version, h.maxT, h.V, h.L, h.NH, h.C, h.Vp])


def gpt2_check_header(path: Path, ints: np.ndarray) -> Gpt2Header:
    """The header's magic, version and sizes, each in its range (llmc/checkpoint.h's rules and error lines)."""
    if ints[0] != GPT2_MAGIC:
        raise ModelFileError(f"{path}: not a model checkpoint file (magic {ints[0]}, expected {GPT2_MAGIC})")
    if int(ints[1]) not in ITEMSIZE:
        raise ModelFileError(f"{path}: unsupported model checkpoint version {ints[1]} (expected 3 = fp32 or 5 = bf16)")
    for index, name, hi in GPT2_FIELDS.values():
        if not 1 <= ints[index] <= hi:
            raise ModelFileError(f"{path}: bad model checkpoint header: {name} = {ints[index]} is outside [1, {hi}]")
    h = Gpt2Header(int(ints[1]), *(int(ints[index]) for index, _, _ in GPT2_FIELDS.values()))
    if h.Vp < h.V:
        raise ModelFileError(f"{path}: bad model checkpoint header: padded vocab Vp = {h.Vp} is smaller than V = {h.V}")
    if h.C % h.NH:
        raise ModelFileError(f"{path}: bad model checkpoint header: channels C = {h.C} is not a multiple of heads NH = {h.NH}")
    return h


def read_gpt2_header(path: str | Path) -> Gpt2Header:
    """A GPT-2 checkpoint's header, validated, and checked against the file's real size."""
    path = Path(path)
    size = file_size(path)
    if size < GPT2_HEADER_BYTES:
        raise ModelFileError(f"{path}: not a model checkpoint (file is {size} bytes, too short for the {GPT2_HEADER_BYTES}-byte header)")
    h = gpt2_check_header(path, read_ints(path, "<i4", 256))
    expected = GPT2_HEADER_BYTES + sum(math.prod(s) for s in gpt2_tensor_shapes(h).values()) * ITEMSIZE[h.version]
    if size != expected:
        raise ModelFileError(f"{path}: model checkpoint size mismatch: the header (L={h.L} C={h.C} Vp={h.Vp} "
                             f"maxT={h.maxT}, {'fp32' if h.version == 3 else 'bf16'}) needs {expected} bytes, the file "
                             f"size is {size}{' (truncated?)' if size < expected else ''}")
    return h


def read_gpt2(path: str | Path) -> tuple[Gpt2Header, dict[str, np.ndarray]]:
    """A GPT-2 checkpoint: its header and its 16 tensors (float32, file order)."""
    h = read_gpt2_header(path)
    return h, read_tensors(Path(path), GPT2_HEADER_BYTES, h.version, gpt2_tensor_shapes(h))


# ----------------------------------------------------------------------------- Llama 3 model file


def llama_ffn_hidden(n_embd: int, multiple_of: int, ffn_dim_multiplier: float) -> int:
    """Llama's SwiGLU hidden size: 2/3 of 4C, scaled by ffn_dim_multiplier (float32, 0 = none), rounded up
    to a multiple of multiple_of (the arithmetic in double precision, as the C reader does it)."""
    h = int(2 * (4 * n_embd) / 3)
    if ffn_dim_multiplier > 0:
        h = int(float(np.float32(ffn_dim_multiplier)) * h)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


@dataclass
class LlamaConfig:
    """A Llama 3 model's shape and hyperparameters: everything its model file's header holds."""
    block_size: int = 1024
    vocab_size: int = 128256
    n_layer: int = 16
    n_head: int = 32
    n_kv_head: int = 8
    n_embd: int = 2048
    ffn_dim_multiplier: float = 0.0  # 0 = none
    multiple_of: int = 256
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    use_scaled_rope: bool = False
    rope_factor: float = 0.0  # the four Llama 3.1 scaling parameters, 0 when use_scaled_rope is off
    low_freq_factor: float = 0.0
    high_freq_factor: float = 0.0
    original_max_position: float = 0.0
    tied_embeddings: bool = False
    version_minor: int = 0  # Llama 3.<minor>; 0 for dN models from scratch
    ffn_hidden: int = field(init=False)

    def __post_init__(self) -> None:
        # the model file stores these as float32: the reference computes with exactly what the C side reads
        for name in ("ffn_dim_multiplier", "norm_eps", "rope_theta", "rope_factor", "low_freq_factor", "high_freq_factor",
                     "original_max_position"):
            setattr(self, name, float(np.float32(getattr(self, name))))
        self.ffn_hidden = llama_ffn_hidden(self.n_embd, self.multiple_of, self.ffn_dim_multiplier)

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


def llama_config_problem(c: LlamaConfig) -> str:
    """What keeps the model from being built with these shapes ("" when nothing does)."""
    if min(c.block_size, c.vocab_size, c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.multiple_of) < 1:
        return "every size must be at least 1"
    if c.n_embd % c.n_head or c.head_size % 2:
        return f"n_embd {c.n_embd} must be n_head {c.n_head} times an even head size"
    if c.n_head % c.n_kv_head:
        return f"n_head {c.n_head} is not a multiple of n_kv_head {c.n_kv_head}"
    if not c.norm_eps > 0 or not c.rope_theta > 0:
        return f"norm_eps {c.norm_eps} and rope_theta {c.rope_theta} must be positive"
    if c.use_scaled_rope and not (c.rope_factor > 0 and c.high_freq_factor > c.low_freq_factor > 0 and c.original_max_position > 0):
        return "scaled RoPE needs factor > 0, high_freq_factor > low_freq_factor > 0 and original_max_position > 0"
    return ""


def llama3_tensor_shapes(c: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every model-file tensor in file order (LLAMA3.tensor_names; lm_head only when the embeddings are untied)."""
    L, C, V, F, HS = c.n_layer, c.n_embd, c.vocab_size, c.ffn_hidden, c.head_size
    shapes = {"wte": (V, C), "ln1w": (L, C), "qkvw": (L, (c.n_head + 2 * c.n_kv_head) * HS, C), "attprojw": (L, C, C),
              "ln2w": (L, C), "fcw": (L, F, C), "fcw2": (L, F, C), "fcprojw": (L, C, F), "lnfw": (C,)}
    return shapes if c.tied_embeddings else {**shapes, "lm_head": (V, C)}


def llama3_header_bytes(c: LlamaConfig, version: int) -> bytes:
    ints = [LLAMA3_MAGIC, version, c.block_size, c.vocab_size, c.n_layer, c.n_head, c.n_kv_head, c.n_embd,
            int(c.ffn_dim_multiplier), c.multiple_of, int(c.norm_eps), int(c.rope_theta), int(c.use_scaled_rope),
            4, 3, c.version_minor, int(c.tied_embeddings), c.ffn_hidden]
    floats = [c.ffn_dim_multiplier, c.norm_eps, c.rope_theta, c.rope_factor, c.low_freq_factor, c.high_freq_factor,
              c.original_max_position]
    return header_bytes(ints) + header_bytes(floats, "<f4")


def llama3_config_from_header(path: Path, hi: np.ndarray, hf: np.ndarray) -> LlamaConfig:
    """The config the header describes, checked: positive sizes, a buildable shape, FFN size by Llama's rule."""
    sizes = [int(v) for v in (*hi[2:8], hi[9])]
    if min(sizes) < 1:
        raise ModelFileError(f"{path}: bad header: block size, vocab, layers, heads, kv heads, channels and "
                             f"multiple_of {sizes} must be positive")
    c = LlamaConfig(
        block_size=int(hi[2]), vocab_size=int(hi[3]), n_layer=int(hi[4]), n_head=int(hi[5]), n_kv_head=int(hi[6]),
        n_embd=int(hi[7]), ffn_dim_multiplier=float(hf[0]), multiple_of=int(hi[9]), norm_eps=float(hf[1]),
        rope_theta=float(hf[2]), use_scaled_rope=bool(hi[12]), rope_factor=float(hf[3]), low_freq_factor=float(hf[4]),
        high_freq_factor=float(hf[5]), original_max_position=float(hf[6]), tied_embeddings=bool(hi[16]),
        version_minor=int(hi[15]),
    )
    problem = llama_config_problem(c)
    if problem:
        raise ModelFileError(f"{path}: bad Llama config: {problem}")
    if int(hi[17]) != c.ffn_hidden:
        raise ModelFileError(f"{path}: header FFN hidden size {int(hi[17])} is not Llama's rule for C={c.n_embd}, "
                             f"multiple_of={c.multiple_of}, ffn_dim_multiplier={c.ffn_dim_multiplier} ({c.ffn_hidden})")
    return c


def read_two_part_header(path: Path, magic: int, header_length: int, family: str) -> tuple[int, np.ndarray, np.ndarray]:
    """The file's size and its 256 int32 + 256 float32 header (the Llama 3 and nanochat model files), its length,
    magic and version checked."""
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


def read_llama3_header(path: str | Path) -> tuple[LlamaConfig, int]:
    """A Llama 3 model file's config and version (3 fp32, 5 bf16): magic, version, header sizes and file length checked."""
    path = Path(path)
    size, hi, hf = read_two_part_header(path, LLAMA3_MAGIC, LLAMA3_HEADER_BYTES, "Llama 3")
    c = llama3_config_from_header(path, hi, hf)
    check_body_size(path, size, LLAMA3_HEADER_BYTES, llama3_tensor_shapes(c), int(hi[1]))
    return c, int(hi[1])


def read_llama3(path: str | Path) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """A Llama 3 model file: its config and its tensors (float32, file order)."""
    c, version = read_llama3_header(path)
    return c, read_tensors(Path(path), LLAMA3_HEADER_BYTES, version, llama3_tensor_shapes(c))


# ----------------------------------------------------------------------------- nanochat model file


@dataclass
class NanoChatConfig:
    """A nanochat GPT's shape and hyperparameters: everything its model file's header holds."""
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 6
    n_kv_head: int = 6
    n_embd: int = 768
    ffn_hidden: int = 3072
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    softcap: float = 15.0  # logits = softcap * tanh(logits / softcap); 0 = none

    def __post_init__(self) -> None:
        # the model file stores these as float32: the reference computes with exactly what the C side reads
        for name in ("norm_eps", "rope_theta", "softcap"):
            setattr(self, name, float(np.float32(getattr(self, name))))

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


def nanochat_config_problem(c: NanoChatConfig) -> str:
    """What keeps the model from being built with these shapes ("" when nothing does): llmc/nanochat.h's checks."""
    if min(c.block_size, c.vocab_size, c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.ffn_hidden) < 1:
        return "every size must be at least 1"
    if c.n_embd % c.n_head:
        return f"channels C {c.n_embd} is not a multiple of heads NH {c.n_head}"
    if c.head_size % 2:
        return f"head size {c.head_size} (C / NH) must be even for RoPE"
    if c.n_kv_head > c.n_head or c.n_head % c.n_kv_head:
        return f"heads NH {c.n_head} is not a multiple of kv heads NKV {c.n_kv_head}"
    if not 0 < c.norm_eps < 1:
        return f"norm_eps {c.norm_eps} must be in (0, 1)"
    if not (math.isfinite(c.rope_theta) and c.rope_theta > 1):
        return f"rope_theta {c.rope_theta} must be finite and > 1"
    if not (math.isfinite(c.softcap) and c.softcap >= 0):
        return f"softcap {c.softcap} must be finite and >= 0 (0 = none)"
    return ""


def nanochat_tensor_shapes(c: NanoChatConfig) -> dict[str, tuple[int, ...]]:
    """Every model-file tensor in file order (NANOCHAT.tensor_names)."""
    L, C, V, F, HS = c.n_layer, c.n_embd, c.vocab_size, c.ffn_hidden, c.head_size
    return {"wte": (V, C), "qkvw": (L, (c.n_head + 2 * c.n_kv_head) * HS, C), "attprojw": (L, C, C),
            "fcw": (L, F, C), "fcprojw": (L, C, F), "lm_head": (V, C)}


def nanochat_header_bytes(c: NanoChatConfig, version: int) -> bytes:
    ints = [NANOCHAT_MAGIC, version, c.block_size, c.vocab_size, c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.ffn_hidden]
    return header_bytes(ints) + header_bytes([c.norm_eps, c.rope_theta, c.softcap], "<f4")


def read_nanochat_header(path: str | Path) -> tuple[NanoChatConfig, int]:
    """A nanochat model file's config and version (3 fp32, 5 bf16): magic, version, header fields and file length
    checked, one ModelFileError line each."""
    path = Path(path)
    size, hi, hf = read_two_part_header(path, NANOCHAT_MAGIC, NANOCHAT_HEADER_BYTES, "nanochat")
    c = NanoChatConfig(block_size=int(hi[2]), vocab_size=int(hi[3]), n_layer=int(hi[4]), n_head=int(hi[5]),
                       n_kv_head=int(hi[6]), n_embd=int(hi[7]), ffn_hidden=int(hi[8]), norm_eps=float(hf[0]),
                       rope_theta=float(hf[1]), softcap=float(hf[2]))
    problem = nanochat_config_problem(c)
    if problem:
        raise ModelFileError(f"{path}: bad nanochat header: {problem}")
    check_body_size(path, size, NANOCHAT_HEADER_BYTES, nanochat_tensor_shapes(c), int(hi[1]))
    return c, int(hi[1])


def read_nanochat(path: str | Path) -> tuple[NanoChatConfig, dict[str, np.ndarray]]:
    """A nanochat model file: its config and its tensors (float32, file order)."""
    c, version = read_nanochat_header(path)
    return c, read_tensors(Path(path), NANOCHAT_HEADER_BYTES, version, nanochat_tensor_shapes(c))
