#!/usr/bin/env bash
# dev/check_outputs.sh REV_BEFORE [REV_AFTER]: the programs' everyday commands on two revisions (REV_AFTER default:
# the working tree), every file they write compared byte for byte and their text without timings; exit 0 when
# identical. dev/check_outputs.py does the work (--help); this picks the Python: the checkout's venv, else python3.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=$repo/.venv/bin/python
[ -x "$python" ] || python=$(command -v python3)
exec "$python" "$repo/dev/check_outputs.py" "$@"
