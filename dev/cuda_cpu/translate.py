"""Rewrites CUDA sources for the CPU execution target (dev/cuda_cpu/README.md).

The one construct of llmc's CUDA code that a host C++ compiler cannot parse is the launch,
`kernel<<<grid, block[, shared[, stream]]>>>(args);`. Each becomes

    cuda_cpu_launch(cuda_cpu_config(grid, block, ...), "kernel", __FILE__, __LINE__,
                    cuda_cpu_args(args), [&]() { kernel(args); })

(the kernel's arguments are checked once at the launch; every CUDA thread then runs the closure);
and `extern __shared__ T name[];` inside a kernel becomes a pointer to the block's dynamic shared
memory (cuda_cpu_dynamic_shared).
Everything else is copied as it is, with a #line directive so that compiler messages and
__FILE__ name the original file, and each launch keeps its line.

    python dev/cuda_cpu/translate.py --root . --out build/cuda_cpu/src FILE...
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path


class TranslateError(Exception):
    pass


def skip_literal_or_comment(text: str, i: int) -> int:
    """If a comment or a string/char literal starts at i, the index just past it; else i."""
    if text.startswith("//", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    if text.startswith("/*", i):
        end = text.find("*/", i + 2)
        if end < 0:
            raise TranslateError("unterminated comment")
        return end + 2
    if text[i] in "\"'":
        quote, j = text[i], i + 1
        while j < len(text) and text[j] != quote:
            j += 2 if text[j] == "\\" else 1
        return j + 1
    return i


def find_closing(text: str, i: int, open_ch: str, close_ch: str) -> int:
    """Index of the close_ch matching the open_ch at i (comments and literals skipped)."""
    depth = 0
    while i < len(text):
        j = skip_literal_or_comment(text, i)
        if j != i:
            i = j
            continue
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise TranslateError(f"no matching {close_ch!r}")


def kernel_name_start(text: str, launch: int) -> int:
    """Start of the kernel expression before `<<<`: a (qualified) name, maybe with template arguments."""
    j = launch
    while j > 0 and text[j - 1].isspace():
        j -= 1
    if j > 0 and text[j - 1] == ">":
        depth = 0
        while j > 0:
            j -= 1
            if text[j] == ">":
                depth += 1
            elif text[j] == "<":
                depth -= 1
                if depth == 0:
                    break
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_:"):
        j -= 1
    return j


def flat(s: str) -> str:
    return " ".join(s.split())


def rewrite_launches(text: str) -> tuple[str, int]:
    out: list[str] = []
    i = copied = count = 0
    while i < len(text):
        j = skip_literal_or_comment(text, i)
        if j != i:
            i = j
            continue
        if not text.startswith("<<<", i):
            i += 1
            continue
        start = kernel_name_start(text, i)
        name = text[start:i].strip()
        if not name:
            raise TranslateError(f"line {text.count(chr(10), 0, i) + 1}: a launch without a kernel name")
        cfg_end = text.find(">>>", i + 3)
        if cfg_end < 0:
            raise TranslateError(f"line {text.count(chr(10), 0, i) + 1}: `<<<` without `>>>`")
        config = text[i + 3 : cfg_end]
        p = cfg_end + 3
        while p < len(text) and text[p].isspace():
            p += 1
        if p >= len(text) or text[p] != "(":
            raise TranslateError(f"line {text.count(chr(10), 0, i) + 1}: `>>>` not followed by the arguments")
        close = find_closing(text, p, "(", ")")
        args = text[p + 1 : close]
        original = text[start : close + 1]
        replacement = (
            f'cuda_cpu_launch(cuda_cpu_config({flat(config)}), "{flat(name)}", __FILE__, __LINE__, '
            f"cuda_cpu_args({flat(args)}), [&]() {{ {flat(name)}({args}); }})"
        )
        replacement += "\n" * (original.count("\n") - replacement.count("\n"))
        out.append(text[copied:start])
        out.append(replacement)
        copied = i = close + 1
        count += 1
    out.append(text[copied:])
    return "".join(out), count


DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+(?:(?:__align__|alignas)\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:<>, ]*?)\s+(\w+)\s*\[\s*\]\s*;")


def rewrite_dynamic_shared(text: str) -> str:
    """`extern __shared__ T name[];` (inside a kernel) -> a pointer to the block's dynamic shared memory."""
    return DYNAMIC_SHARED.sub(lambda m: f"{m.group(1)}* {m.group(2)} = ({m.group(1)}*)cuda_cpu_dynamic_shared();", text)


def translate_file(root: Path, out_root: Path, rel: Path) -> int:
    src = root / rel
    text = src.read_text()
    try:
        body, count = rewrite_launches(rewrite_dynamic_shared(text))
    except TranslateError as e:
        raise TranslateError(f"{rel}: {e}") from None
    dst = out_root / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    new = f'#line 1 "{rel.as_posix()}"\n{body}'
    if not dst.exists() or dst.read_text() != new:  # unchanged files keep their time stamps
        dst.write_text(new)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Rewrite CUDA launches (<<<...>>>) for the CPU execution target.")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root the FILE paths are relative to")
    parser.add_argument("--out", type=Path, required=True, help="output tree (the same relative paths)")
    parser.add_argument("files", nargs="+", type=Path, help="source files, relative to --root")
    args = parser.parse_args(argv)
    try:
        total = sum(translate_file(args.root, args.out, f) for f in args.files)
    except (TranslateError, OSError) as e:
        print(f"translate.py: {e}", file=sys.stderr)
        return 1
    print(f"translate.py: {len(args.files)} files, {total} launches rewritten into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
