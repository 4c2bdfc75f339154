"""Shared fixtures: the scripted OpenAI-compatible server, endpoints on it, the shared data folder."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from finmbs.config import Endpoint, IndexSettings
from finmbs.testing.server import ScriptedOpenAIServer

ROOT = Path(__file__).resolve().parents[1]


ALL_CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def _own_share_of_the_cores() -> None:
    """Under pytest-xdist (tests/run.sh runs the suite on a worker per core), each worker keeps its own
    share of the cores: the embedded models and torch size their threads by the cores a process may use
    (`embedded.available_cores`), and workers each spinning threads on every core slow one another down.
    Set before any test imports torch or loads a model; threads and subprocesses inherit it. A worker's
    environment also comes with COLUMNS=80, which a console made at import (the CLI's) would keep as its
    width whatever width a test asks for: dropped."""
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if count < 2 or not worker.startswith("gw"):
        return
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)
    if ALL_CORES and len(ALL_CORES) >= count:
        os.sched_setaffinity(0, ALL_CORES[int(worker[2:]) % count :: count])


_own_share_of_the_cores()


@pytest.fixture
def every_core():
    """The test runs on every core the suite was given, where a pytest-xdist worker keeps to its share
    (`_own_share_of_the_cores`); its own share again afterwards."""
    if not ALL_CORES:
        yield
        return
    own = os.sched_getaffinity(0)
    os.sched_setaffinity(0, ALL_CORES)
    try:
        yield
    finally:
        os.sched_setaffinity(0, own)


SHARED_DATA = Path(os.environ.get("FINMBS_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def agreements_built(tmp_path_factory) -> Path:
    """The test agreements (`finance_world.AGREEMENTS`, cut from the shared data) ingested once a session;
    each module that needs them takes its own copy (`agreements_copy`), so none sees another's writes."""
    from finmbs.testing.finance_world import agreements_index  # the ingest stack, loaded only when needed

    if not (SHARED_DATA / "credit_agreements" / "docs").is_dir():
        pytest.skip(f"shared agreements not found under {SHARED_DATA}")
    base = tmp_path_factory.mktemp("agreements")
    agreements_index(base, SHARED_DATA)
    return base


def agreements_copy(built: Path, where: Path) -> IndexSettings:
    """A copy of the session's agreements index (`agreements_built`) under `where`: its settings."""
    shutil.copytree(built, where, dirs_exist_ok=True)
    return IndexSettings(path=str(where / "index"))


@pytest.fixture
def openai_server():
    with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture
def make_endpoint(openai_server):
    def make(name: str = "scripted", **kwargs) -> Endpoint:
        fields = dict(
            name=name,
            model=f"openai/{name}",
            api_base=openai_server.base_url,
            max_concurrency=8,
            temperature=1.0,
            max_tokens=64,
            timeout_s=5.0,
            max_retries=3,
        )
        fields.update(kwargs)
        return Endpoint(**fields)

    return make


# What a test run may leave in the checkout: Python's and pytest's own caches. Anything else (a `.finmbs/`
# response cache or index from a config default relative to the working folder, a `runs/` folder, eval
# results) is a test writing into the checkout instead of its tmp_path, and fails the run.
ALLOWED_LEFTOVERS = ("__pycache__/", ".pytest_cache/", ".egg-info/")
_BEFORE = pytest.StashKey[tuple]()  # (leftovers, top-level entries) when the session started
_FIRST = pytest.StashKey[dict]()  # new top-level entry -> the first test after which it was there


def checkout_leftovers() -> set[str] | None:
    """Untracked and ignored paths of the checkout as `git status` lists them; None outside a git checkout."""
    try:
        listed = subprocess.run(
            ["git", "status", "--porcelain", "--ignored", "--untracked-files=normal"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    paths = {line[3:] for line in listed.stdout.splitlines() if line[:2] in ("??", "!!")}
    return {p for p in paths if not any(p.endswith(a) or f"/{a}" in p or p.startswith(a) for a in ALLOWED_LEFTOVERS)}


def top_entries() -> set[str]:
    return set(os.listdir(ROOT))


def pytest_sessionstart(session):
    session.config.stash[_BEFORE] = (checkout_leftovers(), top_entries())


@pytest.fixture(autouse=True)
def _first_writer_into_the_checkout(request):
    """Note the first test after which a new top-level entry is in the checkout (named if the run fails)."""
    yield
    _, top = request.config.stash[_BEFORE]
    seen = request.config.stash.setdefault(_FIRST, {})
    for entry in top_entries() - top - seen.keys():
        seen[entry] = request.node.nodeid


def pytest_sessionfinish(session, exitstatus):
    """Run finalizers of objects left by tests (servers, sessions, models) before pytest's own end-of-run
    hooks: a finalizer that imports while another plugin builds an AST trips CPython 3.11's
    "AST constructor recursion depth mismatch". Then fail the run if it left files in the checkout."""
    import gc

    gc.collect()
    before, _ = session.config.stash.get(_BEFORE, (None, set()))
    after = checkout_leftovers() if before is not None else None
    gained = sorted(after - before) if after is not None else []
    if gained:
        first = session.config.stash.get(_FIRST, {})
        culprits = {first[p.split("/")[0]] for p in gained if p.split("/")[0] in first}
        message = (
            f"the test run left {', '.join(gained)} in the checkout {ROOT}"
            + (f" (first seen after {', '.join(sorted(culprits))})" if culprits else "")
            + ": give the test a tmp_path for it (cache_path, index.path, --out)"
        )
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"ERROR: {message}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
