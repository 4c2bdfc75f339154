"""Shared fixtures: the scripted OpenAI-compatible server, endpoints on it, the shared data folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from finmbs.config import Endpoint
from finmbs.testing.server import ScriptedOpenAIServer

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FINMBS_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def openai_server():
    with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture
def make_endpoint(openai_server):
    def make(name: str = "scripted", **kwargs) -> Endpoint:
        fields = dict(
            name=name, model=f"openai/{name}", api_base=openai_server.base_url, max_concurrency=8,
            temperature=1.0, max_tokens=64, timeout_s=5.0, max_retries=3,
        )
        fields.update(kwargs)
        return Endpoint(**fields)

    return make


def pytest_sessionfinish(session, exitstatus):
    """Run finalizers of objects left by tests (servers, sessions, models) before pytest's own end-of-run
    hooks: a finalizer that imports while another plugin builds an AST trips CPython 3.11's
    "AST constructor recursion depth mismatch"."""
    import gc

    gc.collect()
