#!/usr/bin/env bash
# Re-resolves the locked dependency sets (run after changing pyproject.toml's dependencies; commit the result).
#
#   bash requirements/compile.sh
#
# One pass resolves the base install and every extra together (dev, test, ray, static, bench) per Python
# that pyproject's requires-python claims, so no extra installed later can move a package the others need.
# torch is held at 2.13.0: pip then takes the CPU build where the machine offers one (a find-links
# folder), else PyPI's. The vllm extra asks for its own torch and transformers (it cannot share an
# environment with model2vec[distill]) and gets a lock of its own, for a GPU server.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v uv >/dev/null || python3 -m pip install -q uv
for py in 3.11; do
  uv pip compile pyproject.toml --extra dev --extra test --extra ray --extra static --extra bench \
    --python-version "$py" --python-platform x86_64-manylinux_2_28 --constraint requirements/torch.txt \
    ${FIND_LINKS:+--find-links "$FIND_LINKS"} --no-header --annotation-style line -q -o "requirements/py$py.txt"
  # the CPU build's local label (+cpu) is not on PyPI: pin the release and let pip pick the build
  sed -i -E 's/^torch==([0-9.]+)\+cpu/torch==\1/' "requirements/py$py.txt"
  # a GPU server with vLLM: the base install and the vllm extra, with vLLM's own torch and transformers
  uv pip compile pyproject.toml --extra vllm --python-version "$py" --python-platform x86_64-manylinux_2_28 \
    --no-header --annotation-style line -q -o "requirements/py$py-vllm.txt"
done
