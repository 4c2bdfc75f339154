"""The Qdrant server/cluster path of the index (`--qdrant-url`, `QDRANT_URL`, API key from the
environment, sharding and replication options), without a Qdrant server binary:

1. on the wire: qdrant-client talks REST to a small recording HTTP stand-in, which checks that the
   api-key header and shard_number / replication_factor / write_consistency_factor reach
   `PUT /collections/NAME` exactly as a server would receive them;
2. end to end: the same ClientStore / Index code as a server run, with only the client swapped for
   qdrant-client's embedded (local-mode) engine, ingests real credit-agreement excerpts with the real
   MiniLM embedder through `finmbs ingest --qdrant-url`, and searches them; the hits equal those of
   the default embedded engine (Qdrant Edge) on the same documents.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
import qdrant_client
from aiohttp import web
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import IndexSettings, load_config
from finmbs.ingest import ingest_paths, open_index
from finmbs.ingest.store import ClientStore, EdgeStore, open_store

SHARDING = {"shard_number": 3, "replication_factor": 2, "write_consistency_factor": 2}
QUERY = "conditions precedent to the effectiveness of the commitments"
CONCEPT_QUERY = (
    "maximum leverage ratio and interest coverage covenants"  # a finance concept: one more prefetch (tables)
)
runner = CliRunner()


class RecordingQdrant:
    """Answers the REST calls `ClientStore.ensure` makes, recording method, path, api-key and body."""

    def __init__(self):
        self.requests: list[tuple[str, str, str | None, dict]] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        self.requests.append((request.method, request.path, request.headers.get("api-key"), body))
        if request.path == "/":  # the client's version check
            return web.json_response({"title": "qdrant - vector search engine", "version": "1.15.1"})
        if request.path.endswith("/exists"):
            result: object = {"exists": False}
        elif request.path.endswith("/index"):
            result = {"operation_id": 1, "status": "completed"}
        else:
            result = True
        return web.json_response({"result": result, "status": "ok", "time": 0.0})

    def __enter__(self) -> RecordingQdrant:
        app_ = web.Application()
        app_.router.add_route("*", "/{tail:.*}", self.handle)
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(app_)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_url_api_key_and_sharding_reach_the_server(monkeypatch):
    monkeypatch.setenv("CLUSTER_KEY", "secret-key")
    with RecordingQdrant() as server:
        store = open_store(IndexSettings(url=server.url, api_key_env="CLUSTER_KEY", **SHARDING))
        assert isinstance(store, ClientStore)
        store.ensure("finmbs_chunks", 384, sparse=True)
        store.close()
        create = [(path, key, body) for method, path, key, body in server.requests if method == "PUT"]
        assert create[0] == (
            "/collections/finmbs_chunks",
            "secret-key",
            {
                "vectors": {"size": 384, "distance": "Cosine"},
                "sparse_vectors": {"bm25": {"modifier": "idf"}},
                **SHARDING,
            },
        )
        indexed = {body["field_name"] for path, _, body in create[1:] if path == "/collections/finmbs_chunks/index"}
        assert indexed == {
            "doc_id", "source_path", "company_key", "doc_type_key", "periods", "kind", "term", "statement", "line_items"
        }  # fmt: skip
        assert all(key == "secret-key" for _, _, key, _ in server.requests)

        # QDRANT_URL alone (no --qdrant-url, no key in the environment): the server's own defaults
        server.requests.clear()
        monkeypatch.setenv("QDRANT_URL", server.url)
        monkeypatch.delenv("QDRANT_API_KEY", raising=False)
        store = open_store(IndexSettings())
        store.ensure("finmbs_documents", 384)
        store.close()
        _, path, key, body = next(r for r in server.requests if r[0] == "PUT")
        assert (path, key, body) == (
            "/collections/finmbs_documents",
            None,
            {"vectors": {"size": 384, "distance": "Cosine"}},
        )


@pytest.fixture
def documents(shared_data, tmp_path):
    """Excerpts of two real credit agreements (small, to keep embedding time short)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    agreements = shared_data / "credit_agreements" / "docs"
    for name, size in (
        ("brown_forman_2023_credit_agreement.txt", 9000),
        ("realty_income_2023_term_loan_agreement.txt", 6000),
    ):
        if (agreements / name).is_file():
            (docs / name).write_text((agreements / name).read_text(encoding="utf-8")[:size], encoding="utf-8")
    if len(list(docs.iterdir())) < 2:
        pytest.skip("credit agreements not found in the shared data")
    return docs


@pytest.mark.filterwarnings("ignore:Payload indexes have no effect in the local Qdrant")  # the stand-in engine
@pytest.mark.parametrize("embed", ["full", "cascade"])
def test_ingest_and_search_through_the_server_code_path(documents, tmp_path, monkeypatch, embed):
    clients = []

    def client(url=None, api_key=None):  # a server client, played by qdrant-client's embedded engine
        clients.append((url, api_key))
        local = real_client(path=str(tmp_path / "served"))
        create = local.create_collection

        def create_collection(name, **kwargs):
            created[name] = {k: kwargs[k] for k in SHARDING}
            return create(name, **kwargs)

        local.create_collection = create_collection
        return local

    real_client, created = qdrant_client.QdrantClient, {}
    monkeypatch.setattr(qdrant_client, "QdrantClient", client)
    monkeypatch.setenv("QDRANT_API_KEY", "cluster-key")
    url = "https://qdrant.cluster.example:6333"
    sets = [arg for key, value in SHARDING.items() for arg in ("--set", f"index.{key}={value}")]
    result = runner.invoke(app, ["ingest", str(documents), "--qdrant-url", url, "--json", "--embed", embed, *sets])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["documents"] == 2 and report["chunks"] >= 8 and not report["skipped"]
    assert set(clients) == {(url, "cluster-key")}
    assert created == {"finmbs_chunks": SHARDING, "finmbs_documents": SHARDING}

    again = runner.invoke(app, ["ingest", str(documents), "--qdrant-url", url, "--json", "--embed", embed])
    assert json.loads(again.stdout)["unchanged"] == 2  # idempotent on the server path too

    served = {}
    for query in (QUERY, CONCEPT_QUERY):
        result = runner.invoke(
            app, ["search", query, "-k", "5", "--qdrant-url", url, "--json", "--set", f"index.embed={embed}"]
        )
        assert result.exit_code == 0, result.output
        served[query] = json.loads(result.stdout)

    # the same documents in the default embedded engine (Qdrant Edge) give the same hits
    edge = IndexSettings(path=str(tmp_path / "edge"), embed=embed)
    ingest_paths([documents], edge, show_progress=False)
    with open_index(edge) as index:
        assert isinstance(index.store, EdgeStore)
        for query, hits in served.items():
            expected = [(h.chunk.chunk_id, h.score) for h in index.search(query, 5)]
            assert [h["chunk_id"] for h in hits] == [chunk_id for chunk_id, _ in expected], query
            # hybrid scores are reciprocal-rank-fusion sums; the two engines count ranks a hair differently
            assert all(abs(h["score"] - score) < 2e-3 for h, (_, score) in zip(hits, expected)), query

    settings = load_config(None, [f"index.url={url}", f"index.embed={embed}"]).index
    with open_index(settings) as index:
        top = index.search(QUERY, 3)[0]
        assert index.document_text(top.chunk.doc_id)[top.chunk.char_start : top.chunk.char_end] == top.chunk.text
        others = index.search(QUERY, 20, exclude_doc_ids=[top.chunk.doc_id])
        assert others and {h.chunk.doc_id for h in others}.isdisjoint({top.chunk.doc_id})
        similar = index.similar_documents(top.document.summary, 5, exclude_doc_ids=[top.chunk.doc_id])
        assert [d.doc_id for d, _ in similar] == [h.chunk.doc_id for h in others[:1]]
