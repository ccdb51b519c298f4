"""Rewrites CUDA sources for the CPU execution target (dev/cuda_cpu/README.md).

The one construct of llmc's CUDA code that a host C++ compiler cannot parse is the launch,
`kernel<<<grid, block[, shared[, stream]]>>>(args);`. Each becomes

    cuda_cpu_launch(cuda_cpu_config(grid, block, ...), "kernel", __FILE__, __LINE__,
                    [](const auto&... cuda_cpu_a) { kernel(cuda_cpu_a...); }, args)

(the arguments are evaluated once, at the launch, checked and kept by value until the kernel runs in
stream order; every CUDA thread then calls the kernel with them).
Shared memory is per block and its reads are checked (initcheck), so its declarations are rewritten
into the accessors of dev/cuda_cpu/include/cuda_cpu_device.h, each on its own line:

    __shared__ float acc[8][32];    ->  static CudaCpuSharedSite cuda_cpu_site_acc = {"acc", __FILE__, __LINE__, -1};
                                        CudaCpuSharedRef<float[8][32]> acc = cuda_cpu_static_shared<float[8][32]>(&cuda_cpu_site_acc);
    extern __shared__ float buf[];  ->  CudaCpuSharedPtr<float> buf = cuda_cpu_dynamic_shared<float>();

A `__shared__` it cannot rewrite (several variables in one declaration, an initialiser, a namespace-
scope variable outside a function), `sizeof` of a shared variable and `auto x = shared...` (which
would bind the accessor, not copy the value) are refused with the line.
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
            f"[](const auto&... cuda_cpu_a) {{ {flat(name)}(cuda_cpu_a...); }}{', ' if args.strip() else ''}{args})"
        )
        replacement += "\n" * (original.count("\n") - replacement.count("\n"))
        out.append(text[copied:start])
        out.append(replacement)
        copied = i = close + 1
        count += 1
    out.append(text[copied:])
    return "".join(out), count


SHARED_ALIGN = r"(?:(?:__align__|alignas)\s*\(\s*\d+\s*\)\s+)?"
SHARED_TYPE = r"([A-Za-z_][\w:<>, ]*?)"
DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+" + SHARED_ALIGN + SHARED_TYPE + r"\s+(\w+)\s*\[\s*\]\s*;")
STATIC_SHARED = re.compile(r"__shared__\s+" + SHARED_ALIGN + SHARED_TYPE + r"\s+(\w+)\s*((?:\[[^\[\];]+\]\s*)*);")


def line_of(text: str, i: int) -> int:
    return text.count("\n", 0, i) + 1


def rewrite_shared(text: str) -> tuple[str, list[str]]:
    """Shared declarations -> the accessors of cuda_cpu_device.h; returns the text and the variables' names."""
    out: list[str] = []
    names: list[str] = []
    i = copied = 0
    while i < len(text):
        j = skip_literal_or_comment(text, i)
        if j != i:
            i = j
            continue
        if not (text[i].isalpha() or text[i] == "_") or (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
            i += 1
            continue
        dynamic = DYNAMIC_SHARED.match(text, i) if text.startswith("extern", i) else None
        static = STATIC_SHARED.match(text, i) if text.startswith("__shared__", i) else None
        if dynamic is not None:
            elem, name = dynamic.group(1).strip(), dynamic.group(2)
            replacement = f"CudaCpuSharedPtr<{elem}> {name} = cuda_cpu_dynamic_shared<{elem}>();"
            end = dynamic.end()
        elif static is not None:
            base, name, dims = static.group(1).strip(), static.group(2), "".join(static.group(3).split())
            if base in ("static", "extern", "const", "volatile"):
                raise TranslateError(f"line {line_of(text, i)}: `__shared__ {base} ...`: write `__shared__ T name[...];`")
            ty = f"{base}{dims}"
            site = f"cuda_cpu_site_{name}"
            replacement = (f'static CudaCpuSharedSite {site} = {{"{name}", __FILE__, __LINE__, -1}}; '
                           f"CudaCpuSharedRef<{ty}> {name} = cuda_cpu_static_shared<{ty}>(&{site});")
            end = static.end()
        elif text.startswith("__shared__", i) and not text[i + 10 : i + 11].isalnum() and text[i + 10 : i + 11] != "_":
            raise TranslateError(f"line {line_of(text, i)}: a __shared__ declaration translate.py cannot rewrite "
                                 "(one variable per declaration, no initialiser: `__shared__ T name[N];`)")
        else:
            i += 1
            while i < len(text) and (text[i].isalnum() or text[i] == "_"):
                i += 1
            continue
        names.append(name)
        out.append(text[copied:i])
        out.append(replacement + "\n" * text.count("\n", i, end))
        copied = i = end
    out.append(text[copied:])
    return "".join(out), names


def code_only(text: str) -> str:
    """text with its comments and literals blanked (newlines kept, so positions and lines still match)."""
    out: list[str] = []
    i = copied = 0
    while i < len(text):
        j = skip_literal_or_comment(text, i)
        if j == i:
            i += 1
            continue
        out.append(text[copied:i])
        out.append("".join(c if c == "\n" else " " for c in text[i:j]))
        copied = i = j
    out.append(text[copied:])
    return "".join(out)


def refuse_value_uses(text: str, names: list[str]) -> None:
    """sizeof and auto would see the accessor, not the variable: refused rather than silently wrong."""
    text = code_only(text)
    for name in sorted(set(names)):
        for pattern, what in ((rf"\bsizeof\s*\(?\s*{name}\b", "sizeof of a __shared__ variable"),
                              (rf"\bauto\b[\s&*]*\w+\s*=\s*{name}\b", "`auto` initialised from a __shared__ variable")):
            m = re.search(pattern, text)
            if m is not None:
                raise TranslateError(f"line {line_of(text, m.start())}: {what} ({name}): the CPU target cannot "
                                     "translate it; name the type (sizeof(float) * N, float x = ...)")


def translate_file(root: Path, out_root: Path, rel: Path) -> int:
    src = root / rel
    text = src.read_text()
    try:
        shared, names = rewrite_shared(text)
        refuse_value_uses(text, names)
        body, count = rewrite_launches(shared)
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
