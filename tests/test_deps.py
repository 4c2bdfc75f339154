"""The locked dependency set: `finmbs doctor` names what differs from the lock, and an integration that
fails to import is one line naming the package and the fix (the fresh-machine failure of a transformers
that a leftover `kernels` breaks), not a traceback. Each case runs the real CLI in a subprocess with a
folder of stand-in distributions first on its path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from finmbs import deps

ROOT = Path(__file__).resolve().parent.parent


def fake_dist(folder: Path, name: str, version: str, module: str | None = None, body: str = "") -> None:
    """A stand-in installed distribution (its dist-info) and, optionally, a module it provides."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("")
    if module:
        package = folder / module
        package.mkdir()
        (package / "__init__.py").write_text(body)


def finmbs(args: list[str], overlay: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(overlay), str(ROOT)]), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "finmbs.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_lock_pins_every_package_once_and_holds_torch_at_the_cpu_release():
    pins = deps.locked()
    assert deps.lock_path() == ROOT / "requirements" / f"py{deps.PYTHON}.txt"
    assert pins["torch"] == "2.13.0"  # no +cpu: pip takes the CPU build where the machine offers one
    for name in ("transformers", "sentence-transformers", "model2vec", "llama-cpp-python", "trl", "pytest"):
        assert name in pins, name
    assert "kernels" not in pins  # transformers 5.3 (model2vec[distill] caps it) cannot import with kernels 0.19


def test_the_cpu_lock_holds_no_cuda_and_builds_llama_cpp_lean():
    """Issue 63: the CPU build of torch needs none of the CUDA wheels PyPI's torch asks for (compile.sh drops
    them); llama-cpp-python's line builds only the libraries finmbs loads (per-requirement build flags)."""
    pins = deps.locked()
    assert not [name for name in pins if name.startswith(("nvidia-", "cuda-")) or name == "triton"]
    line = next(x for x in deps.lock_path().read_text().splitlines() if x.startswith("llama-cpp-python=="))
    assert "--config-settings=cmake.define.LLAVA_BUILD=OFF" in line
    vllm = (ROOT / "requirements" / f"py{deps.PYTHON}-vllm.txt").read_text()
    assert "nvidia-" in vllm and "triton==" in vllm  # a GPU server's lock keeps CUDA


@pytest.mark.skipif(not deps.locked(), reason=f"no lock for Python {deps.PYTHON}")
def test_doctor_names_a_leftover_optional_package_and_a_version_off_the_lock(tmp_path):
    overlay = tmp_path / "overlay"
    fake_dist(overlay, "kernels", "0.19.1")  # transformers names it as an optional dependency
    fake_dist(overlay, "numpy", "1.0.0")
    result = finmbs(["doctor"], overlay, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "kernels 0.19.1: not in the lock; transformers imports it when present" in out
    assert f"numpy 1.0.0: the lock has {deps.locked()['numpy']}" in out
    assert "fix: pip uninstall -y kernels" in out
    assert "embedded models" in out and "optional extras" in out


def test_an_integration_that_fails_to_import_is_one_line_naming_package_and_fix(tmp_path):
    overlay = tmp_path / "overlay"
    fake_dist(
        overlay,
        "sentence-transformers",
        "6.3.0",
        "sentence_transformers",
        'raise ValueError("Either a revision or a version must be specified.")\n',
    )
    doc = ROOT / "corpora" / "finance" / "docs" / "brown_forman_2023_credit_agreement.txt"
    result = finmbs(["ingest", str(doc), "--index-path", str(tmp_path / "index"), "--json"], overlay, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1, result.stderr
    assert (
        "sentence-transformers 6.3.0 failed to import (ValueError: Either a revision or a version must be specified.)"
        in error[0]
    )
    assert "Fix:" in error[0] and "pip install -r" in error[0]


def test_every_dependency_pyproject_names_is_in_the_lock():
    """A dependency added to pyproject.toml without re-running requirements/compile.sh would install in a
    developer's environment and be missing from every fresh one (CI, a user's): the lock must pin it."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra, requirements in project["optional-dependencies"].items():
        if extra != "vllm":  # its own lock (requirements/pyX.Y-vllm.txt)
            wanted += requirements
    pins = deps.locked()
    missing = [spec for spec in wanted if canonicalize_name(Requirement(spec).name) not in pins]
    assert not missing, f"not in {deps.lock_path()}: {missing}; run bash requirements/compile.sh"
