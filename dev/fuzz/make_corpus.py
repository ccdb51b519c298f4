"""Write small valid seed inputs for the llmc libFuzzer harnesses in dev/fuzz/, with llmc's own writers.

    python dev/fuzz/make_corpus.py OUT_DIR [--train-state-harness dev/fuzz/fuzz_train_state]

makes OUT_DIR/<harness>/seed_* for every harness:
    checkpoint    train_gpt2.write_model (fp32 and bf16) of a tiny GPT (maxT 8, V 5, L 1, NH 2, C 8)
    debug_state   train_gpt2.write_debug_state of that same tiny model (fuzz_debug_state.c expects it), one masked
    tokenizer     pyllmc.reference.tokenizer_files.write_gpt2_tokenizer's file, cut down to its first tokens (header adjusted)
    shard         data_common.write_datafile (gpt-2 and llama-3) and chat shards (write_chat_datafile), behind
                  fuzz_shard.c's 4 parameter bytes
    evalfile      data_common.write_evalfile, behind fuzz_evalfile.c's 2 parameter bytes
    bpe           write_bpe.bpe_file_bytes of tiktoken's first ranks, then texts to encode
    train_state   checkpoint.h's train_state_write, run inside the harness (needs --train-state-harness)
    chat          conversations as JSON lines (generate --chat --jsonl's input), written by json.dumps
The corpus is generated when the tests run; it is not committed. Needs tiktoken's gpt2 files
(set TIKTOKEN_CACHE_DIR when offline).
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# write_bpe.py and data_common.py are scripts' modules in dev/ and dev/data/, not installed like the root's
sys.path.insert(0, str(REPO / "dev"))
sys.path.insert(0, str(REPO / "dev" / "data"))

# the tiny model of the checkpoint and debug-state seeds (fuzz_debug_state.c hard-codes it)
TINY = dict(block_size=8, vocab_size=5, n_layer=1, n_head=2, n_embd=8)

TEXTS = [
    b"Hello world, this is llmc.",
    b"First Citizen:\nBefore we proceed any further, hear me speak.<|endoftext|>All:\nSpeak, speak.",
    "caf\u00e9 \u00fcber na\u00efve \u65e5\u672c\u8a9e 123 4567 \U0001f600!!".encode(),
    b"  spaces   and\ttabs\n\n  ",
    b"bad utf-8: \xff\xfe\xc3\x28 \xe2\x82 \xed\xa0\x80 end",
    b"<|endoftext|><|endoftext|>",
    b"x" * 300,
]


def write_checkpoint_seeds(out: Path) -> None:
    import torch

    import train_gpt2 as ref
    from pyllmc.reference.debug_state import mask_half

    torch.manual_seed(0)
    model = ref.GPT(ref.GPTConfig(**TINY))
    model.init_weights(42)
    (out / "checkpoint").mkdir(parents=True, exist_ok=True)
    ref.write_model(model, out / "checkpoint" / "seed_fp32.bin", "float32")
    ref.write_model(model, out / "checkpoint" / "seed_bf16.bin", "bfloat16")
    (out / "debug_state").mkdir(parents=True, exist_ok=True)
    for k, (B, T) in enumerate([(2, 4), (1, 8)]):
        x = torch.randint(0, TINY["vocab_size"], (B, T), generator=torch.Generator().manual_seed(k))
        y = torch.randint(0, TINY["vocab_size"], (B, T), generator=torch.Generator().manual_seed(k + 10))
        ref.write_debug_state(model, x, y, out / "debug_state" / f"seed_{k}.bin", ref.DebugOptimizer(steps=3))
        if k == 0:  # and a masked state (header[18] = 1, targets -1) of the same batch
            ref.write_debug_state(model, x, mask_half(y), out / "debug_state" / "seed_masked.bin", ref.DebugOptimizer(steps=3))


def write_tokenizer_seeds(out: Path) -> None:
    from pyllmc.reference.tokenizer_files import write_gpt2_tokenizer

    d = out / "tokenizer"
    d.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        full = Path(tmp) / "gpt2_tokenizer.bin"
        write_gpt2_tokenizer(full)
        raw = full.read_bytes()
    header, body = list(struct.unpack("<256I", raw[:1024])), raw[1024:]
    for vocab in (260, 400):
        at = 0
        for _ in range(vocab):
            at += 1 + body[at]
        header[2], header[3] = vocab, vocab - 1  # version 2: the EOT id must be < vocab size
        (d / f"seed_{vocab}.bin").write_bytes(struct.pack("<256I", *header) + body[:at])


def write_data_seeds(out: Path) -> None:
    import numpy as np

    from data_common import write_evalfile
    from pyllmc.token_shards import write_chat_datafile, write_datafile

    rng = np.random.default_rng(0)
    d = out / "shard"
    d.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        # parameter bytes: B-1, T-1, flags (1 shuffle, 2 two processes, 4 last rank, 8/16 vocab check, 32 resume,
        # 64 llama-3 format expected), resume
        for name, model_desc, ntok, params in [
            ("gpt2", "gpt-2", 97, bytes([1, 7, 8, 0])),
            ("gpt2_shuffle", "gpt-2", 200, bytes([0, 3, 1 | 2 | 4 | 16 | 32, 0x12])),
            ("llama3", "llama-3", 65, bytes([3, 3, 64, 0])),
        ]:
            path = Path(tmp) / f"{name}.bin"
            write_datafile(path, rng.integers(0, 1000, ntok), model_desc)
            (d / f"seed_{name}.bin").write_bytes(params + path.read_bytes())
        # chat shards (a loss mask after the tokens): conversations of the T the parameter bytes ask for
        for name, model_desc, ntok, T, params in [
            ("gpt2_chat", "gpt-2", 64, 8, bytes([1, 7, 8, 0])),
            ("llama3_chat", "llama-3", 32, 4, bytes([0, 3, 2 | 64, 0])),
        ]:
            path = Path(tmp) / f"{name}.bin"
            mask = (rng.random(ntok) < 0.5).astype(np.uint8)
            mask[::T] = 0
            write_chat_datafile(path, rng.integers(0, 1000, ntok), mask, T, model_desc)
            (d / f"seed_{name}.bin").write_bytes(params + path.read_bytes())
        d = out / "evalfile"
        d.mkdir(parents=True, exist_ok=True)
        examples = []
        for i in range(5):
            ctx = rng.integers(0, 50257, 3 + i).tolist()
            endings = [rng.integers(0, 50257, 1 + (i + k) % 4).tolist() for k in range(4)]
            examples.append({"label": i % 4, "ctx_tokens": ctx, "ending_tokens": endings})
        path = Path(tmp) / "eval.bin"
        write_evalfile(path, examples)
        # parameter bytes: (B=8, 1 process), T-1
        (d / "seed_b8.bin").write_bytes(bytes([1, 31]) + path.read_bytes())
        (d / "seed_b4_2proc.bin").write_bytes(bytes([2 | 4, 15]) + path.read_bytes())


def write_bpe_seeds(out: Path) -> None:
    import tiktoken

    from write_bpe import bpe_file_bytes

    enc = tiktoken.get_encoding("gpt2")
    for n in (256, 700):
        ranks = {token: rank for token, rank in enc._mergeable_ranks.items() if rank < n}
        blob = bpe_file_bytes(ranks, n)
        d = out / "bpe"
        d.mkdir(parents=True, exist_ok=True)
        for k, text in enumerate(TEXTS):
            (d / f"seed_{n}_{k}.bin").write_bytes(struct.pack("<I", len(blob)) + blob + text)


def write_chat_seeds(out: Path) -> None:
    import json

    system = {"role": "system", "content": "Be brief."}
    user = {"role": "user", "content": TEXTS[2].decode()}
    answer = {"role": "assistant", "content": "Hello!\n\t\"quoted\" \\ <|assistant_end|>"}
    conversations = [{"messages": [user]}, {"messages": [system, user, answer, user]},
                     {"messages": [user], "source": {"name": "seed", "ids": [1, 2.5e3, True, None]}},
                     {"messages": [answer, user]}]  # refused by the check: it starts with the assistant
    d = out / "chat"
    d.mkdir(parents=True, exist_ok=True)
    for k, c in enumerate(conversations):
        (d / f"seed_{k}.json").write_text(json.dumps(c, ensure_ascii=k % 2 == 0), encoding="utf-8")


def write_train_state_seeds(out: Path, harness: Path) -> None:
    d = out / "train_state"
    d.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LLMC_FUZZ_WRITE_SEEDS": str(d)}
    proc = subprocess.run([str(harness)], env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not any(d.iterdir()):
        raise SystemExit(f"error: {harness}: writing the training-state seeds failed: {proc.stderr.strip()[-300:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path, help="directory for the corpus (one subdirectory per harness)")
    ap.add_argument("--train-state-harness", type=Path, default=None,
                    help="built dev/fuzz/fuzz_train_state, which writes the training-state seeds")
    args = ap.parse_args(argv)
    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    write_checkpoint_seeds(out)
    write_tokenizer_seeds(out)
    write_data_seeds(out)
    write_bpe_seeds(out)
    write_chat_seeds(out)
    if args.train_state_harness is not None:
        write_train_state_seeds(out, args.train_state_harness)
    for sub in sorted(p for p in out.iterdir() if p.is_dir()):
        print(f"{sub.name}: {sum(1 for _ in sub.iterdir())} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
