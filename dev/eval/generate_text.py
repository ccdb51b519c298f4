"""
Text prompts for ./generate with a checkpoint's own tokenizer.json (a NanoChat directory's, which the C encoder
does not hold: it encodes GPT-2's and Llama 3's vocabularies only). The prompt is tokenized here with the
`tokenizers` library, its document delimiter (<|bos|>, else <|endoftext|>) first as nanochat starts every document,
and ./generate runs with those ids; every other flag goes to ./generate as it is:

    python train_nanochat.py --model hf_nanochat --num_iterations 0      # nanochat_hf_nanochat.bin, nanochat_tokenizer.bin
    python dev/eval/generate_text.py --tokenizer hf_nanochat -p "The capital of France is" \\
        -e nanochat_hf_nanochat.bin -n 32 --temperature 0

./generate decodes the output with the tokenizer file (-t, default nanochat_tokenizer.bin) that
train_nanochat.py wrote from the same tokenizer.json.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from pyllmc.llama3_tokenizer import DataError, load_checkpoint_tokenizer

REPO = Path(__file__).resolve().parent.parent.parent


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", required=True, help="the checkpoint's tokenizer.json, or the directory holding it")
    p.add_argument("-p", "--prompt", required=True, help="the prompt text")
    p.add_argument("--generate", type=Path, default=REPO / "generate", help="the generate program (default ./generate)")
    return p.parse_known_args(argv)


def prompt_ids(tokenizer: str, text: str) -> list[int]:
    """The document delimiter, then the text's ids under the tokenizer.json."""
    tok = load_checkpoint_tokenizer(tokenizer)
    return [tok.bos, *tok.encode(text)]


def main(argv: list[str] | None = None) -> int:
    args, rest = parse_args(argv)
    if "--ids" in rest or "-p" in rest or "-i" in rest:
        print("error: the prompt comes from -p here (not --ids or -i)", file=sys.stderr)
        return 2
    if not os.access(args.generate, os.X_OK):
        print(f"error: {args.generate}: no such program (make generate)", file=sys.stderr)
        return 2
    try:
        ids = prompt_ids(args.tokenizer, args.prompt)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return subprocess.run([str(args.generate), *rest, "--ids", " ".join(map(str, ids))]).returncode


if __name__ == "__main__":
    sys.exit(main())
