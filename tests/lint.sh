#!/usr/bin/env bash
# Lint and format check (ruff, configured in pyproject.toml): import order, pyflakes, pycodestyle,
# bugbear, lines of at most 120 characters, and the formatter's layout. Changes nothing.
#
#   bash tests/lint.sh            check
#   ruff format finmbs tests bench && ruff check --fix finmbs tests bench     apply (then review the diff)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m ruff check --no-cache finmbs tests bench
"$PYTHON" -m ruff format --no-cache --check finmbs tests bench
