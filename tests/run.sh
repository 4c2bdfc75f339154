#!/usr/bin/env bash
# The README's test command: install the locked dependency set, check the integrations, run the tests.
#
#   bash tests/run.sh [PYTEST ARGS...]
#
# Run it in a virtual environment (`.ci/run` makes a fresh one). Steps, each only when needed:
#  1. pip installs requirements/pyX.Y.txt (the one resolved set: base, dev, test, ray, static and bench
#     extras; torch 2.13.0, the CPU build where the machine offers one) and finmbs from this checkout,
#     then veRL without its dependencies (requirements/verl.txt: it asks for a transformers the static
#     extra excludes; the reward test loads finmbs.reward through veRL's own loader);
#  2. as root, Debian's chromium + chromium-driver for the report's browser test (else it is skipped);
#  3. the smoke step: `finmbs doctor --smoke` imports every integration, then ingests and searches
#     one shipped agreement; a failure names the package, its version and the fix;
#  4. pytest on a worker per core (at most 4; pytest-xdist), passing on the arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

py="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
lock="requirements/py$py.txt"
if [ ! -f "$lock" ]; then
  echo "error: finmbs is locked and tested for Python 3.11 (requirements/py3.11.txt); $PYTHON is Python $py" >&2
  exit 2
fi

# Prints what differs from the lock (and whether finmbs is imported from this checkout); empty: nothing.
differs() {
  "$PYTHON" - "$lock" requirements/verl.txt "$(pwd -P)" <<'PY'
import re, sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
for path in sys.argv[1:3]:
    for line in Path(path).read_text().splitlines():
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;#]+).*", line.strip())
        if not m:
            continue
        try:
            got = version(m[1])
        except PackageNotFoundError:
            got = None
        if got is None or got.split("+")[0] != m[2].split("+")[0]:
            print(f"{m[1]}: {got or 'missing'} (locked {m[2]})")
try:
    import finmbs
    here = str(Path(finmbs.__file__).resolve().parent.parent)
except Exception:
    here = None
if here != sys.argv[3]:
    print(f"finmbs: not installed from {sys.argv[3]}")
PY
}

if [ -n "$(differs)" ]; then
  "$PYTHON" -m pip install -q -r "$lock" -e .
  "$PYTHON" -m pip install -q --no-deps -r requirements/verl.txt
  if [ -n "$(differs)" ]; then
    echo "error: the environment still differs from $lock after installing it:" >&2
    differs >&2
    exit 2
  fi
fi
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null
  else
    echo "note: chromium/chromedriver missing and not root: the report's browser test will be skipped" >&2
  fi
fi

"$PYTHON" -m finmbs.cli doctor --smoke
PYTHON="$PYTHON" bash "$(dirname "$0")/lint.sh"
# A pytest-xdist worker per core, at most 4 (FINMBS_TEST_WORKERS overrides; 1 runs in this process), each
# pinned to its share of the cores (tests/conftest.py); a module's tests stay on one worker, so its
# module-scoped fixtures (an ingested index, a loaded model) are built once.
workers="${FINMBS_TEST_WORKERS:-$("$PYTHON" -c 'import os; print(max(1, min(4, len(os.sched_getaffinity(0)))))')}"
parallel=()
[ "$workers" -gt 1 ] && parallel=(-n "$workers" --dist loadfile)
exec "$PYTHON" -m pytest -q -p no:cacheprovider "${parallel[@]}" "$@"
