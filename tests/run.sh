#!/usr/bin/env bash
# The README's test command: install what the tests need, then run them.
#
#   bash tests/run.sh [PYTEST ARGS...]
#
# Set-up, each step only when something is missing: the CPU torch wheel (pip would otherwise fetch a
# multi-GB CUDA build), finmbs with the dev, ray and static extras, and Debian's chromium + chromium-driver for
# the report's browser test (apt-get, as root; otherwise that test says it is skipped). Then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

missing() {  # prints the distributions (of the arguments) that are not installed
  "$PYTHON" - "$@" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
for name in sys.argv[1:]:
    try:
        version(name)
    except PackageNotFoundError:
        print(name)
PY
}

if [ -n "$(missing torch)" ]; then
  "$PYTHON" -m pip install -q torch==2.13.0
fi
# finmbs counts as installed only when it is imported from this checkout (editable install or PYTHONPATH).
here="$("$PYTHON" -c 'import finmbs, pathlib; print(pathlib.Path(finmbs.__file__).resolve().parent.parent)' 2>/dev/null || true)"
if [ "$here" != "$(pwd -P)" ] || [ -n "$(missing pytest pytest-asyncio pytest-timeout selenium ray model2vec)" ]; then
  "$PYTHON" -m pip install -q -e ".[dev,ray,static]"
fi
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null
  else
    echo "note: chromium/chromedriver missing and not root: the report's browser test will be skipped" >&2
  fi
fi

exec "$PYTHON" -m pytest -q -p no:cacheprovider "$@"
