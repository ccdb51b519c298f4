"""dev/check_outputs.sh on a tiny git repository of its own and a command list of two commands (--commands): an
identical pair passes, a changed byte fails naming the file, a timing difference does not count, a text change fails
with its diff unless --allow-text names the command, the working tree is a side, bad input is one error line, and
no temporary worktree is left behind. The real run (the programs of every family, minutes) is not part of make test:
doc/testing.md says how to run it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import REPO, assert_one_error_line, run
from pyllmc.families import NAMES
from test_families import CUDA_FAMILIES

SCRIPT = REPO / "dev" / "check_outputs.sh"

# the program of the fake repository: writes out/model.bin and a log, prints a step line with a timing
WRITER = """#!/usr/bin/env bash
# {comment}
mkdir -p out
printf '{model}' > out/model.bin
echo "s:1 trl:{loss}" > out/main.log
echo "step 1/1 | loss {loss} | {ms} ms | {toks} tok/s | ETA 0:00:0{eta}"
echo "wrote $PWD/out/model.bin" >&2
"""
COMMANDS = "# the fake list\nwrite: bash \"$R/writer.sh\"\ncount: wc -c out/model.bin\n"


def commit_writer(repo: Path, message: str, comment: str = "v1", model: str = "\\x01\\x02\\x03", loss: str = "1.5",
                  ms: str = "12.5", toks: str = "2000", eta: str = "1") -> str:
    (repo / "writer.sh").write_text(WRITER.format(comment=comment, model=model, loss=loss, ms=ms, toks=toks, eta=eta))
    git(repo, "add", "writer.sh")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def git(repo: Path, *args: str) -> str:
    return run(["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", *args]).stdout.strip()


@pytest.fixture()
def fake(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """(repository, command file, revisions by name): a base commit, and one commit per kind of change on top of it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    revs = {"base": commit_writer(repo, "base")}
    revs["comment"] = commit_writer(repo, "a comment only", comment="v2")
    revs["timing"] = commit_writer(repo, "other timings", comment="v2", ms="47.25", toks="531", eta="3")
    revs["byte"] = commit_writer(repo, "one byte changed", comment="v2", model="\\x01\\x02\\x04")
    revs["text"] = commit_writer(repo, "another loss", comment="v2", model="\\x01\\x02\\x03", loss="1.25")
    commands = tmp_path / "commands.txt"
    commands.write_text(COMMANDS)
    return repo, commands, revs


def check(repo: Path, commands: Path, *args: object) -> subprocess.CompletedProcess:
    return run(["bash", SCRIPT, "--repo", repo, "--commands", commands, "--out", repo.parent / "report", *args],
               check=False, timeout=120)


def worktrees(repo: Path) -> list[str]:
    return [line for line in git(repo, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def test_check_outputs_passes_an_identical_pair_and_removes_its_worktrees(fake) -> None:
    repo, commands, revs = fake
    r = check(repo, commands, revs["base"], revs["comment"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK: every written file is byte-identical" in r.stdout
    assert "files: 2 compared, 2 identical, 0 differ" in r.stdout  # out/model.bin, out/main.log
    assert "before  1/2 write" in r.stdout and "after  2/2 count" in r.stdout  # a progress line per command
    assert worktrees(repo) == [f"worktree {repo}"]
    manifest = (repo.parent / "report" / "after.json").read_text()
    assert "<scratch>/out/model.bin" in manifest and "<ms>" in manifest  # paths and timings normalized


def test_check_outputs_fails_on_a_changed_byte_naming_the_file(fake) -> None:
    repo, commands, revs = fake
    r = check(repo, commands, revs["base"], revs["byte"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "file differs: out/model.bin" in r.stdout.splitlines()
    assert "file differs: out/main.log" not in r.stdout
    assert "DIFFERENT" in r.stdout
    assert worktrees(repo) == [f"worktree {repo}"]


def test_check_outputs_does_not_count_a_timing_difference(fake) -> None:
    repo, commands, revs = fake
    r = check(repo, commands, revs["base"], revs["timing"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "text: 2 commands, 2 identical, 0 differ" in r.stdout


def test_check_outputs_shows_a_text_change_as_a_diff_and_allows_it_when_named(fake, tmp_path: Path) -> None:
    repo, commands, revs = fake
    r = check(repo, commands, revs["base"], revs["text"])
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "file differs: out/main.log" in lines and "text differs: write" in lines
    assert "-step 1/1 | loss 1.5 | <ms> | <tok/s> | ETA <eta>" in lines
    assert "+step 1/1 | loss 1.25 | <ms> | <tok/s> | ETA <eta>" in lines
    allowed = tmp_path / "allowed.txt"
    allowed.write_text("write  # the loss line is meant to change\n")
    r = check(repo, commands, revs["base"], revs["text"], "--allow-text", allowed)
    assert r.returncode == 1, r.stdout + r.stderr  # main.log is a file: files may never differ
    assert "text differs: write (allowed: --allow-text)" in r.stdout.splitlines()
    r = check(repo, commands, revs["timing"], revs["comment"], "--allow-text", allowed)
    assert r.returncode == 0, r.stdout + r.stderr


def test_check_outputs_fails_on_a_command_that_fails_on_both_sides(fake, tmp_path: Path) -> None:
    """Identical text, but the command checked nothing: named, and the check fails."""
    repo, _, revs = fake
    commands = tmp_path / "failing.txt"
    commands.write_text(COMMANDS + "missing: cat no-such-file\n")
    r = check(repo, commands, revs["base"], revs["comment"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "command failed: missing (before: exit status 1, after: exit status 1)" in r.stdout.splitlines()
    assert "text: 3 commands, 3 identical, 0 differ" in r.stdout
    assert "before  3/3 missing" in r.stdout and "(exit status 1)" in r.stdout


def test_check_outputs_takes_the_working_tree_with_its_uncommitted_changes(fake) -> None:
    repo, commands, revs = fake
    assert check(repo, commands, revs["text"]).returncode == 0
    (repo / "writer.sh").write_text((repo / "writer.sh").read_text().replace("\\x03", "\\x05"))
    r = check(repo, commands, revs["text"])
    assert r.returncode == 1 and "file differs: out/model.bin" in r.stdout.splitlines(), r.stdout + r.stderr
    assert "+ uncommitted changes" in r.stdout


@pytest.mark.parametrize("args,line", [
    (["no-such-rev"], "error: dev/check_outputs.sh: bad revision 'no-such-rev': not a commit of {repo}"),
    (["HEAD", "HEAD~99"], "error: dev/check_outputs.sh: bad revision 'HEAD~99': not a commit of {repo}"),
    (["HEAD", "--allow-text", "{tmp}/none.txt"],
     "error: dev/check_outputs.sh: --allow-text {tmp}/none.txt: no such file"),
    (["HEAD", "--only", "nothing-matches"], "error: dev/check_outputs.sh: --only nothing-matches: no command matches"),
])
def test_check_outputs_refuses_bad_input_in_one_line(fake, tmp_path: Path, args: list[str], line: str) -> None:
    repo, commands, _ = fake
    r = check(repo, commands, *[a.format(tmp=tmp_path) for a in args])
    assert assert_one_error_line(r, status=2, alone=True) == line.format(repo=repo, tmp=tmp_path)
    assert worktrees(repo) == [f"worktree {repo}"]


def test_check_outputs_says_which_build_failed(fake, tmp_path: Path) -> None:
    repo, _, revs = fake
    commands = tmp_path / "with_make.txt"
    commands.write_text("@make no-such-target\nwrite: bash \"$R/writer.sh\"\n")
    r = check(repo, commands, revs["base"])
    line = assert_one_error_line(r, status=2)
    assert line.startswith(f"error: dev/check_outputs.sh: the build of before ({revs['base']}) failed: make exited 2")
    assert worktrees(repo) == [f"worktree {repo}"]


def test_check_outputs_help_lists_its_options() -> None:
    r = run(["bash", SCRIPT, "--help"])
    assert r.stdout.startswith("usage: dev/check_outputs.sh") and r.stderr == ""
    for option in ["REV_BEFORE", "REV_AFTER", "--allow-text", "--no-cuda-cpu", "--keep", "--commands", "--only"]:
        assert option in r.stdout, option


def test_check_outputs_list_names_every_family_and_the_cpu_target() -> None:
    """The fixed list: every family's reference, trainer (checkpoints, resume, Muon, bf16), test program and generate,
    and the CPU-target trainers; --no-cuda-cpu leaves out only the latter."""
    names = [line.split()[0] for line in run(["bash", SCRIPT, "HEAD", "--list"]).stdout.splitlines()]
    for family in NAMES:
        gpu = [f"train_{family}cu", f"test_{family}cu"] if family in CUDA_FAMILIES else []
        for name in [f"{family}-reference", f"train_{family}", f"train_{family}-resume", f"train_{family}-muon",
                     f"train_{family}-bf16", f"test_{family}", f"test_{family}-bf16", f"generate-{family}", *gpu]:
            assert name in names, name
    without = [line.split()[0] for line in run(["bash", SCRIPT, "HEAD", "--list", "--no-cuda-cpu"]).stdout.splitlines()]
    assert without == [n for n in names if not n.endswith(("cu", "cu-resume", "cu-bf16-muon"))]
