"""Proves that a change leaves every file the programs write byte-identical: the same fixed list of everyday commands
(the references writing model files and debug states, the CPU trainers with checkpoints, resume, Muon and -p bf16,
the test programs, generate, the CPU-target CUDA trainers and tests) runs on two revisions, and their outputs are
compared.

    dev/check_outputs.sh REV_BEFORE [REV_AFTER]      REV_AFTER default: the working tree, uncommitted changes included

For each side: a detached temporary git worktree of the revision (the working tree is used as it is), with .venv and
../shared linked as the repository expects; that side's own Makefile builds the programs the commands run; the
commands run one after the other in a scratch directory, and a manifest is written: the sha256 of every file under
that directory and each command's stdout and stderr with run-to-run noise removed (NOISE below: timings, dates,
temporary paths). The two manifests are then compared: identical files say nothing, differing files are listed,
differing text is shown as a unified diff. Exit status 0 when every file and every command's text is identical
(text of the commands named by --allow-text may differ: it is still shown), 1 otherwise, 2 on an error (a bad
revision, a failed build: one line saying which). The temporary worktrees and scratch directories are removed at
the end, whatever happens (--keep keeps them); manifests, build logs and the report stay in --out.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # pyllmc, when the project is not installed

from pyllmc.families import REGISTRY, Registered  # noqa: E402
GIT_TIMEOUT = 120


class CheckError(Exception):
    """A condition that stops the check before any comparison: printed as one `error:` line, exit status 2."""


# ---------------------------------------------------------------------------- the commands

@dataclass(frozen=True)
class Command:
    """One command of the list: a bash line run in `cwd` (relative to the scratch directory) with $R the side's
    root, $PY its Python, $S the scratch directory and $TEXT the Tiny Shakespeare text; `env` adds variables."""
    name: str
    shell: str
    cwd: str = "."
    env: tuple[tuple[str, str], ...] = ()
    cuda_cpu: bool = False  # part of the CPU-target group (--no-cuda-cpu leaves it out)


# make targets of the side's Makefile that the commands need: every family's CPU trainer and test program, generate;
# the CPU-target programs its commands run (pyllmc.families: each family's OutputChecks)
CPU_TARGETS = [program for row in REGISTRY for program in (row.trainer, f"test_{row.name}")] + ["generate"]
CUDA_CPU_TARGETS = [target for row in REGISTRY for target in row.output_checks.cuda_cpu_targets]

# -p bf16 decides from two GEMM rates it measures unless they are given: given, the decision (bf16 kept) and its line
# are the same on every run
BF16 = (("LLMC_BF16_RATES", "184,106"),)
CUDA_CPU_ENV = (("CUDA_CPU_THREADS", "2"), ("OPENBLAS_NUM_THREADS", "1"))


def step2_checkpoint(run_dir: str, resume_dir: str) -> str:
    """The shell that puts the step-2 checkpoint of run_dir (model, training state, DONE marker) alone in resume_dir,
    as a run killed after it would have left it, for a trainer's -y 1 there."""
    return (f"mkdir -p {resume_dir} && cp {run_dir}/model_00000002.bin {run_dir}/state_00000002_00000.bin "
            f"{run_dir}/DONE_00000002 {resume_dir}/ && ")


def trainer_runs(family: str, program: str, model: str, data: str, scratch_model: str | None = None,
                 side_model: str | None = None) -> list[Command]:
    """A family's CPU trainer, run in the family's directory: 4 steps of `model` on the shards in `data` with a
    checkpoint every 2, validation and a sample; the resume of its step-2 checkpoint (-y 1); 3 steps of Muon and 3 of
    -p bf16 (of `side_model` on the shards in ts/ when given); 2 steps of `scratch_model` (dN) from scratch."""
    def run(model: str, data: str, flags: str) -> str:
        return (f'"$R/{program}" -e {model} -i {data}/tiny_shakespeare_train.bin -j {data}/tiny_shakespeare_val.bin '
                f"-b 4 -t 64 {flags}")

    out = f"../out/{family}"
    main = "-x 4 -n 2 -v 2 -m 2 -s 4 -g 16"
    resume = step2_checkpoint(out, f"{out}_resume")
    side, side_data = (side_model, "ts") if side_model else (model, data)
    commands = [
        Command(program, run(model, data, f"{main} -o {out}"), family),
        Command(f"{program}-resume", resume + run(model, data, f"{main} -o {out}_resume -y 1"), family),
        Command(f"{program}-muon", run(side, side_data, f"-x 3 -n 3 -v 3 -m 2 -s 0 -op muon -o {out}_muon"), family),
        Command(f"{program}-bf16", run(side, side_data, f"-x 3 -n 3 -v 3 -m 2 -s 0 -p bf16 -o {out}_bf16"), family,
                BF16),
    ]
    if scratch_model:
        commands.append(Command(f"{program}-{scratch_model}", run(scratch_model, data, f"-x 2 -n 2 -v 0 -s 0 "
                                f"-o {out}_{scratch_model}"), family))
    return commands


def test_runs(family: str, program: str, states: list[tuple[str, str, str]]) -> list[Command]:
    """A family's test program, run in the family's directory, on (label, model file, debug state) triples in fp32;
    the first also with -p bf16."""
    commands = [Command(f"{program}{'-' + label if label else ''}", f'"$R/{program}" -e {model} -s {state}', family)
                for label, model, state in states]
    _, model, state = states[0]
    commands.append(Command(f"{program}-bf16", f'"$R/{program}" -e {model} -s {state} -p bf16', family, BF16))
    return commands


def debug_states(*stems: tuple[str, str]) -> list[tuple[str, str, str]]:
    """(label, stem) -> (label, stem.bin, stem_debug_state.bin)."""
    return [(label, f"{stem}.bin", f"{stem}_debug_state.bin") for label, stem in stems]


def family_commands(row: Registered) -> list[Command]:
    """A family's CPU trainer runs, its test program on each of its debug states and generate on the trainer's last
    checkpoint, in its directory (its OutputChecks: pyllmc/families/<name>.py)."""
    name, checks = row.name, row.output_checks
    return [
        *trainer_runs(name, row.trainer, checks.model, checks.data, scratch_model=checks.scratch_model,
                      side_model=checks.side_model),
        *test_runs(name, f"test_{name}", list(checks.test_states)),
        Command(f"generate-{name}", f'"$R/generate" -e ../out/{name}/model_00000004.bin {checks.generate}', name),
    ]


def default_commands() -> list[Command]:
    """The fixed command list: small models, few steps, everything deterministic at OMP_NUM_THREADS=2: the data, every
    family's references, then family by family its programs (registry order), then the CPU-target programs."""
    ts = "tiny_shakespeare"
    data = Command("data", f'cp "$TEXT" {ts}.txt && "$PY" "$R/dev/data/tinyshakespeare.py" --data_dir .', "data")
    references = [Command(name, shell, cwd) for row in REGISTRY for name, shell, cwd in row.output_checks.references]
    programs = [command for row in REGISTRY for command in family_commands(row)]
    return [data, *references, *programs, *cuda_cpu_runs()]


def cuda_cpu_runs() -> list[Command]:
    """The GPU trainers and test programs built for the CPU execution target (dev/cuda_cpu), each family's in its
    directory (its OutputChecks.cuda_cpu: GPT-2's 509-token vocabulary's d2 4 steps with checkpoints, the resume of
    step 2 and 2 steps of Muon in BF16; the others 2 steps with a checkpoint; each test program on a debug state, its
    own resume check included)."""
    return [Command(name, shell, cwd, CUDA_CPU_ENV, cuda_cpu=True)
            for row in REGISTRY for name, shell, cwd in row.output_checks.cuda_cpu]


def read_command_file(path: Path) -> tuple[list[Command], list[str]]:
    """A command list of one's own instead of the fixed one (--commands): `NAME: bash line` per line, `@make TARGET
    ...` for the make targets to build first, `#` comments; commands run in the scratch directory."""
    commands: list[Command] = []
    targets: list[str] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@make"):
            targets += line.split()[1:]
            continue
        name, sep, shell = line.partition(":")
        if not sep or not re.fullmatch(r"[\w.+-]+", name.strip()) or not shell.strip():
            raise CheckError(f"{path}:{number}: expected 'NAME: command' or '@make TARGET ...', got {line!r}")
        commands.append(Command(name.strip(), shell.strip()))
    if not commands:
        raise CheckError(f"{path}: no commands")
    return commands, targets


# ---------------------------------------------------------------------------- run-to-run noise

# (pattern, replacement), applied in order to every line of a command's output after the side's paths are replaced:
# what changes from one run to the next of the same program on the same inputs, and nothing else
NOISE: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?"), "<date>"),
    (re.compile(r"ETA \d+:\d{2}:\d{2}"), "ETA <eta>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}\b"), "<time>"),
    (re.compile(r"\b\d+(?:\.\d+)?(?:e[-+]?\d+)? ?(?:tok|tokens)/s\b"), "<tok/s>"),
    (re.compile(r"\b\d+(?:\.\d+)?(?:e[-+]?\d+)? ?ms\b"), "<ms>"),
    (re.compile(r"\b\d+(?:\.\d+)?(?:e[-+]?\d+)? ?s\b"), "<s>"),
]


def normalize(text: str, paths: dict[str, str]) -> str:
    """`text` without run-to-run noise: each path of `paths` (longest first) replaced by its name, then NOISE, then any
    other path under the temporary directory replaced by <tmp>."""
    for path in sorted(paths, key=len, reverse=True):
        text = text.replace(path, paths[path])
    tmp = re.escape(tempfile.gettempdir().rstrip("/"))
    lines = []
    for line in text.splitlines():
        for pattern, replacement in NOISE:
            line = pattern.sub(replacement, line)
        lines.append(re.sub(rf"{tmp}/[^\s'\"]+", "<tmp>", line))
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


# ---------------------------------------------------------------------------- the two sides

@dataclass
class Side:
    """One side of the comparison: a revision checked out in a temporary worktree, or the working tree itself."""
    label: str  # "before" / "after"
    rev: str  # as given ("" = the working tree)
    commit: str  # the full hash, or "<hash> + uncommitted changes"
    root: Path
    temporary: bool


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT)
    if check and proc.returncode != 0:
        raise CheckError(f"git {' '.join(args)} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return proc


def resolve_commit(repo: Path, rev: str) -> str:
    proc = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise CheckError(f"bad revision '{rev}': not a commit of {repo}")
    return proc.stdout.strip()


def link_environment(repo: Path, root: Path) -> None:
    """The side's .venv and ../shared as the repository expects them: links to the checkout's own (when it has them)."""
    venv = repo / ".venv"
    if venv.exists() and not (root / ".venv").exists():
        (root / ".venv").symlink_to(venv.resolve())
    shared, side_shared = repo.parent / "shared", root.parent / "shared"
    if shared.exists() and not side_shared.exists():
        side_shared.symlink_to(shared.resolve())


def make_side(repo: Path, rev: str, label: str, tmp: Path) -> Side:
    """A temporary detached worktree of `rev` in tmp/label, or (rev "") the working tree."""
    if not rev:
        head = git(repo, "rev-parse", "HEAD").stdout.strip()
        dirty = git(repo, "status", "--porcelain").stdout.strip()
        return Side(label, rev, head + (" + uncommitted changes" if dirty else ""), repo, temporary=False)
    commit = resolve_commit(repo, rev)
    root = tmp / label
    git(repo, "worktree", "add", "--detach", "--quiet", str(root), commit)
    link_environment(repo, root)
    return Side(label, rev, commit, root, temporary=True)


def remove_side(repo: Path, side: Side) -> None:
    if side.temporary:
        git(repo, "worktree", "remove", "--force", str(side.root), check=False)
        shutil.rmtree(side.root, ignore_errors=True)


def side_python(side: Side) -> str:
    venv_python = side.root / ".venv" / "bin" / "python"
    return str(venv_python) if venv_python.exists() else sys.executable


def tinyshakespeare_text(side: Side) -> Path:
    """The Tiny Shakespeare text: the side's data cache, else ../shared's seed copy, else this checkout's cache."""
    for text in (side.root / "dev/data/tinyshakespeare/tiny_shakespeare.txt",
                 side.root.parent / "shared/data/tinyshakespeare/input.txt",
                 REPO / "dev/data/tinyshakespeare/tiny_shakespeare.txt",
                 REPO.parent / "shared/data/tinyshakespeare/input.txt"):
        if text.exists():
            return text
    raise CheckError("no Tiny Shakespeare text: put it at dev/data/tinyshakespeare/tiny_shakespeare.txt "
                     "(python dev/data/tinyshakespeare.py downloads it)")


def side_environment(side: Side, scratch: Path, text: Path | None) -> dict[str, str]:
    """What every command of the side runs with: the caller's environment less its LLMC_* and CUDA_CPU_* settings
    (both sides the same), the side's root on PYTHONPATH (its modules, not the editable install's), 2 OpenMP threads,
    a fixed hash seed, no hub."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMC_", "CUDA_CPU_"))}
    # bytecode cached under build/pycache as the Makefile has it: without it every Python command compiles torch's
    # modules again (seconds each)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(REPO / "build" / "pycache"))
    env.update(R=str(side.root), PY=side_python(side), S=str(scratch), TEXT=str(text or ""), PYTHONPATH=str(side.root),
               OMP_NUM_THREADS="2", PYTHONHASHSEED="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    tiktoken = side.root.parent / "shared" / "tiktoken_cache"
    if "TIKTOKEN_CACHE_DIR" not in env and tiktoken.exists():
        env["TIKTOKEN_CACHE_DIR"] = str(tiktoken)
    return env


def build_side(side: Side, targets: list[str], jobs: int, log: Path, text: Path | None) -> None:
    """The side's own Makefile builds `targets`; the side's data shards are made when missing (reference scripts read
    them from the tree). The venv is never reinstalled: a fresh worktree's requirements.txt is newer than
    .venv/.installed, and make's setup rule would point the shared venv's editable install at the temporary tree."""
    with log.open("w") as out:
        if targets:
            cmd = ["make", "--no-print-directory", f"-j{jobs}", "--assume-old=.venv/.installed", *targets]
            out.write(f"$ {' '.join(cmd)}\n")
            out.flush()
            proc = subprocess.run(cmd, cwd=side.root, stdout=out, stderr=subprocess.STDOUT)
            if proc.returncode != 0:
                raise CheckError(f"the build of {side.label} ({side.rev or 'the working tree'}) failed: make exited "
                                 f"{proc.returncode} (its output: {log})")
        shards = side.root / "dev/data/tinyshakespeare"
        if text and not (shards / "tiny_shakespeare_train.bin").exists():
            shards.mkdir(parents=True, exist_ok=True)
            if not (shards / "tiny_shakespeare.txt").exists():
                shutil.copyfile(text, shards / "tiny_shakespeare.txt")
            out.write(f"$ {side_python(side)} dev/data/tinyshakespeare.py\n")
            out.flush()
            proc = subprocess.run([side_python(side), "dev/data/tinyshakespeare.py"], cwd=side.root, stdout=out,
                                  stderr=subprocess.STDOUT, env=side_environment(side, side.root, text))
            if proc.returncode != 0:
                raise CheckError(f"the data of {side.label} failed: dev/data/tinyshakespeare.py exited "
                                 f"{proc.returncode} (its output: {log})")


# ---------------------------------------------------------------------------- manifests

@dataclass
class Manifest:
    label: str
    commit: str
    files: dict[str, str] = field(default_factory=dict)  # path under the scratch directory -> sha256
    texts: dict[str, str] = field(default_factory=dict)  # command -> its normalized stdout, stderr and exit status
    status: dict[str, str] = field(default_factory=dict)  # command -> "exit status N" or "timed out after N s"
    seconds: dict[str, float] = field(default_factory=dict)  # command -> wall time (not compared)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.__dict__, indent=1, sort_keys=True) + "\n")

    @staticmethod
    def read(path: Path) -> Manifest:
        data = json.loads(path.read_text())
        return Manifest(data["label"], data["commit"], data["files"], data["texts"], data["status"],
                        data.get("seconds", {}))


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def written_files(scratch: Path) -> Iterator[Path]:
    for path in sorted(scratch.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path


def run_side(side: Side, commands: list[Command], scratch: Path, text: Path | None, timeout: float) -> Manifest:
    """Runs the commands in `scratch` (made empty first), printing a progress line each, and returns the manifest."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    env = side_environment(side, scratch, text)
    paths = {str(scratch): "<scratch>", str(scratch.resolve()): "<scratch>", str(side.root): "<repo>",
             str(side.root.resolve()): "<repo>", env["PY"]: "<python>"}
    manifest = Manifest(side.label, side.commit)
    for i, command in enumerate(commands, 1):
        cwd = scratch / command.cwd
        cwd.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(["bash", "-c", f"set -eo pipefail\n{command.shell}"], cwd=cwd,
                                  env={**env, **dict(command.env)}, capture_output=True, timeout=timeout)
            stdout, stderr, status = proc.stdout, proc.stderr, f"exit status {proc.returncode}"
        except subprocess.TimeoutExpired as e:
            stdout, stderr, status = e.stdout or b"", e.stderr or b"", f"timed out after {timeout:g} s"
        seconds = time.monotonic() - t0
        out = stdout.decode(errors="replace") if isinstance(stdout, bytes) else stdout
        err = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
        manifest.texts[command.name] = normalize(f"$ {command.shell}\n--- stdout\n{out}\n--- stderr\n{err}\n"
                                                 f"--- {status}\n", paths)
        manifest.status[command.name] = status
        manifest.seconds[command.name] = round(seconds, 2)
        failed = "" if status == "exit status 0" else f" ({status})"
        print(f"{side.label} {i:2d}/{len(commands)} {command.name:<28s} {seconds:6.1f} s{failed}", flush=True)
    for path in written_files(scratch):
        manifest.files[str(path.relative_to(scratch))] = sha256(path)
    return manifest


# ---------------------------------------------------------------------------- the comparison

@dataclass
class Comparison:
    lines: list[str]
    identical: bool


def compare(before: Manifest, after: Manifest, allowed: set[str]) -> Comparison:
    """Differing files listed, differing text as a unified diff (commands in `allowed` shown but not counted), and
    the commands that failed on either side: a command that fails the same way on both checks nothing, so it fails
    the comparison too."""
    lines: list[str] = []
    files = sorted(set(before.files) | set(after.files))
    differing = [p for p in files if before.files.get(p) != after.files.get(p)]
    for path in differing:
        if path not in after.files:
            lines.append(f"file only in {before.label}: {path}")
        elif path not in before.files:
            lines.append(f"file only in {after.label}: {path}")
        else:
            lines.append(f"file differs: {path}")
    names = list(before.texts) + [n for n in after.texts if n not in before.texts]
    counted, shown = 0, 0
    for name in names:
        a, b = before.texts.get(name, ""), after.texts.get(name, "")
        if a == b:
            continue
        shown += 1
        intended = name in allowed
        counted += not intended
        lines.append(f"text differs: {name}" + (" (allowed: --allow-text)" if intended else ""))
        lines += [line.rstrip("\n") for line in difflib.unified_diff(
            a.splitlines(True), b.splitlines(True), f"{before.label}/{name}", f"{after.label}/{name}")]
    lines.append(f"files: {len(files)} compared, {len(files) - len(differing)} identical, {len(differing)} differ")
    lines.append(f"text: {len(names)} commands, {len(names) - shown} identical, {shown} differ"
                 + (f" ({shown - counted} allowed)" if shown - counted else ""))
    ok = "exit status 0"
    failed = [n for n in names if before.status.get(n, ok) != ok or after.status.get(n, ok) != ok]
    for name in failed:
        lines.append(f"command failed: {name} ({before.label}: {before.status.get(name, 'not run')}, "
                     f"{after.label}: {after.status.get(name, 'not run')})")
    identical = not differing and counted == 0 and not failed
    lines.append("OK: every written file is byte-identical and the text is identical"
                 + (" where not allowed to differ" if shown else "") if identical else
                 "DIFFERENT: see the files, text and failed commands above")
    return Comparison(lines, identical)


def read_allowed(path: Path | None) -> set[str]:
    """--allow-text: command names, one a line (# comments)."""
    if path is None:
        return set()
    if not path.is_file():
        raise CheckError(f"--allow-text {path}: no such file")
    return {line.split("#")[0].strip() for line in path.read_text().splitlines() if line.split("#")[0].strip()}


# ---------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    first = REGISTRY[0]  # the help's example
    p = argparse.ArgumentParser(
        prog="dev/check_outputs.sh", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Runs the programs' everyday commands on two revisions and checks that every file they write is "
                    "byte-identical and their text identical (timings, dates and temporary paths removed).",
        epilog="Exit status: 0 identical, 1 different, 2 error (bad revision, failed build). Example:\n"
               "  dev/check_outputs.sh main            # main against the working tree\n"
               "  dev/check_outputs.sh HEAD~1 HEAD     # two commits")
    p.add_argument("rev_before", metavar="REV_BEFORE", help="the revision before the change")
    p.add_argument("rev_after", metavar="REV_AFTER", nargs="?", default="",
                   help="the revision after it (default: the working tree, uncommitted changes included)")
    p.add_argument("--allow-text", type=Path, metavar="FILE",
                   help="file naming commands (one a line) whose text may differ: intended changes, still shown")
    p.add_argument("--no-cuda-cpu", action="store_true", help="leave out the CPU-target CUDA trainers and tests")
    p.add_argument("--only", metavar="REGEX", help="only the commands whose name matches REGEX (the commands that "
                   f"write their inputs are not added: match them too, e.g. '^(data|{first.name}-reference|{first.trainer})$')")
    p.add_argument("--list", action="store_true", help="print the command list and exit")
    p.add_argument("--commands", type=Path, metavar="FILE",
                   help="run this list instead ('NAME: bash line' per line, '@make TARGET ...' to build)")
    p.add_argument("--out", type=Path, default=REPO / "build" / "check_outputs",
                   help="where the manifests, build logs and report go (default: build/check_outputs)")
    p.add_argument("--repo", type=Path, default=REPO, help="the git repository (default: this checkout)")
    p.add_argument("--jobs", type=int, default=2, help="make -j (default 2)")
    p.add_argument("--timeout", type=float, default=600, help="seconds one command may run (default 600)")
    p.add_argument("--keep", action="store_true", help="keep the temporary worktrees and the commands' outputs")
    return p.parse_args(argv)


def select_commands(args: argparse.Namespace) -> tuple[list[Command], list[str]]:
    if args.commands:
        if not args.commands.is_file():
            raise CheckError(f"--commands {args.commands}: no such file")
        commands, targets = read_command_file(args.commands)
    else:
        commands = [c for c in default_commands() if not (args.no_cuda_cpu and c.cuda_cpu)]
        targets = CPU_TARGETS + ([] if args.no_cuda_cpu else CUDA_CPU_TARGETS)
    if args.only:
        commands = [c for c in commands if re.search(args.only, c.name)]
        if not commands:
            raise CheckError(f"--only {args.only}: no command matches")
    return commands, targets


def terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # the finally blocks remove the temporary worktrees


def check(args: argparse.Namespace) -> int:
    repo = args.repo.resolve()
    if git(repo, "rev-parse", "--show-toplevel", check=False).returncode != 0:
        raise CheckError(f"--repo {repo}: not a git repository")
    commands, targets = select_commands(args)
    if args.list:
        for c in commands:
            print(f"{c.name:<28s} in {c.cwd + ':':<10s}", *(f"{k}={v}" for k, v in c.env), c.shell)
        return 0
    allowed = read_allowed(args.allow_text)
    unknown = sorted(allowed - {c.name for c in commands})
    if unknown:
        raise CheckError(f"--allow-text {args.allow_text}: no such command: {', '.join(unknown)}")
    resolve_commit(repo, args.rev_before)  # a bad revision is refused before anything is made
    if args.rev_after:
        resolve_commit(repo, args.rev_after)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="check_outputs."))
    sides: list[Side] = []
    t_start = time.monotonic()
    try:
        for label, rev in (("before", args.rev_before), ("after", args.rev_after)):
            sides.append(make_side(repo, rev, label, tmp))
        text = None if args.commands else tinyshakespeare_text(sides[0])
        for side in sides:  # both built first: a failing build stops the check before anything runs
            t0 = time.monotonic()
            print(f"{side.label}: {side.rev or 'the working tree'} ({side.commit}) in {side.root}: building",
                  flush=True)
            build_side(side, targets, args.jobs, out / f"build-{side.label}.log", text)
            print(f"{side.label}: built in {time.monotonic() - t0:.0f} s", flush=True)
        manifests = []
        for side in sides:  # one scratch path for both: a path a program writes into a file is the same
            t0 = time.monotonic()
            manifest = run_side(side, commands, tmp / "work", text, args.timeout)
            manifest.write(out / f"{side.label}.json")
            manifests.append(manifest)
            print(f"{side.label}: {len(commands)} commands in {time.monotonic() - t0:.0f} s, "
                  f"{len(manifest.files)} files written", flush=True)
            if args.keep:
                (tmp / "work").rename(tmp / f"outputs-{side.label}")
            else:
                shutil.rmtree(tmp / "work", ignore_errors=True)
        result = compare(manifests[0], manifests[1], allowed)
        header = [f"before: {sides[0].rev} ({sides[0].commit})",
                  f"after:  {sides[1].rev or 'the working tree'} ({sides[1].commit})"]
        report = header + result.lines + [f"total {time.monotonic() - t_start:.0f} s; manifests in {out}"]
        (out / "report.txt").write_text("\n".join(report) + "\n")
        print("\n".join(report))
        return 0 if result.identical else 1
    finally:
        if args.keep:
            print(f"kept: {tmp} (worktrees and outputs; git worktree remove them when done)", file=sys.stderr)
        else:
            for side in sides:
                remove_side(repo, side)
            shutil.rmtree(tmp, ignore_errors=True)
            git(repo, "worktree", "prune", check=False)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGHUP, terminate)
    args = parse_args(argv)
    try:
        return check(args)
    except CheckError as e:
        print(f"error: dev/check_outputs.sh: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the temporary worktrees are gone already (check's finally)
        print("error: dev/check_outputs.sh: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
