"""
What a model family's description holds: the two record types each family's module (pyllmc/families/<name>.py)
fills in beside its model file's header and checks. The references (train_<name>.py), token_shards.py and the dev/
scripts read a family's numbers and names from there (the dev/ scripts through pyllmc.families' registry) instead of
writing them again. numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ShardFormat:
    """A family's token shards: int32 header[256] = {magic, version, ntok, 0...}, then ntok tokens of `dtype`; its
    chat shards (pyllmc/token_shards.py): {magic, chat_version, ntok, T, 0...}, the tokens, then ntok mask bytes."""

    model_desc: str  # its name on the data scripts' command line (-m/--model_desc)
    magic: int
    version: int
    dtype: np.dtype  # little-endian token type on disk
    vocab_size: int  # default upper bound (exclusive) for token ids
    chat_version: int  # header[1] of its chat shards: the same tokens, then one loss-mask byte per token


# Every family's tokenizer file's header[0] (llmc/tokenizer.h)
TOKENIZER_MAGIC = 20240328


@dataclass(frozen=True, kw_only=True)
class Family:
    """One model family: its files (model file, token shards, tokenizer file, debug state) and the reference's
    defaults. The header layout and the reader are its module's (over model_file.py's mechanism); the model is the
    reference's. What the families after GPT-2 (the decoders) name by rule has that rule as its default."""

    name: str  # the prefix of its files: gpt2_124M.bin, llama3_d2.bin
    model_magic: int  # model file: header[0]
    tensor_names: tuple[str, ...]  # model file: its tensors in file order
    shards: ShardFormat
    default_model: str  # the reference's --model default
    model_help: str
    default_input_bin: str  # the reference's --input_bin default: the family's tinyshakespeare shard
    input_bin_help: str
    learning_rate: float  # the reference's --learning_rate default
    # its chat template (pyllmc/chat.py's CHAT_FORMATS): "nanochat", "llama3" or "chatml"
    chat_format: str
    model_header_bytes: int = 2048  # model file: the header's length, the tensors follow it (256 int32, 256 float32)
    # the tokenizer file the reference writes and the C programs decode with ("": <name>_tokenizer.bin)
    tokenizer_file: str = ""
    tokenizer_magic: int = TOKENIZER_MAGIC
    tokenizer_version: int = 3  # 3: the end-of-text and BOS ids (Llama 3's layout); GPT-2's 2 has no BOS
    # the reference's debug state (one batch, its logits, loss and gradients, steps); magic 0: the model file's
    debug_state_magic: int = 0
    debug_state_version: int = 3  # 3: the Llama 3 layout, with gradient norms per step
    vocab_padding: int = 1  # the model file stores V rounded up to a multiple of this (wte's and lm_head's rows)
    # Muon orthogonalises the fused q, k, v projection (qkvw) as three matrices, its q, k and v rows (nanochat's split),
    # not as one; llmc/model_family.h's muon_splits_qkv says the same for the C trainers
    muon_splits_qkv: bool = False

    def __post_init__(self) -> None:
        # the defaults by rule, filled in from the name and the model file's magic (the record is frozen)
        if not self.tokenizer_file:
            object.__setattr__(self, "tokenizer_file", f"{self.name}_tokenizer.bin")
        if not self.debug_state_magic:
            object.__setattr__(self, "debug_state_magic", self.model_magic)


@dataclass(frozen=True)
class OutputChecks:
    """A family's everyday commands in dev/check_outputs.py's fixed list (every file they write byte-identical before
    and after a change). They run in the family's directory of the scratch space (named after it) unless a directory is
    given: bash lines with $R the repository and $PY its Python, ../data the tinyshakespeare GPT-2 shards, ../out the
    trainers' output. The list itself (what each trainer run does, the order) is check_outputs.py's. The defaults are
    the decoders' rule: shards of their own tokenizer in ts/, d2 from scratch."""

    references: tuple[tuple[str, str, str], ...]  # (command name, bash line, directory): the inputs the others read
    model: str  # the CPU trainer's -e: 4 steps with checkpoints, validation and a sample, and the resume of step 2
    test_states: tuple[tuple[str, str, str], ...]  # (label, model file, debug state): the test program on each (fp32),
    # the first also with -p bf16
    generate: str  # generate's flags after -e ../out/<name>/model_00000004.bin
    data: str = "ts"  # the directory of those runs' shards
    scratch_model: str | None = "d2"  # a dN the trainer also runs from scratch (2 steps)
    side_model: str | None = None  # the -e of its Muon and -p bf16 runs, on the shards in ts/ (None: model's)
    cuda_cpu: tuple[tuple[str, str, str], ...] = ()  # (command name, bash line, directory): its CPU-target programs
    cuda_cpu_targets: tuple[str, ...] = ()  # the make targets they run (build/cuda_cpu/...)


def debug_state_files(*stems: tuple[str, str]) -> tuple[tuple[str, str, str], ...]:
    """OutputChecks.test_states of (label, stem) pairs: (label, stem.bin, stem_debug_state.bin)."""
    return tuple((label, f"{stem}.bin", f"{stem}_debug_state.bin") for label, stem in stems)


def cuda_cpu_program(program: str) -> str:
    """A program built for the CPU execution target (dev/cuda_cpu), as an OutputChecks bash line names it."""
    return f'"$R/build/cuda_cpu/{program}"'


def cuda_cpu_decoder_checks(name: str, model: str, train_flags: str) -> dict[str, tuple]:
    """OutputChecks.cuda_cpu and cuda_cpu_targets of a decoder family with CUDA programs, by their names' rule
    (train_<name>cu_fp32, test_<name>cu_fp32), run in its directory: the trainer on `model` and the shards in ts/
    (batch 4 of 64, validation and a sample every 2 steps) with `train_flags`, into ../out/<name>cu; the test program
    on `model` and its debug state."""
    train, test = f"train_{name}cu_fp32", f"test_{name}cu_fp32"
    shards = "-i ts/tiny_shakespeare_train.bin -j ts/tiny_shakespeare_val.bin -b 4 -t 64 -v 2 -m 1"
    state = model.removesuffix(".bin") + "_debug_state.bin"
    return {
        "cuda_cpu": ((f"train_{name}cu", f"{cuda_cpu_program(train)} -e {model} {shards} {train_flags} -o ../out/{name}cu",
                      name),
                     (f"test_{name}cu", f"{cuda_cpu_program(test)} -e {model} -s {state}", name)),
        "cuda_cpu_targets": (f"build/cuda_cpu/{train}", f"build/cuda_cpu/{test}"),
    }


# A model file's header[1]: the dtype of its tensors, the same numbers in every family.
MODEL_VERSIONS = {"float32": 3, "bfloat16": 5}
