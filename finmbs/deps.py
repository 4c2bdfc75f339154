"""The locked dependency set: which versions finmbs was resolved and tested with, what this environment
has instead, and imports of the integrations that fail with one line naming the package and the fix.

The lock is `requirements/pyX.Y.txt` (shipped in the wheel as `finmbs/_data/requirements`), one pass
over the base install and every extra but vllm (`requirements/compile.sh`). A package that the lock
does not hold but that a locked package names as an optional dependency (transformers' `kernels`)
is reported too: such a package changes what a locked one does at import time.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from types import ModuleType

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from finmbs.errors import FinmbsError
from finmbs.resources import resource_dir

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

# The integrations the product imports at run time: module, the distribution that provides it, and
# what it is for (a failure names all three).
INTEGRATIONS: tuple[tuple[str, str, str], ...] = (
    ("sentence_transformers", "sentence-transformers", "embeddings (transformers underneath)"),
    ("transformers", "transformers", "the tokenizers and models sentence-transformers runs"),
    ("qdrant_edge", "qdrant-edge-py", "the embedded vector index"),
    ("qdrant_client", "qdrant-client", "a Qdrant server by URL"),
    ("pymupdf", "pymupdf", "PDF parsing"),
    ("unstructured.partition.docx", "unstructured", "DOCX and e-mail parsing"),
    ("llama_index.core", "llama-index-core", "chunking"),
    ("llama_cpp", "llama-cpp-python", "the embedded models"),
    ("litellm", "litellm", "hosted and OpenAI-compatible models"),
    ("math_verify", "math-verify", "math answer checking"),
)

# Optional extras: the module that shows the extra is installed.
EXTRAS: dict[str, str] = {
    "static": "model2vec",
    "ray": "ray",
    "vllm": "vllm",
    "test (TRL)": "trl",
    "test (veRL, no dependencies)": "verl",
}


class DependencyError(FinmbsError, RuntimeError):
    """An integration cannot be imported in this environment; the message names the package and the fix."""


def lock_path() -> Path | None:
    """The lock file for this Python, or None when finmbs has none for it."""
    try:
        path = resource_dir("requirements") / f"py{PYTHON}.txt"
    except FileNotFoundError:
        return None
    return path if path.is_file() else None


@cache
def locked() -> dict[str, str]:
    """{canonical distribution name: pinned version} of this Python's lock (empty without one)."""
    path = lock_path()
    if path is None:
        return {}
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        # a pin, then any per-requirement options (llama-cpp-python's --config-settings build flags)
        if match := re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;]+)(?:\s+--\S+)*", line):
            pins[canonicalize_name(match[1])] = match[2]
    return pins


def installed() -> dict[str, str]:
    """{canonical distribution name: version} of this environment."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), dist.version)
    return found


def release(version: str) -> str:
    """A version without its local label (torch 2.13.0+cpu is the lock's 2.13.0)."""
    return version.split("+", 1)[0]


@dataclass(frozen=True)
class Drift:
    """One way this environment differs from the lock."""

    name: str
    installed: str | None
    locked: str | None
    why: str

    def line(self) -> str:
        return f"{self.name} {self.installed or '(missing)'}: {self.why}"


def drift(only: set[str] | None = None) -> list[Drift]:
    """How this environment differs from the lock: a locked package at another version (missing ones
    only when `only` names them), and an unlocked package that a locked one names as optional."""
    pins, have = locked(), installed()
    if not pins:
        return []
    found: list[Drift] = []
    for name, want in sorted(pins.items()):
        if only is not None and name not in only:
            continue
        got = have.get(name)
        if got is None:
            if only is not None:
                found.append(Drift(name, None, want, f"the lock has {want}"))
        elif release(got) != release(want):
            found.append(Drift(name, got, want, f"the lock has {want}"))
    optional = _optional_of_locked()
    for name in sorted(set(have) - set(pins) - {"finmbs", "pip", "setuptools", "wheel"}):
        if name in optional and (only is None or optional[name] & only):
            found.append(
                Drift(
                    name,
                    have[name],
                    None,
                    f"not in the lock; {', '.join(sorted(optional[name]))} imports it when present",
                )
            )
    return found


def _optional_of_locked() -> dict[str, set[str]]:
    """{distribution: the locked distributions that name it as an optional (extra) dependency}."""
    names: dict[str, set[str]] = {}
    for name in locked():
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for spec in requires:
            try:
                req = Requirement(spec)
            except InvalidRequirement:
                continue
            if req.marker is not None and "extra" in str(req.marker):
                names.setdefault(canonicalize_name(req.name), set()).add(name)
    return names


def fix(differs: list[Drift] | None = None) -> str:
    """The commands that restore the locked set (`differs`: this environment's drift, when already known)."""
    path = lock_path()
    if path is None:
        return f"finmbs has no lock for Python {PYTHON}: use Python 3.11 (requirements/py3.11.txt)"
    extra = sorted(d.name for d in (drift() if differs is None else differs) if d.locked is None)
    remove = f"pip uninstall -y {' '.join(extra)} && " if extra else ""
    return f"{remove}pip install -r {_shown(path)} (the locked set), or a fresh virtual environment"


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def integration(module: str) -> ModuleType:
    """Import `module` (one of INTEGRATIONS, or any module a locked package provides); any failure is a
    DependencyError naming the package, its version, how the environment differs from the lock, and
    the fix, instead of a traceback from deep inside the package."""
    try:
        return importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - an import can fail with any error (transformers: ValueError)
        raise DependencyError(import_failure(module, exc)) from exc


def import_failure(module: str, exc: BaseException) -> str:
    """One line: which package failed to import, with which versions, and the fix."""
    dist = next((d for m, d, _ in INTEGRATIONS if module == m or module.startswith(m + ".")), module.split(".")[0])
    have = installed()
    version = have.get(canonicalize_name(dist))
    what = f"{dist} {version}" if version else f"{dist} (not installed)"
    differs = drift()
    detail = "; ".join(d.line() for d in differs[:4]) or "every locked package is at its locked version"
    error = " ".join(str(exc).split())[:200]
    return f"{what} failed to import ({type(exc).__name__}: {error}); {detail}. Fix: {fix(differs)}"
