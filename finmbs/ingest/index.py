"""One index interface over two Qdrant engines: chunk vectors and document-summary vectors in separate
collections, the full document text stored with each document so a passage can be proven verbatim.

Engine: a server or cluster (`url`) goes through qdrant-client; the embedded default is Qdrant Edge
(`qdrant-edge-py`), chosen by measurement (bench/bench_retrieval.py: filtered search on the same
vectors is far faster than qdrant-client's local mode, which scans numpy arrays in Python).
"""

from __future__ import annotations

import os
import re
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finmbs.config import ConfigError, IndexSettings
from finmbs.records import Chunk, Document, Record

_NAMESPACE = uuid.UUID("6f1d2c4e-8a7b-4c3d-9e2f-0a1b2c3d4e5f")
KEY_FIELDS = ("doc_id", "source_path", "company_key", "doc_type_key", "periods")


class Hit(Record):
    """One retrieved chunk with its similarity score and its document."""

    chunk: Chunk
    score: float
    document: Document


def point_id(key: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, key))


def company_key(name: str | None) -> str | None:
    """'Amazon.com, Inc.' / 'AMAZON' -> 'amazon': lower-case letters and digits, legal suffixes dropped."""
    if not name:
        return None
    words = re.sub(r"[^a-z0-9& ]", " ", name.lower()).split()
    while len(words) > 1 and words[-1] in {"inc", "corp", "corporation", "co", "company", "ltd", "llc", "plc", "lp", "l", "p", "com", "the", "sa", "nv", "ag"}:
        words.pop()
    return "".join(words) or None


def doc_type_key(doc_type: str | None) -> str | None:
    """'10-K', '10k', '10K' -> '10k'; 'Credit Agreement' -> 'creditagreement'."""
    return re.sub(r"[^a-z0-9.]", "", doc_type.lower()) if doc_type else None


def periods(period: str | None) -> list[str]:
    """A period and its year, so `--period 2023` matches '2023-01-03' and '2023Q4'."""
    if not period:
        return []
    year = re.search(r"(19|20)\d\d", period)
    return sorted({period, year.group(0)} if year else {period})


@dataclass
class Where:
    """A payload filter: `must` key == value (a list: any of), `must_not` key in values."""

    must: dict[str, Any] = field(default_factory=dict)
    must_not: dict[str, list[Any]] = field(default_factory=dict)


class Store(ABC):
    """The few vector-store operations the index needs, per engine."""

    @abstractmethod
    def ensure(self, name: str, dim: int) -> None: ...

    @abstractmethod
    def upsert(self, name: str, points: list[tuple[str, list[float], dict[str, Any]]]) -> None: ...

    @abstractmethod
    def delete(self, name: str, where: Where) -> None: ...

    @abstractmethod
    def query(self, name: str, vector: list[float], k: int, where: Where | None, exclude: tuple[str, ...] = ()) -> list[tuple[float, dict[str, Any]]]: ...

    @abstractmethod
    def scroll(self, name: str, where: Where, exclude: tuple[str, ...] = ()) -> list[dict[str, Any]]: ...

    @abstractmethod
    def close(self) -> None: ...


def _busy_as_error(open_shard: Any, folder: Path) -> Any:
    """Open an Edge shard; one ConfigError line when another process holds it (its WAL is locked)."""
    try:
        return open_shard(str(folder))
    except Exception as exc:
        if "WouldBlock" not in str(exc):
            raise
        raise ConfigError(f"index {folder.parent} is busy: another finmbs process (an ingest?) has it open; "
                          "wait for it to finish, then rerun", key="index.path") from None


class EdgeStore(Store):
    """Qdrant Edge: one embedded shard per collection under `path`."""

    def __init__(self, path: str | Path):
        import qdrant_edge as qe

        self.qe, self.path, self.shards = qe, Path(path), {}

    def _shard(self, name: str):
        if name not in self.shards:
            folder = self.path / name
            if not folder.is_dir():
                return None
            self.shards[name] = _busy_as_error(self.qe.EdgeShard.load, folder)
        return self.shards[name]

    def ensure(self, name: str, dim: int) -> None:
        if self._shard(name) is None:
            qe = self.qe
            folder = self.path / name
            folder.parent.mkdir(parents=True, exist_ok=True)
            config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine))
            shard = self.shards[name] = _busy_as_error(lambda f: qe.EdgeShard.create(f, config), folder)
            for key in KEY_FIELDS:
                shard.update(qe.UpdateOperation.create_field_index(key, qe.PayloadSchemaType.Keyword))

    def _filter(self, where: Where | None):
        if where is None or (not where.must and not where.must_not):
            return None
        qe = self.qe

        def match(value: Any):
            return qe.MatchAny(list(value)) if isinstance(value, (list, tuple)) else qe.MatchValue(value)

        return qe.Filter(
            must=[qe.FieldCondition(key, match=match(v)) for key, v in where.must.items()] or None,
            must_not=[qe.FieldCondition(key, match=qe.MatchAny(list(v))) for key, v in where.must_not.items() if v] or None,
        )

    def upsert(self, name: str, points: list[tuple[str, list[float], dict[str, Any]]]) -> None:
        for i in range(0, len(points), 256):
            batch = [self.qe.Point(pid, vector, payload) for pid, vector, payload in points[i : i + 256]]
            self.shards[name].update(self.qe.UpdateOperation.upsert_points(batch))

    def delete(self, name: str, where: Where) -> None:
        if (shard := self._shard(name)) is not None:
            shard.update(self.qe.UpdateOperation.delete_points_by_filter(self._filter(where)))

    def _payload(self, exclude: tuple[str, ...]):
        return self.qe.PayloadSelector.Exclude(list(exclude)) if exclude else True

    def query(self, name: str, vector: list[float], k: int, where: Where | None, exclude: tuple[str, ...] = ()) -> list[tuple[float, dict[str, Any]]]:
        if (shard := self._shard(name)) is None:
            return []
        request = self.qe.QueryRequest(limit=k, query=self.qe.Query.Nearest(vector), filter=self._filter(where), with_payload=self._payload(exclude))
        return [(p.score, p.payload or {}) for p in shard.query(request)]

    def scroll(self, name: str, where: Where, exclude: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        if (shard := self._shard(name)) is None:
            return []
        out, offset = [], None
        while True:
            request = self.qe.ScrollRequest(offset=offset, limit=512, filter=self._filter(where), with_payload=self._payload(exclude))
            records, offset = shard.scroll(request)
            out += [r.payload or {} for r in records]
            if offset is None:
                return out

    def close(self) -> None:
        for shard in self.shards.values():
            shard.flush()
            shard.close()
        self.shards.clear()


class ClientStore(Store):
    """qdrant-client: a Qdrant server/cluster (`url`), or its local mode (`path`, for comparison)."""

    def __init__(self, url: str | None = None, path: str | None = None, api_key: str | None = None,
                 options: dict[str, int] | None = None):
        from qdrant_client import QdrantClient, models

        self.models, self.server, self.options = models, bool(url), options or {}
        self.client = QdrantClient(url=url, api_key=api_key) if url else QdrantClient(path=path)

    def ensure(self, name: str, dim: int) -> None:
        m = self.models
        if not self.client.collection_exists(name):
            self.client.create_collection(name, vectors_config=m.VectorParams(size=dim, distance=m.Distance.COSINE), **self.options)
            for key in KEY_FIELDS if self.server else ():  # local mode has no payload indexes
                self.client.create_payload_index(name, key, m.PayloadSchemaType.KEYWORD)

    def _filter(self, where: Where | None):
        if where is None or (not where.must and not where.must_not):
            return None
        m = self.models

        def match(value: Any):
            return m.MatchAny(any=list(value)) if isinstance(value, (list, tuple)) else m.MatchValue(value=value)

        return m.Filter(
            must=[m.FieldCondition(key=key, match=match(v)) for key, v in where.must.items()] or None,
            must_not=[m.FieldCondition(key=key, match=m.MatchAny(any=list(v))) for key, v in where.must_not.items() if v] or None,
        )

    def upsert(self, name: str, points: list[tuple[str, list[float], dict[str, Any]]]) -> None:
        for i in range(0, len(points), 256):
            batch = [self.models.PointStruct(id=pid, vector=v, payload=p) for pid, v, p in points[i : i + 256]]
            self.client.upsert(name, batch)

    def delete(self, name: str, where: Where) -> None:
        if self.client.collection_exists(name):
            self.client.delete(name, points_selector=self.models.FilterSelector(filter=self._filter(where)))

    def _payload(self, exclude: tuple[str, ...]):
        return self.models.PayloadSelectorExclude(exclude=list(exclude)) if exclude else True

    def query(self, name: str, vector: list[float], k: int, where: Where | None, exclude: tuple[str, ...] = ()) -> list[tuple[float, dict[str, Any]]]:
        if not self.client.collection_exists(name):
            return []
        result = self.client.query_points(name, query=vector, limit=k, query_filter=self._filter(where), with_payload=self._payload(exclude))
        return [(p.score, p.payload or {}) for p in result.points]

    def scroll(self, name: str, where: Where, exclude: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        if not self.client.collection_exists(name):
            return []
        out, offset = [], None
        while True:
            records, offset = self.client.scroll(name, scroll_filter=self._filter(where), limit=512, offset=offset, with_payload=self._payload(exclude))
            out += [r.payload or {} for r in records]
            if offset is None:
                return out

    def close(self) -> None:
        self.client.close()


def _chunk_payload(chunk: Chunk, document: Document) -> dict[str, Any]:
    return {
        **chunk.model_dump(), "company_key": company_key(document.company),
        "doc_type_key": doc_type_key(document.doc_type), "periods": periods(document.period),
    }


class Index:
    """Chunks and documents of one index; search by chunk, find similar documents by summary."""

    def __init__(self, store: Store, settings: IndexSettings):
        from finmbs.ingest.embed import embedder

        self.store, self.settings = store, settings
        self.chunk_col = f"{settings.collection_prefix}_chunks"
        self.doc_col = f"{settings.collection_prefix}_documents"
        self._embedder = None
        self._embedder_factory = lambda: embedder(settings.embedding_model)
        self._documents: dict[str, Document] = {}

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    @property
    def embedder(self):
        if self._embedder is None:
            self._embedder = self._embedder_factory()
        return self._embedder

    # ------------------------------------------------------------------ writing

    def add_document(self, document: Document, text: str, chunks: list[Chunk], chunk_vectors: list[list[float]], summary_vector: list[float]) -> None:
        """Write a document's chunks, then the document itself (its presence marks the document complete)."""
        dim = len(summary_vector)
        self.store.ensure(self.chunk_col, dim)
        self.store.ensure(self.doc_col, dim)
        self.store.upsert(self.chunk_col, [(point_id(c.chunk_id), v, _chunk_payload(c, document)) for c, v in zip(chunks, chunk_vectors)])
        payload = {**document.model_dump(), "text": text, "company_key": company_key(document.company),
                   "doc_type_key": doc_type_key(document.doc_type), "periods": periods(document.period)}
        self.store.upsert(self.doc_col, [(point_id(document.doc_id), summary_vector, payload)])
        self._documents.pop(document.doc_id, None)

    def remove_source(self, source_path: str) -> None:
        """Delete every chunk and document that came from one source file."""
        where = Where(must={"source_path": source_path})
        self.store.delete(self.doc_col, where)
        self.store.delete(self.chunk_col, where)
        self._documents.clear()

    # ------------------------------------------------------------------ reading

    def documents(self, **must: Any) -> list[Document]:
        """Documents whose payload matches `must` (e.g. source_path=...), without their text."""
        rows = self.store.scroll(self.doc_col, Where(must={k: v for k, v in must.items() if v is not None}), exclude=("text",))
        return [_document(row) for row in rows]

    def document(self, doc_id: str) -> Document:
        if doc_id not in self._documents:
            found = self.documents(doc_id=doc_id)
            if not found:
                raise KeyError(f"document '{doc_id}' is not in the index")
            self._documents[doc_id] = found[0]
        return self._documents[doc_id]

    def document_text(self, doc_id: str) -> str:
        """The full text of a document, exactly as its chunks' offsets refer to it."""
        rows = self.store.scroll(self.doc_col, Where(must={"doc_id": doc_id}))
        if not rows:
            raise KeyError(f"document '{doc_id}' is not in the index")
        return rows[0]["text"]

    def chunks(self, doc_id: str) -> list[Chunk]:
        rows = self.store.scroll(self.chunk_col, Where(must={"doc_id": doc_id}))
        return sorted((_chunk(row) for row in rows), key=lambda c: c.char_start or 0)

    def search(self, query: str, k: int, *, exclude_doc_ids=(), doc_type: str | None = None, company: str | None = None, period: str | None = None, doc_id: str | None = None) -> list[Hit]:
        """Top-k chunks for a query, optionally excluding documents and filtering by company/type/period (or one document)."""
        must = {"company_key": company_key(company), "doc_type_key": doc_type_key(doc_type), "periods": period, "doc_id": doc_id}
        where = Where(must={key: v for key, v in must.items() if v}, must_not={"doc_id": list(exclude_doc_ids)})
        vector = self.embedder.encode([query])[0]
        hits = []
        for score, payload in self.store.query(self.chunk_col, vector, k, where):
            chunk = _chunk(payload)
            hits.append(Hit(chunk=chunk, score=score, document=self.document(chunk.doc_id)))
        return hits

    def similar_documents(self, text: str, k: int, *, exclude_doc_ids=()) -> list[tuple[Document, float]]:
        """Top-k documents by summary vector (re-grounding: unseen documents like the seed's)."""
        vector = self.embedder.encode([text])[0]
        rows = self.store.query(self.doc_col, vector, k, Where(must_not={"doc_id": list(exclude_doc_ids)}), exclude=("text",))
        return [(_document(payload), score) for score, payload in rows]


def _chunk(payload: dict[str, Any]) -> Chunk:
    return Chunk.model_validate({k: v for k, v in payload.items() if k in Chunk.model_fields})


def _document(payload: dict[str, Any]) -> Document:
    return Document.model_validate({k: v for k, v in payload.items() if k in Document.model_fields})


def open_store(settings: IndexSettings) -> Store:
    """Qdrant server/cluster when `url` (or QDRANT_URL) is set, else the embedded Qdrant Edge folder."""
    url = settings.url or os.environ.get("QDRANT_URL")
    if url:
        api_key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
        return ClientStore(url=url, api_key=api_key, options=settings.collection_options())
    try:
        return EdgeStore(settings.path)
    except OSError as exc:
        raise ConfigError(f"cannot open index folder {settings.path}: {exc}", key="index.path") from None


def open_index(settings: IndexSettings) -> Index:
    """The index named by the settings (see `open_store`)."""
    return Index(open_store(settings), settings)
