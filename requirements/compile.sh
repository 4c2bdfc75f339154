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

# The CPU lock holds no CUDA: uv resolves torch==2.13.0 against PyPI's manylinux wheel, whose metadata asks
# for NVIDIA's CUDA libraries (nvidia-*, cuda-toolkit, cuda-bindings) and triton; the CPU build this lock is
# for (torch-2.13.0+cpu, from the CPU find-links or PyTorch's CPU index) asks for none of them and never
# imports them (2.7 GB of CUDA and 0.7 GB of triton on a machine with no GPU otherwise). Dropped here: those
# packages, then every package only they asked for ("via" names dropped packages alone), until none is left.
# A GPU server gets CUDA through the vllm extra's own lock (requirements/pyX.Y-vllm.txt), which keeps them.
cpu_only() {
  python3 - "$1" <<'PY'
import re, sys
from pathlib import Path
path = Path(sys.argv[1])
lines = path.read_text().splitlines()
name = lambda line: re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)[0].lower()
via = lambda line: {v.strip().split(" ")[0].lower() for v in line.split("# via", 1)[1].split(",")} if "# via" in line else set()
cuda = re.compile(r"^(nvidia-|cuda-|triton$)")
dropped = {name(l) for l in lines if l.strip() and cuda.match(name(l))}
while True:  # then what only dropped packages asked for
    more = {name(l) for l in lines if l.strip() and name(l) not in dropped and via(l) and via(l) <= dropped}
    if not more:
        break
    dropped |= more
kept = [l for l in lines if not l.strip() or name(l) not in dropped]
# the "via" notes no longer name what was dropped
kept = [re.sub(r"# via (.*)", lambda m: "# via " + ", ".join(v.strip() for v in m[1].split(",") if v.strip().split(" ")[0].lower() not in dropped), l) for l in kept]
path.write_text("\n".join(kept) + "\n")
print(f"{path}: dropped (CUDA build of torch only): {', '.join(sorted(dropped))}", file=sys.stderr)
PY
}

# llama-cpp-python has no wheel on PyPI: pip builds it from its sdist (CMake, scikit-build-core). Per-requirement
# --config-settings (pip >= 23.1) build only the libraries finmbs loads (libllama, libggml*): LLAVA_BUILD=OFF
# skips libmtmd (multimodal: llama_cpp loads it only for a vision chat handler, finmbs never asks for one);
# the tests, tools, examples and server are off too (llama.cpp's defaults as a subproject, stated so that a
# newer llama-cpp-python cannot turn them on). GGML_NATIVE stays on: the CPU kernels for this machine's CPU.
llama_flags() {
  local flags=""
  for define in LLAVA_BUILD=OFF LLAMA_BUILD_TESTS=OFF LLAMA_BUILD_TOOLS=OFF LLAMA_BUILD_EXAMPLES=OFF LLAMA_BUILD_SERVER=OFF; do
    flags+=" --config-settings=cmake.define.$define"
  done
  sed -i -E "s/^(llama-cpp-python==[^ ]+)( +)#/\1$flags  #/" "$1"
}
for py in 3.11; do
  # uv reads the existing lock as its preferences (so nothing moves that need not) and cannot parse
  # per-requirement options: the build flags come off first and go back on below
  [ -f "requirements/py$py.txt" ] && sed -i -E 's/ +--config-settings=[^ ]+//g' "requirements/py$py.txt"
  uv pip compile pyproject.toml --extra dev --extra test --extra ray --extra static --extra bench \
    --python-version "$py" --python-platform x86_64-manylinux_2_28 --constraint requirements/torch.txt \
    ${FIND_LINKS:+--find-links "$FIND_LINKS"} --no-header --annotation-style line -q -o "requirements/py$py.txt"
  # the CPU build's local label (+cpu) is not on PyPI: pin the release and let pip pick the build
  sed -i -E 's/^torch==([0-9.]+)\+cpu/torch==\1/' "requirements/py$py.txt"
  cpu_only "requirements/py$py.txt"
  llama_flags "requirements/py$py.txt"
  # a GPU server with vLLM: the base install and the vllm extra, with vLLM's own torch and transformers
  uv pip compile pyproject.toml --extra vllm --python-version "$py" --python-platform x86_64-manylinux_2_28 \
    --no-header --annotation-style line -q -o "requirements/py$py-vllm.txt"
done
