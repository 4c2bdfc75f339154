"""Embedded model registry: assembling a GGUF from installed part packages, hash checks, clear errors.

The part packages here are real installed distributions (dist-info with a RECORD) on a temporary
sys.path entry, found through importlib.metadata exactly as the PyPI model packages are.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.llm import embedded
from finmbs.llm.embedded import EmbeddedModel, EmbeddedModelError, ThreadScheduler

PARTS = [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5]


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def install_parts(site, stem: str, version: str, parts: list[bytes]) -> None:
    """Write one wheel-installed distribution per part into `site` (dist-info with METADATA and RECORD)."""
    for i, data in enumerate(parts, 1):
        module, dist = f"{stem.replace('-', '_')}{i}", f"{stem}{i}"
        (site / module / "data").mkdir(parents=True)
        (site / module / "__init__.py").write_text("")
        (site / module / "data" / f"part{i:02d}.bin").write_bytes(data)
        info = site / f"{module}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "RECORD").write_text(
            f"{module}/__init__.py,,\n{module}/data/part{i:02d}.bin,sha256={_digest(data)},{len(data)}\n"
            f"{module}-{version}.dist-info/RECORD,,\n"
        )


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    stem = f"finmbs-test-model-{os.getpid()}-part"
    install_parts(site, stem, "1.2.3", PARTS)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("FINMBS_MODEL_CACHE", str(tmp_path / "cache"))
    whole = b"".join(PARTS)
    model = EmbeddedModel(
        name="tiny-test",
        title="test",
        license="-",
        package=stem,
        version="1.2.3",
        parts=len(PARTS),
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
    )
    monkeypatch.setitem(embedded.REGISTRY, model.name, model)
    return model, site


def test_assembles_once_verifies_and_remembers(fake_model, monkeypatch):
    model, _ = fake_model
    path = embedded.model_path("embedded/tiny-test")
    assert path.read_bytes() == b"".join(PARTS) and path.parent == embedded.cache_dir()
    assert not list(path.parent.glob("*.partial"))
    hashed = []
    monkeypatch.setattr(embedded, "_hash_file", lambda p: hashed.append(p) or model.sha256)
    assert embedded.model_path(model) == path and not hashed  # the verified marker: no re-hash
    os.utime(path, ns=(1, 1))  # the file changed under the marker: hash once more, then trust it
    embedded.model_path(model)
    embedded.model_path(model)
    assert hashed == [path]


def test_a_tampered_cache_file_is_reassembled(fake_model):
    model, _ = fake_model
    path = embedded.model_path(model)
    path.write_bytes(b"X" * model.size)
    assert embedded.model_path(model).read_bytes() == b"".join(PARTS)


def test_missing_package_names_model_and_package(fake_model):
    model, site = fake_model
    for item in site.glob("*2-1.2.3.dist-info"):
        (item / "METADATA").unlink()
        (item / "RECORD").unlink()
        item.rmdir()
    with pytest.raises(EmbeddedModelError, match=rf"'tiny-test'.*{model.package}2==1.2.3 is not installed"):
        embedded.model_path(model)
    assert not list(embedded.cache_dir().iterdir())  # no partial file left behind


def test_corrupt_part_names_the_package(fake_model):
    model, site = fake_model
    (site / f"{model.package.replace('-', '_')}3" / "data" / "part03.bin").write_bytes(b"d" * 5)
    with pytest.raises(EmbeddedModelError, match=rf"part 3 in package {model.package}3==1.2.3 is corrupt"):
        embedded.model_path(model)


def test_hash_mismatch_of_the_whole(fake_model, monkeypatch):
    model, _ = fake_model
    wrong = replace(model, sha256="0" * 64)
    monkeypatch.setitem(embedded.REGISTRY, model.name, wrong)
    with pytest.raises(EmbeddedModelError, match=r"'tiny-test'.*expected 0000"):
        embedded.model_path("tiny-test")
    assert not (embedded.cache_dir() / "tiny-test.gguf").exists()


def test_wrong_version_and_unknown_model(fake_model, monkeypatch):
    model, _ = fake_model
    monkeypatch.setitem(embedded.REGISTRY, model.name, replace(model, version="9.9"))
    with pytest.raises(EmbeddedModelError, match=r"==9.9 is required, found version 1.2.3"):
        embedded.model_path("tiny-test")
    with pytest.raises(EmbeddedModelError, match=r"unknown embedded model 'embedded/nope'.*qwen2.5-coder-0.5b"):
        embedded.lookup("embedded/nope")


def test_a_gguf_that_does_not_load_is_one_cli_error(fake_model):
    pytest.importorskip("llama_cpp")
    model, _ = fake_model
    roles = ("teachers.0", "students.0", "students.1", "target", "judge")
    args = [arg for role in roles for arg in ("--set", f"roles.{role}.model=embedded/tiny-test")]
    result = CliRunner().invoke(app, ["models", "--probe", *args])
    assert result.exit_code != 0
    assert f"'tiny-test' ({model.package}1..3==1.2.3) did not load" in " ".join(result.output.split())


def test_scheduler_never_exceeds_its_cores():
    import threading
    import time

    scheduler, in_use, peak, guard = ThreadScheduler(2), [0], [0], threading.Lock()

    def work(want: int) -> None:
        got = scheduler.acquire(want)
        with guard:
            in_use[0] += got
            peak[0] = max(peak[0], in_use[0])
        time.sleep(0.01)
        with guard:
            in_use[0] -= got
        scheduler.release(got)

    threads = [threading.Thread(target=work, args=(w,)) for w in (1, 2, 1, 5, 1, 1) * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert peak[0] == 2 and in_use[0] == 0 and scheduler._free == 2


def test_a_model_working_alone_gets_every_core_and_busy_models_split_them():
    import threading

    scheduler = ThreadScheduler(2)
    with scheduler.wants("big"):
        alone = scheduler.acquire()
        assert alone == 2  # nothing else waits: all cores
        scheduler.release(alone)
        with scheduler.wants("small"):
            assert scheduler.share() == 1
            big = scheduler.acquire()
            got: list[int] = []
            small = threading.Thread(target=lambda: got.append(scheduler.acquire()))
            small.start()
            small.join(5)
            assert big == 1 and got == [1] and scheduler._free == 0  # side by side, one core each
            scheduler.release(big)
            scheduler.release(got[0])
        assert scheduler.acquire(None) == 2  # the other model is done: all cores again
        scheduler.release(2)
    assert scheduler._free == 2 and scheduler.share() == 2
    late: list[int] = []
    with scheduler.wants("big"):
        taken = scheduler.acquire()  # a generation runs on both cores ...
        with scheduler.wants("small"):
            waiter = threading.Thread(target=lambda: late.append(scheduler.acquire()))
            waiter.start()
            waiter.join(0.2)
            assert late == []  # ... so a newcomer waits for cores instead of oversubscribing
            scheduler.release(taken)
            waiter.join(5)
            assert late == [1]
            scheduler.release(1)
