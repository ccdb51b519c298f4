#!/usr/bin/env bash
# `make test` as a machine that has never seen the project runs it: the system packages `make test` installs are
# removed first, then a fresh clone of this repository's HEAD runs CI's entry point (`CI=true bash .ci/run`) with an
# empty HOME and TMPDIR, so no pip cache, ~/.cache, /tmp file or build output of an earlier run can help it.
#
#   dev/test_fresh.sh [--keep-packages] [--dir DIR] [--log FILE]
#
#   --keep-packages  leave the system packages installed (the second run of the issue: the same tests must pass
#                    and count the same with the packages already present)
#   --dir DIR        where to clone (default: ../llmc-fresh beside this checkout, so that ../shared, CI's offline
#                    caches, is found as CI finds it); removed first
#   --log FILE       the run's whole output (default: DIR.log)
#
# Removing packages needs root (or a password-less sudo): apt-get purge of the packages that
# dev/system_packages.sh --list names and are installed, then apt-get autoremove --purge (what they pulled in).
# Commit first: the clone holds HEAD, not the working tree. Prints, last: the seconds the run took, its exit status
# and pytest's summary line (the test counts to compare between runs).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir="$(dirname "$repo")/llmc-fresh"
log=""
keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --keep-packages) keep=1 ;;
    --dir) dir=${2:?--dir needs a directory}; shift ;;
    --log) log=${2:?--log needs a file}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: dev/test_fresh.sh: unknown argument '$1' (--keep-packages, --dir DIR, --log FILE, --help)" >&2; exit 2 ;;
  esac
  shift
done
log=${log:-$dir.log}
case $(cd "$(dirname "$dir")" 2>/dev/null && pwd)/$(basename "$dir") in
  "$repo"|"$repo"/*|/) echo "error: dev/test_fresh.sh: --dir $dir is this checkout or inside it" >&2; exit 2 ;;
esac

if [ "$(id -u)" = 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO=none; fi
if [ "$keep" = 0 ]; then
  [ "$SUDO" != none ] || { echo "error: dev/test_fresh.sh: removing the system packages needs root or a password-less sudo (--keep-packages keeps them)" >&2; exit 1; }
  installed=()
  for p in $("$repo/dev/system_packages.sh" --list); do
    dpkg -s "$p" >/dev/null 2>&1 && installed+=("$p")
  done
  echo "test-fresh: removing ${installed[*]:-nothing (none of $("$repo/dev/system_packages.sh" --list) is installed)}"
  if [ ${#installed[@]} -gt 0 ]; then
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -qq purge -y "${installed[@]}" >/dev/null
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -qq autoremove --purge -y >/dev/null
fi
[ -z "$(git -C "$repo" status --porcelain --untracked-files=no)" ] ||
  echo "test-fresh: warning: uncommitted changes in $repo are not in the clone (it holds HEAD $(git -C "$repo" rev-parse --short HEAD))"

rm -rf "$dir"
git clone -q --no-hardlinks "$repo" "$dir"
home=$(mktemp -d /tmp/llmc-fresh-home.XXXXXX)
tmp=$(mktemp -d /tmp/llmc-fresh-tmp.XXXXXX)
echo "test-fresh: $(git -C "$dir" log -1 --format='%h %s' | cut -c1-80) in $dir, HOME=$home, log $log"
start=$SECONDS
set +e
(cd "$dir" && env -u TIKTOKEN_CACHE_DIR -u HF_HOME -u HF_DATASETS_CACHE -u XDG_CACHE_HOME -u VIRTUAL_ENV -u MAKEFLAGS \
   -u MAKELEVEL -u PYTHONPYCACHEPREFIX HOME="$home" TMPDIR="$tmp" CI=true bash .ci/run) > "$log" 2>&1
rc=$?
set -e
seconds=$((SECONDS - start))
rm -rf "$home" "$tmp"
summary=$(grep -E '^=*[ ]*[0-9]+ (passed|failed)' "$log" | tail -1 || true)
echo "test-fresh: CI=true bash .ci/run exited $rc after $seconds s; pytest: ${summary:-no summary (see $log)}"
exit $rc
