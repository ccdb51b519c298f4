#!/usr/bin/env bash
# The system packages `make test` and `make train` need beyond gcc, make and Python, installed in one step.
#
#   dev/system_packages.sh            probe; install what is missing with one apt-get update + one apt-get install
#   dev/system_packages.sh --list     print the packages this step can install, one line, and change nothing
#   dev/system_packages.sh --help
#
# Two groups, each with a probe that says whether the machine already has it:
#   fuzz    clang and its libFuzzer runtime (clang libclang-rt-dev): the libFuzzer harnesses, tests/test_fuzz.py
#   opencl  OpenCL headers, ICD loader, PoCL, CLBlast: train_gpt2cl / test_gpt2cl, tests/test_opencl.py
# `make train` needs none of them (its CPU trainer needs gcc alone); `make test` runs this step once, alone, before
# anything that builds with them.
#
# Root (or a password-less sudo): everything missing is installed, and a failure is an error (exit 1): with root
# nothing is skipped. Without either, one line names the packages to install and the tests that will be skipped,
# and the step succeeds. The outcome goes to $SYSPKG_STATUS (default build/system-packages.missing): one line
# "<group>: <why>" per group that is still missing; empty when nothing is. make (test-build) and the tests read it.
# A package database locked by another program is waited for (SYSPKG_LOCK_TIMEOUT seconds, default 600), not
# an error: apt-get install waits by itself (DPkg::Lock::Timeout), apt-get update does not, so both are retried.
#
# Environment: CC (the C compiler of the probes, default cc), FUZZ_CC (default clang), OCL_ICD_VENDORS (where the
# ICD loader looks for OpenCL drivers, default /etc/OpenCL/vendors), SYSPKG_STATUS, SYSPKG_LOCK_TIMEOUT.
set -uo pipefail

FUZZ_PKGS="clang libclang-rt-dev"
OPENCL_PKGS="ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd libclblast-dev"
FUZZ_WHY="the libFuzzer harnesses (tests/test_fuzz.py)"
OPENCL_WHY="the OpenCL trainer (tests/test_opencl.py)"
CC=${CC:-cc}
FUZZ_CC=${FUZZ_CC:-clang}
STATUS=${SYSPKG_STATUS:-build/system-packages.missing}
LOCK_TIMEOUT=${SYSPKG_LOCK_TIMEOUT:-600}

case "${1:-}" in
  --list) echo "$FUZZ_PKGS $OPENCL_PKGS"; exit 0 ;;
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "error: dev/system_packages.sh: unknown argument '$1' (--list, --help)" >&2; exit 2 ;;
esac

probe_fuzz() {
  printf 'int LLVMFuzzerTestOneInput(const char* d, unsigned long n) { return 0; }\n' |
    "$FUZZ_CC" -fsanitize=fuzzer,address,undefined -x c - -o /dev/null >/dev/null 2>&1
}

probe_opencl() {
  printf '#include <CL/cl.h>\n#include <clblast_c.h>\nint main(void) { cl_uint n = 0; return (int)clGetPlatformIDs(0, 0, &n); }\n' |
    "$CC" -x c - -lclblast -lOpenCL -o /dev/null >/dev/null 2>&1 &&
    compgen -G "${OCL_ICD_VENDORS:-/etc/OpenCL/vendors}/*.icd" >/dev/null
}

# the groups whose probe fails, and their packages
missing_groups() {
  probe_fuzz || echo fuzz
  probe_opencl || echo opencl
}
packages_of() { local g; for g in "$@"; do case $g in fuzz) echo -n "$FUZZ_PKGS ";; opencl) echo -n "$OPENCL_PKGS ";; esac; done; }
why_of() { local g out=(); for g in "$@"; do case $g in fuzz) out+=("$FUZZ_WHY");; opencl) out+=("$OPENCL_WHY");; esac; done
           local IFS=';'; echo "${out[*]}" | sed 's/;/ and /g'; }

write_status() {  # write_status <why> <group>...: one line per group, or an empty file
  local why=$1 g; shift
  local tmp
  mkdir -p "$(dirname "$STATUS")"
  tmp=$(mktemp "$STATUS.XXXXXX")
  for g in "$@"; do echo "$g: $why" >> "$tmp"; done
  mv "$tmp" "$STATUS"
}

# apt-get with its output kept; a lock held by another program is retried until LOCK_TIMEOUT has passed
apt_log=$(mktemp)
trap 'rm -f "$apt_log"' EXIT
apt_run() {
  local start=$SECONDS said=0
  while true; do
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$LOCK_TIMEOUT" -qq "$@" > "$apt_log" 2>&1 && return 0
    if grep -q 'Could not get lock\|Unable to lock' "$apt_log" && (( SECONDS - start < LOCK_TIMEOUT )); then
      if (( !said )); then
        echo "system packages: the package database is locked by another program; waiting up to ${LOCK_TIMEOUT} s ($(grep -m1 'Could not get lock' "$apt_log" | sed 's/^E: //'))"
        said=1
      fi
      sleep 1
      continue
    fi
    return 1
  done
}

read -r -a groups <<< "$(missing_groups | tr '\n' ' ')"
if (( ${#groups[@]} == 0 )); then
  write_status ""
  exit 0
fi
pkgs=$(packages_of "${groups[@]}")
pkgs=${pkgs% }
why=$(why_of "${groups[@]}")

if [ "$(id -u)" = 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
  SUDO="sudo -n"
else
  SUDO=none
fi
if [ "$SUDO" = none ] || ! command -v apt-get >/dev/null 2>&1; then
  how=$([ "$SUDO" = none ] && echo "not root and no password-less sudo" || echo "no apt-get on this machine")
  echo "system packages: cannot install $pkgs ($how): install them (Debian/Ubuntu: sudo apt-get install $pkgs); until then make test skips $why"
  write_status "$how; install $pkgs" "${groups[@]}"
  exit 0
fi

# libclang-rt-dev (the runtime of the default clang) exists from Debian 12 and Ubuntu 23.04; before that the
# runtime is named after clang's major version
if [[ " $pkgs " == *" libclang-rt-dev "* ]] && ! apt-cache show libclang-rt-dev >/dev/null 2>&1; then
  clang_major=$(apt-cache depends clang 2>/dev/null | grep -o -m1 'clang-[0-9][0-9]*' | cut -d- -f2)
  pkgs=${pkgs/libclang-rt-dev/libclang-rt-${clang_major:-14}-dev}
fi

echo "system packages: installing $pkgs with apt-get, for $why"
fail() {
  local detail
  detail=$(grep -m1 '^E:' "$apt_log" | sed 's/^E: //')
  echo "error: system packages: $1 (${detail:-$(tail -n1 "$apt_log")}); install by hand: apt-get install $pkgs"
  write_status "$1" "${groups[@]}"
  exit 1
}
apt_run update || fail "apt-get update failed"
# shellcheck disable=SC2086 # one word per package
apt_run install -y $pkgs || fail "apt-get install failed"

read -r -a still <<< "$(missing_groups | tr '\n' ' ')"
if (( ${#still[@]} > 0 )); then
  echo "error: system packages: installed $pkgs, yet $(why_of "${still[@]}") still cannot be built"
  write_status "installed, but the probe still fails" "${still[@]}"
  exit 1
fi
write_status ""
