"""dev/system_packages.sh, the one apt-get step of `make test`, on stand-ins: no root and no sudo, a password-less
sudo, a package database locked by another program that frees after a while, an apt-get that fails, a distribution
without the libclang-rt-dev package.

The stand-ins live in a bin/ directory put first on PATH: `id` (the uid in FAKE_UID), `sudo` (works without a
password when FAKE_SUDO=1), `apt-get` and `apt-cache` (each call logged; the database "locked" while the file
FAKE_LOCK exists; "installing" creates the files the probes look for), `clang` and `cc` (the probes' compilers:
they succeed once their group is installed). Nothing on the real machine is touched.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO

SCRIPT = REPO / "dev" / "system_packages.sh"
FUZZ = ["clang", "libclang-rt-dev"]
OPENCL = ["ocl-icd-opencl-dev", "opencl-c-headers", "pocl-opencl-icd", "libclblast-dev"]
LOCK_LINE = "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)"

STANDINS = {
    "id": 'echo "${FAKE_UID:-0}"\n',
    "sudo": '''echo "sudo $*" >> "$FAKE/calls"
[ "${FAKE_SUDO:-0}" = 1 ] || { echo "sudo: a password is required" >&2; exit 1; }
[ "$1" = -n ] && shift
exec "$@"
''',
    "apt-get": '''echo "apt-get $*" >> "$FAKE/calls"
if [ -e "$FAKE_LOCK" ]; then echo "$LOCK_LINE" >&2; echo "E: Unable to lock directory /var/lib/apt/lists/" >&2; exit 100; fi
case " $* " in
  *" update "*) [ "${FAKE_APT_FAIL:-}" = update ] && { echo "E: The repository is not signed." >&2; exit 100; }; exit 0 ;;
  *" install "*)
    [ "${FAKE_APT_FAIL:-}" = install ] && { echo "E: Unable to locate package clang" >&2; exit 100; }
    [ "${FAKE_APT_NOOP:-0}" = 1 ] && exit 0
    case " $* " in *" clang "*) touch "$FAKE/fuzz-installed";; esac
    case " $* " in *" pocl-opencl-icd "*) touch "$FAKE/opencl-installed" "$FAKE/vendors/pocl.icd";; esac
    exit 0 ;;
esac
exit 1
''',
    "apt-cache": '''echo "apt-cache $*" >> "$FAKE/calls"
case "$1 $2" in
  "show libclang-rt-dev") [ "${FAKE_NO_RT_META:-0}" = 1 ] && exit 100; exit 0 ;;
  "depends clang") printf 'clang\\n  Depends: clang-16\\n' ;;
esac
''',
    "clang": 'cat > /dev/null; [ -e "$FAKE/fuzz-installed" ]\n',
    "fake-cc": 'cat > /dev/null; [ -e "$FAKE/opencl-installed" ]\n',
}


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "vendors").mkdir()
    (tmp_path / "calls").touch()
    for name, body in STANDINS.items():
        path = bin_dir / name
        path.write_text("#!/bin/bash\n" + body)
        path.chmod(0o755)
    return tmp_path


def run_step(fake: Path, *args: str, installed: tuple[str, ...] = (), timeout: float = 60,
             **env: str) -> subprocess.CompletedProcess:
    for group in installed:
        (fake / f"{group}-installed").touch()
        if group == "opencl":
            (fake / "vendors" / "pocl.icd").touch()
    full_env = {"PATH": f"{fake / 'bin'}:/usr/bin:/bin", "FAKE": str(fake), "FAKE_LOCK": str(fake / "lock"),
                "LOCK_LINE": LOCK_LINE, "CC": "fake-cc", "FUZZ_CC": "clang",
                "OCL_ICD_VENDORS": str(fake / "vendors"), "SYSPKG_STATUS": str(fake / "status"), **env}
    return subprocess.run(["bash", SCRIPT, *args], env=full_env, capture_output=True, text=True, timeout=timeout)


def calls(fake: Path, prefix: str = "apt-get") -> list[str]:
    return [c for c in (fake / "calls").read_text().splitlines() if c.startswith(prefix)]


def installs(fake: Path) -> list[list[str]]:
    """The package lists of the apt-get install calls."""
    return [c.split(" install -y ", 1)[1].split() for c in calls(fake) if " install " in c]


def status(fake: Path) -> dict[str, str]:
    lines = (fake / "status").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines)


def test_a_machine_with_every_package_runs_no_apt_get_and_prints_nothing(fake: Path) -> None:
    proc = run_step(fake, installed=("fuzz", "opencl"))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert calls(fake, "") == [] and status(fake) == {}


def test_root_installs_everything_missing_with_one_update_and_one_install(fake: Path) -> None:
    proc = run_step(fake)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "system packages: installing clang libclang-rt-dev ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd "
        "libclblast-dev with apt-get, for the libFuzzer harnesses (tests/test_fuzz.py) and the OpenCL trainer "
        "(tests/test_opencl.py)"]
    apt = calls(fake)
    assert [c for c in apt if " update" in c] == ["apt-get -o DPkg::Lock::Timeout=600 -qq update"]
    assert installs(fake) == [FUZZ + OPENCL] and len(apt) == 2
    assert status(fake) == {}


def test_only_the_missing_group_is_installed(fake: Path) -> None:
    proc = run_step(fake, installed=("fuzz",))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert installs(fake) == [OPENCL]
    assert "for the OpenCL trainer (tests/test_opencl.py)" in proc.stdout and "libFuzzer" not in proc.stdout


def test_without_root_or_sudo_one_line_names_the_packages_and_the_skipped_tests(fake: Path) -> None:
    proc = run_step(fake, FAKE_UID="1000", FAKE_SUDO="0")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.splitlines() == [
        "system packages: cannot install clang libclang-rt-dev ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd "
        "libclblast-dev (not root and no password-less sudo): install them (Debian/Ubuntu: sudo apt-get install "
        "clang libclang-rt-dev ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd libclblast-dev); until then "
        "make test skips the libFuzzer harnesses (tests/test_fuzz.py) and the OpenCL trainer (tests/test_opencl.py)"]
    assert calls(fake) == [] and calls(fake, "sudo") == ["sudo -n true"]
    why = "not root and no password-less sudo; install " + " ".join(FUZZ + OPENCL)
    assert status(fake) == {"fuzz": why, "opencl": why}


def test_a_password_less_sudo_installs_as_root_would(fake: Path) -> None:
    proc = run_step(fake, FAKE_UID="1000", FAKE_SUDO="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls(fake, "sudo") == [
        "sudo -n true",
        "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -qq update",
        "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -qq install -y "
        + " ".join(FUZZ + OPENCL)]
    assert status(fake) == {}


def test_a_locked_database_is_waited_for_until_the_other_program_frees_it(fake: Path) -> None:
    lock = fake / "lock"
    lock.touch()
    threading.Timer(2.0, lock.unlink).start()
    start = time.monotonic()
    proc = run_step(fake)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert elapsed >= 2.0
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("system packages: installing clang ")
    assert lines[1:] == ["system packages: the package database is locked by another program; waiting up to 600 s "
                         "(Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get))"]
    apt = calls(fake)
    assert len(apt) >= 3 and all(c.endswith(" update") for c in apt[:-1])  # tried again while locked
    assert installs(fake) == [FUZZ + OPENCL] and status(fake) == {}


def test_a_lock_that_is_never_freed_fails_after_the_timeout_in_one_line(fake: Path) -> None:
    (fake / "lock").touch()
    proc = run_step(fake, SYSPKG_LOCK_TIMEOUT="2")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == (
        "error: system packages: apt-get update failed (Could not get lock /var/lib/dpkg/lock-frontend. It is held "
        "by process 4242 (apt-get)); install by hand: apt-get install " + " ".join(FUZZ + OPENCL))
    assert installs(fake) == []


@pytest.mark.parametrize("step, message", [("update", "apt-get update failed (The repository is not signed.)"),
                                           ("install", "apt-get install failed (Unable to locate package clang)")])
def test_a_failing_apt_get_is_one_error_line_and_a_failure_not_a_skip(fake: Path, step: str, message: str) -> None:
    proc = run_step(fake, FAKE_APT_FAIL=step)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[1:] == [
        f"error: system packages: {message}; install by hand: apt-get install " + " ".join(FUZZ + OPENCL)]
    assert len(calls(fake)) == (1 if step == "update" else 2)  # nothing tried twice
    assert set(status(fake)) == {"fuzz", "opencl"}


def test_an_install_that_leaves_the_probe_failing_is_an_error(fake: Path) -> None:
    proc = run_step(fake, installed=("opencl",), FAKE_APT_NOOP="1")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == ("error: system packages: installed clang libclang-rt-dev, yet the "
                                            "libFuzzer harnesses (tests/test_fuzz.py) still cannot be built")
    assert set(status(fake)) == {"fuzz"}


def test_a_distribution_without_libclang_rt_dev_gets_the_runtime_of_its_clang(fake: Path) -> None:
    proc = run_step(fake, installed=("opencl",), FAKE_NO_RT_META="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert installs(fake) == [["clang", "libclang-rt-16-dev"]]


def test_list_and_bad_arguments(fake: Path) -> None:
    proc = run_step(fake, "--list")
    assert (proc.returncode, proc.stdout.split()) == (0, FUZZ + OPENCL) and calls(fake, "") == []
    proc = run_step(fake, "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["error: dev/system_packages.sh: unknown argument '--bogus' (--list, --help)"]


def make_value(variable: str, status_file: Path) -> list[str]:
    """A make variable's value, with the system-packages status read from status_file."""
    proc = subprocess.run(["make", "--no-print-directory", "-s", f"SYSPKG_STATUS={status_file}",
                           f"--eval=print-var: ; @echo $({variable})", "print-var"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, env={**os.environ, "MAKEFLAGS": ""})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_test_build_leaves_out_the_programs_of_a_missing_group(tmp_path: Path) -> None:
    status_file = tmp_path / "status"
    status_file.write_text("")
    full = make_value("TEST_BUILD", status_file)
    assert {"train_gpt2cl", "test_gpt2cl", "dev/fuzz/fuzz_shard"} <= set(full)
    status_file.write_text("fuzz: not root and no password-less sudo; install clang libclang-rt-dev\n")
    without_fuzz = make_value("TEST_BUILD", status_file)
    assert [p for p in full if not p.startswith("dev/fuzz/")] == without_fuzz
    status_file.write_text("opencl: not root\nfuzz: not root\n")
    assert [p for p in without_fuzz if p not in ("train_gpt2cl", "test_gpt2cl")] == make_value("TEST_BUILD",
                                                                                                 status_file)


@pytest.mark.parametrize("args, line", [
    (["--bogus"], "error: dev/test_fresh.sh: unknown argument '--bogus' (--keep-packages, --dir DIR, --log FILE, --help)"),
    (["--dir", str(REPO / "sub")], f"error: dev/test_fresh.sh: --dir {REPO / 'sub'} is this checkout or inside it"),
    (["--dir", str(REPO)], f"error: dev/test_fresh.sh: --dir {REPO} is this checkout or inside it"),
])
def test_test_fresh_refuses_bad_arguments_before_touching_anything(args: list[str], line: str) -> None:
    proc = subprocess.run(["bash", REPO / "dev" / "test_fresh.sh", *args], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr.splitlines()) == (2, "", [line])


def test_test_fresh_without_root_or_sudo_refuses_to_remove_packages(fake: Path) -> None:
    env = {"PATH": f"{fake / 'bin'}:/usr/bin:/bin", "FAKE": str(fake), "FAKE_UID": "1000", "FAKE_SUDO": "0"}
    proc = subprocess.run(["bash", REPO / "dev" / "test_fresh.sh", "--dir", fake / "clone"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == ["error: dev/test_fresh.sh: removing the system packages needs root or a "
                                        "password-less sudo (--keep-packages keeps them)"]
    assert not (fake / "clone").exists() and calls(fake) == []
