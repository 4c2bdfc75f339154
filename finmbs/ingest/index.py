"""One index interface over two Qdrant engines: chunk vectors and document-summary vectors in separate
collections, the full document text stored with each document so a passage can be proven verbatim.

Engine: a server or cluster (`url`) goes through qdrant-client; the embedded default is Qdrant Edge
(`qdrant-edge-py`), chosen by measurement (bench/bench_retrieval.py: filtered search on the same
vectors is far faster than qdrant-client's local mode, which scans numpy arrays in Python).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finmbs.config import ConfigError, IndexSettings
from finmbs.ingest.concepts import expansion
from finmbs.records import Chunk, Document, Record

_NAMESPACE = uuid.UUID("6f1d2c4e-8a7b-4c3d-9e2f-0a1b2c3d4e5f")
KEY_FIELDS = ("doc_id", "source_path", "company_key", "doc_type_key", "periods", "kind", "term")
TERMS = "terms"  # a document record's defined terms


class Hit(Record):
    """One retrieved chunk with its similarity score and its document."""

    chunk: Chunk
    score: float
    document: Document
    context: Chunk | None = None  # small-to-big: the enclosing table or section window (exact document text)


def point_id(key: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, key))


_LEGAL_FORMS = {"inc", "corp", "corporation", "co", "company", "ltd", "llc", "plc", "lp", "l", "p", "com", "the", "sa", "nv", "ag"}


def company_words(name: str | None) -> list[str]:
    """'Amazon.com, Inc.' -> ['amazon']: lower-case words, legal suffixes dropped."""
    words = re.sub(r"[^a-z0-9& ]", " ", (name or "").lower()).split()
    while len(words) > 1 and words[-1] in _LEGAL_FORMS:
        words.pop()
    return words


def company_key(name: str | None) -> str | None:
    """'Amazon.com, Inc.' / 'AMAZON' -> 'amazon': lower-case letters and digits, legal suffixes dropped."""
    return "".join(company_words(name)) or None


def abbreviates(word: str, name: str | None) -> bool:
    """Whether `word` (four letters or more) abbreviates a company name of two words or more by the first
    two letters or more of each word, in order: "AMEX" / "AmEx" for American Express; not its initials."""
    words = [w for w in company_words(name) if w.isalnum()]
    if len(word) < 4 or len(words) < 2:
        return False

    def spelled(rest: str, words: list[str]) -> bool:
        if not words:
            return not rest
        return any(rest[:n] == words[0][:n] and spelled(rest[n:], words[1:]) for n in range(2, min(len(words[0]), len(rest)) + 1))

    return spelled(word.lower(), words)


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


SPARSE = "bm25"  # the sparse (BM25, IDF-weighted) vector of each chunk, next to the dense one(s)
RRF_K = 60  # reciprocal-rank fusion constant (score = sum 1 / (RRF_K + rank))
FIRST = "static"  # cascade: the static embedder's dense vector, written at ingest
RERANK = "rerank"  # cascade: the full embedder's vector, written back the first time a search re-scores the chunk


@dataclass
class Sparse:
    """A sparse vector: token ids and weights."""

    indices: list[int]
    values: list[float]


Dense = list[float] | dict[str, list[float]]  # the unnamed dense vector, or named ones (cascade: FIRST)
Point = tuple[str, Dense, Sparse | None, dict[str, Any]]
Also = tuple[list[float], Where]  # one more dense candidate list for the fusion: its vector, its filter


class Store(ABC):
    """The few vector-store operations the index needs, per engine."""

    @abstractmethod
    def ensure(self, name: str, dim: int | dict[str, int], sparse: bool = False) -> None:
        """Create the collection if missing: a dense vector (or named ones: {name: size}), and with `sparse`
        a BM25 vector (IDF modifier)."""

    @abstractmethod
    def vectors(self, name: str) -> dict[str, int] | None:
        """The collection's dense vectors, {name: size} ('' for the unnamed one); None when there is none."""

    def dim(self, name: str) -> int | None:
        """The size of the collection's (first) dense vector; None when there is no such collection."""
        vectors = self.vectors(name)
        return None if not vectors else vectors.get("", next(iter(vectors.values())))

    @abstractmethod
    def get_vectors(self, name: str, ids: list[str], vector: str) -> dict[str, list[float] | None]:
        """Point id -> its named vector `vector` (None where the point has none yet)."""

    @abstractmethod
    def set_vectors(self, name: str, vector: str, vectors: dict[str, list[float]]) -> int:
        """Write the named vector `vector` of existing points (their other vectors and payload untouched);
        a point deleted meanwhile (its file re-ingested) is skipped. Returns how many were written."""

    def release(self) -> None:
        """Let other processes at the index (embedded engine: close the shards, drop the lock)."""

    def turn(self) -> Any:
        """A context for one operation of this process on the index (the embedded engine: the shards stay
        open across operations until another process asks for its turn)."""
        from contextlib import nullcontext

        return nullcontext()

    @abstractmethod
    def has_sparse(self, name: str) -> bool:
        """Whether the collection holds BM25 vectors (indexes built before hybrid search do not)."""

    @abstractmethod
    def upsert(self, name: str, points: list[Point]) -> None: ...

    @abstractmethod
    def delete(self, name: str, where: Where) -> None: ...

    @abstractmethod
    def query(self, name: str, vector: list[float], k: int, where: Where | None, exclude: tuple[str, ...] = (),
              sparse: Sparse | None = None, also: Sequence[Also] = (), using: str = "",
              ids: Sequence[str] | None = None) -> list[tuple[float, dict[str, Any]]]:
        """Top-k points by the dense vector `using` ('' the unnamed one) or, given `sparse`, by dense and BM25
        candidates fused with reciprocal-rank fusion in one query (`prefetch` + RRF); each of `also` (hybrid
        only) adds one more candidate list to the fusion: the dense search for its vector within its
        filter. `ids`: only among these points (the cascade's second stage)."""

    @abstractmethod
    def scroll(self, name: str, where: Where, exclude: tuple[str, ...] = ()) -> list[dict[str, Any]]: ...

    @abstractmethod
    def close(self) -> None: ...


def _busy_as_error(open_shard: Any, folder: Path) -> Any:
    """Open an Edge shard; one ConfigError line when a process outside finmbs's lock holds it (its WAL is locked)."""
    try:
        return open_shard(str(folder))
    except Exception as exc:
        if "WouldBlock" not in str(exc):
            raise
        raise ConfigError(f"index {folder.parent} is busy: another process has it open outside finmbs's index lock; "
                          "wait for it to finish, then rerun", key="index.path") from None


LOCK_FILE = ".finmbs-index.lock"  # held (exclusive) by the process whose turn it is
WANT_FILE = ".finmbs-index.want"  # held (shared) by each process waiting for its turn


class EdgeStore(Store):
    """Qdrant Edge: one embedded shard per collection under `path`.

    A shard can be open in one process at a time, so processes take turns. A process opens the shards under
    an exclusive lock on `path/.finmbs-index.lock`; a process that wants a turn holds a shared lock on
    `path/.finmbs-index.want` while it waits. The holder keeps its shards open across its own operations
    (opening and closing costs about a second) and, when another process wants a turn, closes them (flushed)
    at the end of its current operation, or at once when it is idle (a watcher thread), so a search waits
    at most for one operation of the other process. A process that waits longer than `lock_timeout_s`
    gets one error line naming the index."""

    def __init__(self, path: str | Path, lock_timeout_s: float = 600.0):
        import threading

        import qdrant_edge as qe

        self.qe, self.path, self.shards = qe, Path(path), {}
        self.lock_timeout_s = lock_timeout_s
        self._lock: Any = None  # the open lock file while this process holds the index
        self._mutex = threading.RLock()  # one operation at a time in this process, and the watcher between them
        self._watcher: Any = None
        self._closed = threading.Event()
        self._has_sparse: dict[str, bool] = {}  # collection -> has BM25 vectors

    def turn(self) -> Any:
        return self._mutex

    def _acquire(self) -> None:
        if self._lock is not None:
            return
        import fcntl
        import time

        self.path.mkdir(parents=True, exist_ok=True)
        handle = open(self.path / LOCK_FILE, "a+")
        want = open(self.path / WANT_FILE, "a+")
        fcntl.flock(want, fcntl.LOCK_SH)  # tells the holder that a process waits
        deadline = time.monotonic() + self.lock_timeout_s
        try:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        handle.close()
                        raise ConfigError(f"index {self.path} is busy: another finmbs process kept it for more than "
                                          f"{self.lock_timeout_s:g} s (index.lock_timeout_s); wait for it to finish, then rerun",
                                          key="index.path") from None
                    time.sleep(0.01)
        finally:
            want.close()  # drops the shared lock
        self._lock = handle
        self._watch()

    def wanted(self) -> bool:
        """Whether another process waits for its turn at the index."""
        import fcntl

        with open(self.path / WANT_FILE, "a+") as probe:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(probe, fcntl.LOCK_UN)
        return False

    def _watch(self) -> None:
        """A daemon thread that gives the index up while this process is idle and another one waits."""
        import threading

        if self._watcher is not None and self._watcher.is_alive():
            return

        def watch() -> None:
            while not self._closed.wait(0.05):
                if self._lock is None or not self.wanted():
                    continue
                if self._mutex.acquire(blocking=False):
                    try:
                        self._give_up()
                    finally:
                        self._mutex.release()

        self._watcher = threading.Thread(target=watch, name="finmbs-index-turns", daemon=True)
        self._watcher.start()

    def release(self) -> None:
        """After an operation: give the index up if another process waits for it."""
        with self._mutex:
            if self._lock is not None and self.wanted():
                self._give_up()

    def _give_up(self) -> None:
        for shard in self.shards.values():
            shard.flush()
            shard.close()
        self.shards.clear()
        if self._lock is not None:
            import fcntl

            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def _shard(self, name: str):
        if name not in self.shards:
            folder = self.path / name
            if not folder.is_dir():
                return None
            self._acquire()
            self.shards[name] = _busy_as_error(self.qe.EdgeShard.load, folder)
        return self.shards[name]

    def ensure(self, name: str, dim: int | dict[str, int], sparse: bool = False) -> None:
        if self._shard(name) is None:
            qe = self.qe
            self._acquire()
            folder = self.path / name
            folder.parent.mkdir(parents=True, exist_ok=True)
            sparse_vectors = {SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)} if sparse else None
            if isinstance(dim, dict):
                vectors: Any = {n: qe.EdgeVectorParams(size=d, distance=qe.Distance.Cosine) for n, d in dim.items()}
            else:
                vectors = qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)
            config = qe.EdgeConfig(vectors=vectors, sparse_vectors=sparse_vectors)
            shard = self.shards[name] = _busy_as_error(lambda f: qe.EdgeShard.create(f, config), folder)
            for key in KEY_FIELDS:
                shard.update(qe.UpdateOperation.create_field_index(key, qe.PayloadSchemaType.Keyword))

    def _filter(self, where: Where | None, ids: Sequence[str] | None = None):
        if (where is None or (not where.must and not where.must_not)) and ids is None:
            return None
        qe, where = self.qe, where or Where()

        def match(value: Any):
            return qe.MatchAny(list(value)) if isinstance(value, (list, tuple)) else qe.MatchValue(value)

        must: list[Any] = [qe.FieldCondition(key, match=match(v)) for key, v in where.must.items()]
        if ids is not None:
            must.append(qe.HasIdCondition(set(ids)))
        return qe.Filter(
            must=must or None,
            must_not=[qe.FieldCondition(key, match=qe.MatchAny(list(v))) for key, v in where.must_not.items() if v] or None,
        )

    def _config(self, name: str) -> dict[str, Any] | None:
        """The collection's `edge_config.json` (vectors, sparse vectors); None when there is no collection."""
        config = self.path / name / "edge_config.json"
        return json.loads(config.read_text()) if config.is_file() else None

    def has_sparse(self, name: str) -> bool:
        if name not in self._has_sparse:
            if (config := self._config(name)) is None:
                return False
            self._has_sparse[name] = SPARSE in (config.get("sparse_vectors") or {})
        return self._has_sparse[name]

    def vectors(self, name: str) -> dict[str, int] | None:
        config = self._config(name)
        return None if config is None else {n: int(v["size"]) for n, v in config["vectors"].items()}

    def _vector(self, dense: Dense, sparse: Sparse | None):
        named = dense if isinstance(dense, dict) else {"": dense}
        if sparse:
            return {**named, SPARSE: self.qe.SparseVector(sparse.indices, sparse.values)}
        return dense

    def get_vectors(self, name: str, ids: list[str], vector: str) -> dict[str, list[float] | None]:
        if (shard := self._shard(name)) is None or not ids:
            return {}
        found = {str(r.id): r.vector for r in shard.retrieve(list(ids), with_payload=False, with_vector=[vector])}
        return {pid: _named(found.get(pid), vector) for pid in ids}

    def set_vectors(self, name: str, vector: str, vectors: dict[str, list[float]]) -> int:
        if (shard := self._shard(name)) is None or not vectors:
            return 0
        alive = {str(r.id) for r in shard.retrieve(list(vectors), with_payload=False, with_vector=False)}
        points = [self.qe.PointVectors(pid, {vector: v}) for pid, v in vectors.items() if pid in alive]
        if points:
            shard.update(self.qe.UpdateOperation.update_vectors(points))
        return len(points)

    def upsert(self, name: str, points: list[Point]) -> None:
        for i in range(0, len(points), 256):
            batch = [self.qe.Point(pid, self._vector(dense, sparse), payload) for pid, dense, sparse, payload in points[i : i + 256]]
            self.shards[name].update(self.qe.UpdateOperation.upsert_points(batch))

    def delete(self, name: str, where: Where) -> None:
        if (shard := self._shard(name)) is not None:
            shard.update(self.qe.UpdateOperation.delete_points_by_filter(self._filter(where)))

    def _payload(self, exclude: tuple[str, ...]):
        return self.qe.PayloadSelector.Exclude(list(exclude)) if exclude else True

    def query(self, name: str, vector: list[float], k: int, where: Where | None, exclude: tuple[str, ...] = (),
              sparse: Sparse | None = None, also: Sequence[Also] = (), using: str = "",
              ids: Sequence[str] | None = None) -> list[tuple[float, dict[str, Any]]]:
        if (shard := self._shard(name)) is None:
            return []
        qe, filter_, using_ = self.qe, self._filter(where, ids), using or None
        if sparse is None or not sparse.indices:
            request = qe.QueryRequest(limit=k, query=qe.Query.Nearest(vector, using=using_), filter=filter_, with_payload=self._payload(exclude))
        else:
            depth = prefetch_depth(k)
            prefetches = [qe.Prefetch(limit=depth, query=qe.Query.Nearest(vector, using=using_), filter=filter_),
                          qe.Prefetch(limit=depth, query=qe.Query.Nearest(qe.SparseVector(sparse.indices, sparse.values), using=SPARSE), filter=filter_)]
            prefetches += [qe.Prefetch(limit=depth, query=qe.Query.Nearest(v, using=using_), filter=self._filter(w, ids)) for v, w in also]
            request = qe.QueryRequest(limit=k, prefetches=prefetches, query=qe.Fusion.Rrf(k=RRF_K), filter=filter_, with_payload=self._payload(exclude))
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
        self._closed.set()
        with self._mutex:
            self._give_up()


def _named(vectors: Any, name: str) -> list[float] | None:
    """One named vector out of a retrieved point's vectors (None when the point has none of that name)."""
    if isinstance(vectors, dict):
        value = vectors.get(name)
        return list(value) if value is not None and not hasattr(value, "indices") else None
    return None


class ClientStore(Store):
    """qdrant-client: a Qdrant server/cluster (`url`), or its local mode (`path`, for comparison)."""

    def __init__(self, url: str | None = None, path: str | None = None, api_key: str | None = None,
                 options: dict[str, int] | None = None):
        from qdrant_client import QdrantClient, models

        self.models, self.server, self.options = models, bool(url), options or {}
        self._has_sparse: dict[str, bool] = {}  # collection -> has BM25 vectors
        self.client = QdrantClient(url=url, api_key=api_key) if url else QdrantClient(path=path)

    def ensure(self, name: str, dim: int | dict[str, int], sparse: bool = False) -> None:
        m = self.models
        if not self.client.collection_exists(name):
            sparse_config = {SPARSE: m.SparseVectorParams(modifier=m.Modifier.IDF)} if sparse else None
            if isinstance(dim, dict):
                vectors: Any = {n: m.VectorParams(size=d, distance=m.Distance.COSINE) for n, d in dim.items()}
            else:
                vectors = m.VectorParams(size=dim, distance=m.Distance.COSINE)
            self.client.create_collection(name, vectors_config=vectors,
                                          sparse_vectors_config=sparse_config, **self.options)
            for key in KEY_FIELDS if self.server else ():  # local mode has no payload indexes
                self.client.create_payload_index(name, key, m.PayloadSchemaType.KEYWORD)

    def _filter(self, where: Where | None, ids: Sequence[str] | None = None):
        if (where is None or (not where.must and not where.must_not)) and ids is None:
            return None
        m, where = self.models, where or Where()

        def match(value: Any):
            return m.MatchAny(any=list(value)) if isinstance(value, (list, tuple)) else m.MatchValue(value=value)

        must: list[Any] = [m.FieldCondition(key=key, match=match(v)) for key, v in where.must.items()]
        if ids is not None:
            must.append(m.HasIdCondition(has_id=list(ids)))
        return m.Filter(
            must=must or None,
            must_not=[m.FieldCondition(key=key, match=m.MatchAny(any=list(v))) for key, v in where.must_not.items() if v] or None,
        )

    def has_sparse(self, name: str) -> bool:
        if name not in self._has_sparse:
            if not self.client.collection_exists(name):
                return False
            self._has_sparse[name] = SPARSE in (self.client.get_collection(name).config.params.sparse_vectors or {})
        return self._has_sparse[name]

    def vectors(self, name: str) -> dict[str, int] | None:
        if not self.client.collection_exists(name):
            return None
        params = self.client.get_collection(name).config.params.vectors
        return {n: int(v.size) for n, v in params.items()} if isinstance(params, dict) else {"": int(params.size)}

    def _vector(self, dense: Dense, sparse: Sparse | None):
        named = dense if isinstance(dense, dict) else {"": dense}
        if sparse:
            return {**named, SPARSE: self.models.SparseVector(indices=sparse.indices, values=sparse.values)}
        return dense

    def get_vectors(self, name: str, ids: list[str], vector: str) -> dict[str, list[float] | None]:
        if not ids or not self.client.collection_exists(name):
            return {}
        found = {str(p.id): p.vector for p in self.client.retrieve(name, list(ids), with_payload=False, with_vectors=[vector])}
        return {pid: _named(found.get(pid), vector) for pid in ids}

    def set_vectors(self, name: str, vector: str, vectors: dict[str, list[float]]) -> int:
        if not vectors or not self.client.collection_exists(name):
            return 0
        alive = {str(p.id) for p in self.client.retrieve(name, list(vectors), with_payload=False, with_vectors=False)}
        points = [self.models.PointVectors(id=pid, vector={vector: v}) for pid, v in vectors.items() if pid in alive]
        if points:
            self.client.update_vectors(name, points=points)
        return len(points)

    def upsert(self, name: str, points: list[Point]) -> None:
        for i in range(0, len(points), 256):
            batch = [self.models.PointStruct(id=pid, vector=self._vector(dense, sparse), payload=p) for pid, dense, sparse, p in points[i : i + 256]]
            self.client.upsert(name, batch)

    def delete(self, name: str, where: Where) -> None:
        if self.client.collection_exists(name):
            self.client.delete(name, points_selector=self.models.FilterSelector(filter=self._filter(where)))

    def _payload(self, exclude: tuple[str, ...]):
        return self.models.PayloadSelectorExclude(exclude=list(exclude)) if exclude else True

    def query(self, name: str, vector: list[float], k: int, where: Where | None, exclude: tuple[str, ...] = (),
              sparse: Sparse | None = None, also: Sequence[Also] = (), using: str = "",
              ids: Sequence[str] | None = None) -> list[tuple[float, dict[str, Any]]]:
        if not self.client.collection_exists(name):
            return []
        m, filter_, using_ = self.models, self._filter(where, ids), using or None
        if sparse is None or not sparse.indices:
            result = self.client.query_points(name, query=vector, using=using_, limit=k, query_filter=filter_,
                                              with_payload=self._payload(exclude))
        else:
            depth = prefetch_depth(k)
            prefetch = [m.Prefetch(query=vector, using=using_, limit=depth, filter=filter_),
                        m.Prefetch(query=m.SparseVector(indices=sparse.indices, values=sparse.values), using=SPARSE, limit=depth, filter=filter_)]
            prefetch += [m.Prefetch(query=v, using=using_, limit=depth, filter=self._filter(w, ids)) for v, w in also]
            result = self.client.query_points(name, prefetch=prefetch, query=rrf_query(m), limit=k, query_filter=filter_,
                                              with_payload=self._payload(exclude))
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


def prefetch_depth(k: int) -> int:
    """Candidates each of the dense and BM25 searches hands to the fusion."""
    return max(4 * k, 50)


def rrf_query(models):
    """qdrant-client's RRF query with the same constant as Qdrant Edge (older clients: the server default)."""
    if hasattr(models, "RrfQuery"):
        return models.RrfQuery(rrf=models.Rrf(k=RRF_K))
    return models.FusionQuery(fusion=models.Fusion.RRF)


def _chunk_payload(chunk: Chunk, document: Document) -> dict[str, Any]:
    return {
        **chunk.model_dump(), "company_key": company_key(document.company),
        "doc_type_key": doc_type_key(document.doc_type), "periods": periods(document.period),
    }


@dataclass
class Recognised:
    """Company and period a query names, as the index spells them, and where the query names them."""

    company: str | None = None  # the company key (the first of `companies`)
    period: str | None = None
    terms: list[str] = field(default_factory=list)
    companies: list[str] = field(default_factory=list)  # every company key the name stands for ("Kimco": two entities)
    company_spans: list[tuple[int, int]] = field(default_factory=list)  # where the query names the company
    year_spans: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # year -> where the query names it


_YEAR = re.compile(r"\b(?:FY|fiscal(?: year)?\s*)?'?((?:19|20)\d\d)\b|\bFY\s?'?(\d\d)\b", re.I)


def query_years(query: str) -> list[str]:
    """Years a query names: '2022', 'FY2022', 'FY22', 'fiscal 2022'."""
    return [year for year, _ in _year_spans(query)]


def _year_spans(query: str) -> list[tuple[str, tuple[int, int]]]:
    return [(match[1] or f"20{match[2]}", match.span()) for match in _YEAR.finditer(query)]


_WORD = re.compile(r"[A-Za-z0-9&]+(?:['’][A-Za-z0-9&]+)*['’]?")


def _query_words(query: str) -> list[tuple[str, int, int, str]]:
    """(company-key spelling, start, end, as written) of each word: lower case, a possessive dropped ("Amcor's",
    "Express'")."""
    out = []
    for match in _WORD.finditer(query):
        written = match[0]
        bare = re.sub(r"['’]s?$", "", written)
        out.append((re.sub(r"['’]", "", bare.lower()), match.start(), match.end(), written))
    return out


def query_phrases(query: str) -> set[str]:
    """Runs of up to five consecutive words, joined as company keys are ('american express' -> 'americanexpress')."""
    words = [w for w, *_ in _query_words(query)]
    return {"".join(words[i : j]) for i in range(len(words)) for j in range(i + 1, min(i + 6, len(words) + 1))}


def query_tickers(query: str) -> list[str]:
    """Words a query may write as a trading symbol: two to five capitals ("JPM"; "FL" only so; not the word
    "A"), or three letters or more with a capital inside ("JnJ" for JNJ; never "key", "Key" or "all")."""
    return [word.upper() for word, _ in _ticker_spans(query)]


def _ticker_spans(query: str) -> list[tuple[str, tuple[int, int]]]:
    return [(m[0], m.span()) for m in re.finditer(r"\b[A-Za-z]{2,5}(?:\.[A-Z])?\b", query)
            if m[0].isupper() or (len(m[0]) >= 3 and not m[0].islower() and not m[0].istitle())]


def query_terms(query: str, terms: set[str]) -> list[str]:
    """The defined terms (of two words or more) a query names with their capitals ("Maturity Date" in
    "Kimco term loan Maturity Date", not "maturity date"; a plural names its singular), minus those
    inside a longer one it names."""
    words = re.findall(r"[\w&'’.-]+", query)
    named = {" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 2, min(i + 9, len(words) + 1))}
    named |= {phrase[:-1] for phrase in named if phrase.endswith("s")}  # "Restricted Payments": "Restricted Payment"
    found = sorted(named & terms, key=len, reverse=True)
    return [t for i, t in enumerate(found) if not any(re.search(rf"\b{re.escape(t)}\b", longer) for longer in found[:i])]


# First words too common to stand for a company on their own ("American" is not American Express).
_GENERIC = set("""
a an and the of for first american general national international global united new old north south east west
northern southern eastern western central pacific atlantic capital credit financial bank trust health home homes
realty properties commercial technology technologies systems services industries holdings group partners energy
royal standard great best premier advanced applied digital data power life lifetime stone point growth drug
host bird duck now runway jones smith key fair city state us usa""".split())


def name_variants(name: str | None) -> list[str]:
    """The names one company value holds: 'NOW Inc. / DNOW L.P.' -> both; 'RYAM Lux SARL (Rayonier Advanced
    Materials)' -> both."""
    if not name:
        return []
    inner = re.findall(r"\(([^)]*)\)", name)
    outer = re.sub(r"\([^)]*\)", " ", name)
    return [v.strip() for v in re.split(r"\s*/\s*|;", outer) + inner if v.strip()]


def aliases(name: str) -> dict[str, bool]:
    """Company-key spellings that name `name` in a query -> whether the alias is one word (those must be
    written with a capital). 'Duck Creek Technologies LLC' -> duckcreektechnologies, duckcreek, (duck: too
    common); 'Kimco Realty OP, LLC' -> kimcorealtyop, kimcorealty, kimco. Legal forms and a leading 'the'
    are dropped; a first word is an alias alone when it has four letters or more and is not a common word."""
    found: dict[str, bool] = {}
    for variant in name_variants(name):
        words = company_words(variant)
        words = words[1:] if len(words) > 1 and words[0] == "the" else words
        words = [w for w in words if w.replace("&", "")]
        if not words:
            continue
        found["".join(words)] = len(words) == 1
        for n in range(2, len(words)):
            found.setdefault("".join(words[:n]), False)
        first = words[0]
        if len(words) > 1 and (len(first) >= 4 or any(ch.isdigit() for ch in first)) and first not in _GENERIC:
            found.setdefault(first, True)
    return found


def alias_table(names: dict[str, set[str]]) -> dict[str, tuple[set[str], bool]]:
    """alias -> (the company keys it names, one word?), over the index's companies (key -> the names its
    documents give it: company values and "the Borrower" entities). A one-word alias shared by companies
    that do not share a two-word alias ("Kimco" for Kimco Realty Corporation and Kimco Realty OP) is dropped."""
    table: dict[str, tuple[set[str], bool]] = {}
    for key, spellings in names.items():
        for spelling in spellings:
            for alias, single in aliases(spelling).items():
                keys, was_single = table.get(alias, (set(), single))
                table[alias] = (keys | {key}, was_single and single)
    for alias, (keys, single) in list(table.items()):
        if single and len(keys) > 1 and not any(
                not one and other.startswith(alias) and other != alias and shared == keys for other, (shared, one) in table.items()):
            del table[alias]
    return table


@dataclass
class Search:
    """One query's vectors: dense, BM25, concept vectors; and the defined terms it names. Cascade: the full
    embedder's vectors of the same texts for the second stage."""

    vector: list[float]
    sparse: Sparse | None
    concepts: list[list[float]]
    terms: list[str]
    rerank: list[float] | None = None
    rerank_concepts: list[list[float]] = field(default_factory=list)


class Hits(list):
    """Search hits, best first; `notes` says what the search did that a caller should know (a recognised
    company with fewer hits than asked for, the index's embedder)."""

    def __init__(self, hits=(), notes: Sequence[str] = ()):
        super().__init__(hits)
        self.notes = list(notes)


@dataclass(frozen=True)
class Layout:
    """Which vectors an index holds. full: one dense vector per chunk from `model`; cascade: the static
    embedder distilled from `model` at ingest (FIRST), and `model`'s own vector (RERANK) written back the
    first time a search re-scores the chunk."""

    embed: str  # "full" | "cascade"
    model: str  # the embedder whose vectors rank (and that embeds the document summaries)

    @property
    def first(self) -> str:
        """The embedder of the first-stage dense vector."""
        return f"{STATIC_PREFIX}{self.model}" if self.embed == "cascade" else self.model

    @property
    def label(self) -> str:
        return f"cascade {self.first} > {self.model}" if self.embed == "cascade" else f"full {self.model}"

    @property
    def using(self) -> str:
        return FIRST if self.embed == "cascade" else ""


STATIC_PREFIX = "static:"
EMBEDDING = "embedding"  # a document record's layout label (which embedders made its vectors)


def layout_for(settings: IndexSettings) -> Layout:
    """The layout an ingest with these settings writes (a static embedding_model is already the cheap one:
    full, with nothing to re-rank with)."""
    embed = getattr(settings, "embed", "full")
    if settings.embedding_model.startswith(STATIC_PREFIX):
        embed = "full"
    return Layout(embed, settings.embedding_model)


class Index:
    """Chunks and documents of one index; hybrid (dense + BM25) chunk search, similar documents by summary."""

    def __init__(self, store: Store, settings: IndexSettings):
        from finmbs.ingest.embed import embedder

        self.store, self.settings = store, settings
        self.chunk_col = f"{settings.collection_prefix}_chunks"
        self.doc_col = f"{settings.collection_prefix}_documents"
        self.wanted = layout_for(settings)  # what an ingest writes
        self._layout: Layout | None = None  # what the index holds, once checked
        self._embedders: dict[str, Any] = {}
        device = getattr(settings, "device", "cpu")
        self._embedder_factory = lambda name: embedder(name, device)
        self._bm25 = None
        self._documents: dict[str, Document] = {}
        self._catalogue: dict[str, set[str]] | None = None
        self._tickers: dict[str, str] = {}
        self._names: dict[str, str] = {}  # company key -> the company's name as a document spells it
        self._aliases: dict[str, tuple[set[str], bool]] = {}
        self._terms: set[str] | None = None
        self._texts: dict[str, str] = {}  # doc id -> its text (small-to-big windows)
        self._doc_chunks: dict[str, list[Chunk]] = {}
        self._depth = 0  # nesting of `_held` operations
        self.rescored = 0  # chunks this process embedded with the full model at query time (cascade)

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    def _held(self):
        """One operation on the store: the embedded engine's shards are let go when the outermost one ends,
        so another process (a search, an ingest) gets its turn."""
        index = self

        class Held:
            def __enter__(self):
                index.store.turn().__enter__()
                index._depth += 1

            def __exit__(self, *exc):
                index._depth -= 1
                try:
                    if index._depth == 0:
                        index.store.release()
                finally:
                    index.store.turn().__exit__(*exc)

        return Held()

    # ------------------------------------------------------------------ embedders and layout

    def _model(self, name: str):
        if name not in self._embedders:
            self._embedders[name] = self._embedder_factory(name)
        return self._embedders[name]

    def held(self) -> tuple[Layout | None, dict[str, int]]:
        """(the layout the index's documents record, None for an empty index or one written before records
        named it; {label: documents} of what they record). One error when documents of two layouts are
        in it."""
        rows = self.store.scroll(self.doc_col, Where(), exclude=("text", "summary", "entities", TERMS))
        counts: dict[str, int] = {}
        for row in rows:
            label = row.get(EMBEDDING) or "not recorded (an older finmbs)"
            counts[label] = counts.get(label, 0) + 1
        recorded = {row[EMBEDDING]: (row.get("embed_mode"), row.get("embed_model")) for row in rows if row.get(EMBEDDING)}
        if len(counts) > 1:
            where = store_url(self.settings) or self.settings.path
            held = "; ".join(f"{n} documents {label}" for label, n in counts.items())
            raise ConfigError(f"index {where} mixes documents embedded two ways ({held}): one ranking never mixes "
                              "vectors of two embedders; re-ingest them all into a new --index-path", key="index.path")
        if len(recorded) == 1:
            mode, model = next(iter(recorded.values()))
            return Layout(mode, model), counts
        return None, counts

    @property
    def layout(self) -> Layout:
        """The layout searches use: what the index holds (checked once against the embedders' vector sizes), or
        for an empty index what an ingest writes."""
        if self._layout is None:
            with self._held():
                vectors = self.store.vectors(self.chunk_col)
                recorded, counts = self.held() if vectors else (None, {})
            where = store_url(self.settings) or self.settings.path
            if vectors is None:
                layout = self.wanted
            elif recorded is not None:
                layout = recorded
            else:  # written before documents recorded their embedder: its vector names tell full from cascade
                layout = Layout("cascade" if RERANK in vectors else "full", self.settings.embedding_model)
            if vectors is not None:
                sizes = {layout.using: self._model(layout.first).dim}
                if layout.embed == "cascade":
                    sizes[RERANK] = self._model(layout.model).dim
                if sizes != vectors:
                    shown = ", ".join(f"{n or 'dense'} {d}-dimensional" for n, d in vectors.items())
                    made = ", ".join(f"{n or 'dense'} {d}-dimensional" for n, d in sizes.items())
                    raise ConfigError(f"index {where} holds {shown} vectors ({', '.join(counts) or 'no documents'}), but "
                                      f"{layout.label} makes {made}: search with the embedder the index was built with "
                                      "(--set index.embedding_model=..., --set index.embed=...), or ingest into another "
                                      "--index-path", key="index.embedding_model")
            self._layout = layout
        return self._layout

    @property
    def embedder(self):
        """The embedder of the index's first-stage dense vectors (the index's embedder when full)."""
        return self._model(self.layout.first)

    @property
    def reranker(self):
        """The embedder whose vectors rank (and that embeds the document summaries)."""
        return self._model(self.layout.model)

    def upgrade_note(self) -> str | None:
        """What to do when the index was written another way than an ingest with the current settings
        would write it (None when the same)."""
        layout = self.layout
        if self.store.vectors(self.chunk_col) is None or layout == self.wanted:
            return None
        where = store_url(self.settings) or self.settings.path
        return (f"index {where} holds {layout.label} vectors; the settings would write {self.wanted.label}: it is "
                f"searched as it is (one embedder per ranking); to upgrade, ingest the same files with "
                f"--embed {self.wanted.embed} into a new --index-path")

    @property
    def bm25(self):
        """Qdrant's own BM25 tokenizer (English stemming and stop words); the same token ids as the server's."""
        if self._bm25 is None:
            import qdrant_edge as qe

            self._bm25 = qe.Bm25(qe.Bm25Config(language="english"))
        return self._bm25

    def sparse(self, text: str, *, query: bool) -> Sparse:
        vector = self.bm25.embed_query(text) if query else self.bm25.embed_document(text)
        return Sparse(list(vector.indices), list(vector.values))

    # ------------------------------------------------------------------ writing

    def add_document(self, document: Document, text: str, chunks: list[Chunk], chunk_texts: list[str], summary: str, batch_size: int = 64) -> None:
        """Embed and write a document's chunks (dense + BM25 vectors of `chunk_texts`; cascade: the static
        embedder's vector only), then the document itself with its summary vector (its presence marks the
        document complete)."""
        with self._held():
            layout = self.layout
            if layout != self.wanted:
                where = store_url(self.settings) or self.settings.path
                raise ConfigError(f"index {where} holds {layout.label} vectors; this ingest would write {self.wanted.label}: "
                                  f"ingest with --embed {layout.embed} (and index.embedding_model {layout.model}), or into "
                                  "another --index-path", key="index.embed")
            first = self.embedder
            vectors = first.encode(chunk_texts, batch_size=batch_size) if chunk_texts else []
            summary_vector = self.reranker.encode([summary])[0]
            dims: int | dict[str, int] = {FIRST: first.dim, RERANK: self.reranker.dim} if layout.embed == "cascade" else first.dim
            self.store.ensure(self.chunk_col, dims, sparse=True)
            self.store.ensure(self.doc_col, len(summary_vector))
            sparse = [self.sparse(t, query=False) for t in chunk_texts] if self.store.has_sparse(self.chunk_col) else [None] * len(chunks)
            dense: list[Dense] = [{FIRST: v} for v in vectors] if layout.embed == "cascade" else list(vectors)
            self.store.upsert(self.chunk_col, [(point_id(c.chunk_id), v, sv, _chunk_payload(c, document)) for c, v, sv in zip(chunks, dense, sparse)])
            payload = {**document.model_dump(), "text": text, "company_key": company_key(document.company),
                       "doc_type_key": doc_type_key(document.doc_type), "periods": periods(document.period),
                       TERMS: sorted({c.term for c in chunks if c.kind == "definition" and c.term}),
                       EMBEDDING: layout.label, "embed_mode": layout.embed, "embed_model": layout.model}
            self.store.upsert(self.doc_col, [(point_id(document.doc_id), summary_vector, None, payload)])
        self._forget(document.doc_id)

    def _forget(self, doc_id: str | None = None) -> None:
        if doc_id is None:
            self._documents.clear()
            self._texts.clear()
            self._doc_chunks.clear()
        else:
            for cache in (self._documents, self._texts, self._doc_chunks):
                cache.pop(doc_id, None)
        self._catalogue = self._terms = None

    def remove_source(self, source_path: str) -> None:
        """Delete every chunk and document that came from one source file."""
        where = Where(must={"source_path": source_path})
        with self._held():
            self.store.delete(self.doc_col, where)
            self.store.delete(self.chunk_col, where)
        self._forget()

    # ------------------------------------------------------------------ reading

    def documents(self, **must: Any) -> list[Document]:
        """Documents whose payload matches `must` (e.g. source_path=...), without their text."""
        with self._held():
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
        if doc_id not in self._texts:
            with self._held():
                rows = self.store.scroll(self.doc_col, Where(must={"doc_id": doc_id}))
            if not rows:
                raise KeyError(f"document '{doc_id}' is not in the index")
            self._texts[doc_id] = rows[0]["text"]
        return self._texts[doc_id]

    def chunks(self, doc_id: str) -> list[Chunk]:
        if doc_id not in self._doc_chunks:
            with self._held():
                rows = self.store.scroll(self.chunk_col, Where(must={"doc_id": doc_id}))
            self._doc_chunks[doc_id] = sorted((_chunk(row) for row in rows), key=lambda c: c.char_start or 0)
        return list(self._doc_chunks[doc_id])

    def catalogue(self) -> dict[str, set[str]]:
        """Company key -> the years of its documents, from the index's own document records; and the names
        that stand for each company (`alias_table`: its company values, "the Borrower" entities, their
        shorter forms) and the trading symbols its filings list."""
        if self._catalogue is None:
            self._catalogue, symbols, self._names = {}, {}, {}
            spellings: dict[str, set[str]] = {}
            for doc in self.documents():
                if key := company_key(doc.company):
                    self._catalogue.setdefault(key, set()).update(p for p in periods(doc.period) if re.fullmatch(r"\d{4}", p))
                    self._names.setdefault(key, doc.company)
                    spellings.setdefault(key, set()).update([doc.company or "", *doc.entities.get("borrower", [])])
                    for symbol in doc.entities.get("tickers", []):
                        symbols.setdefault(symbol, set()).add(key)
            self._tickers = {symbol: keys.pop() for symbol, keys in symbols.items() if len(keys) == 1}
            self._aliases = alias_table(spellings)
        return self._catalogue

    def terms(self) -> set[str]:
        """The terms the index's definition chunks define (from the document records; an index written
        before they listed their terms is read from its definition chunks)."""
        if self._terms is None:
            with self._held():
                rows = self.store.scroll(self.doc_col, Where(), exclude=("text",))
                if all(TERMS in row for row in rows):
                    self._terms = {t for row in rows for t in row[TERMS]}
                else:
                    chunks = self.store.scroll(self.chunk_col, Where(must={"kind": "definition"}), exclude=("text",))
                    self._terms = {row["term"] for row in chunks if row.get("term")}
        return self._terms

    def recognise(self, query: str) -> Recognised:
        """The company a query names (the longest of the index's company names and their aliases, else a
        trading symbol its filings list or an abbreviation of one company's name, "AMEX"), the year (only
        where that company has a document of that year; the latest year named wins) and defined terms,
        with where the query names them."""
        catalogue = self.catalogue()
        terms = query_terms(query, self.terms())
        words = _query_words(query)
        best: tuple[int, list[str], tuple[int, int]] | None = None
        for i in range(len(words)):
            for j in range(i + 1, min(i + 6, len(words) + 1)):
                phrase = "".join(w for w, *_ in words[i:j])
                found = self._aliases.get(phrase)
                if found is None:
                    continue
                keys, single = found
                if single and j - i == 1 and not _written_as_name(words, i, phrase):
                    continue
                if best is None or len(phrase) > best[0]:
                    best = (len(phrase), sorted(keys), (words[i][1], words[j - 1][2]))
        named: list[tuple[list[str], tuple[int, int]]] = [(best[1], best[2])] if best else []
        for word, span in _ticker_spans(query):
            if word.upper() in self._tickers:
                named.append(([self._tickers[word.upper()]], span))
            elif len(short := [key for key, name in self._names.items() if abbreviates(word, name)]) == 1:
                named.append((short, span))
        if not named:
            return Recognised(terms=terms)
        companies = named[0][0]
        spans = [span for keys, span in named if keys == companies]
        years: dict[str, list[tuple[int, int]]] = {}
        for year, span in _year_spans(query):
            if any(year in catalogue.get(key, ()) for key in companies):
                years.setdefault(year, []).append(span)
        period = max(years) if years else None
        return Recognised(company=companies[0], period=period, terms=terms, companies=companies, company_spans=spans,
                          year_spans=years)

    def search(self, query: str, k: int, *, exclude_doc_ids=(), doc_type: str | None = None, company: str | None = None,
               period: str | None = None, doc_id: str | None = None, hybrid: bool = True, metadata: bool = True,
               concepts: bool = True, per_page: int = 1, context_tokens: int | None = None) -> Hits:
        """Top-k chunks for a query: dense and BM25 candidates fused by RRF in Qdrant (`hybrid=False`: dense
        only), at most `per_page` hits from one PDF page (0: no limit), optionally excluding documents and
        filtering by company/type/period (or one document). With `metadata`, a company and year the query
        names (as the index spells them, or by an alias) filter the search when no company is given, and
        leave the text that ranks: the filter has chosen the documents, so "Kimco's" no longer pulls
        signature blocks and notice addresses up. When the filtered search has fewer than k hits the list
        is short and `notes` says so (a named year first widens to the company's other years). With
        `concepts` (hybrid only), a finance concept the query names ("quick ratio") adds the statement and
        line items that report it (`concepts.yaml`) to the BM25 query, and their dense search among table
        chunks to the fusion. A cascade index ranks the first stage's top `index.rerank_depth` candidates
        again with the full embedder, embedding (and writing back) those it meets for the first time.
        Each hit carries `context`: its enclosing table or section window, up to `context_tokens`
        (default `index.context_tokens`; 0: none)."""
        with self._held():
            return self._search(query, k, exclude_doc_ids=exclude_doc_ids, doc_type=doc_type, company=company, period=period,
                                doc_id=doc_id, hybrid=hybrid, metadata=metadata, concepts=concepts, per_page=per_page,
                                context_tokens=context_tokens)

    def _search(self, query, k, *, exclude_doc_ids, doc_type, company, period, doc_id, hybrid, metadata, concepts, per_page,
                context_tokens) -> Hits:
        notes: list[str] = []
        hybrid = hybrid and self.store.has_sparse(self.chunk_col)
        recognised = Recognised()
        if metadata:
            recognised = self.recognise(query) if not doc_id else Recognised(terms=query_terms(query, self.terms()))
        filtered_companies = [company_key(company)] if company else recognised.companies
        named_here = bool(recognised.companies) and (not company or company_key(company) in recognised.companies)
        use_period = period or (recognised.period if not company or named_here else None)
        strip = list(recognised.company_spans) if named_here else []
        if use_period and not period:
            strip += recognised.year_spans.get(use_period, [])
        ranking = ranking_text(query, strip)
        reported = expansion(query) if hybrid and concepts else ""
        search = self._vectors(ranking, reported, hybrid, recognised.terms)
        where = self._where(exclude_doc_ids, doc_type, filtered_companies, use_period, doc_id)
        hits = self._query(search, k, where, per_page)
        if len(hits) < k and recognised.companies and not company and not doc_id:
            name = self._names.get(recognised.company, recognised.company)
            if use_period and not period:
                seen = {h.chunk.chunk_id for h in hits}
                wider = self._where(exclude_doc_ids, doc_type, filtered_companies, None, None)
                hits += [h for h in self._query(search, k, wider, per_page) if h.chunk.chunk_id not in seen]
                notes.append(f"{len(hits)} hits in {name}'s documents of {use_period} and its other years")
            if len(hits) < k:
                notes.append(f"only {len(hits)} of {k} hits: the query names {name}, and its documents hold no more "
                             "(other companies' documents are not searched; --no-metadata searches all)")
        hits = _per_page(hits, per_page)[:k]
        budget = self.settings.context_tokens if context_tokens is None else context_tokens
        if budget:
            hits = [hit.model_copy(update={"context": self.context(hit.chunk, budget)}) for hit in hits]
        return Hits(hits, notes)

    def _vectors(self, ranking: str, reported: str, hybrid: bool, terms: list[str]) -> Search:
        texts = [ranking, reported] if reported else [ranking]
        vector, *concept = self.embedder.encode(texts)
        sparse = self.sparse(f"{ranking}\n{reported}", query=True) if hybrid else None
        search = Search(vector, sparse, concept, terms)
        if self.layout.embed == "cascade":
            search.rerank, *search.rerank_concepts = self.reranker.encode(texts)
        return search

    def _where(self, exclude_doc_ids, doc_type, companies, period, doc_id) -> Where:
        keys = [key for key in (companies or []) if key]
        must = {"company_key": (keys[0] if len(keys) == 1 else keys) if keys else None,
                "doc_type_key": doc_type_key(doc_type), "periods": period, "doc_id": doc_id}
        return Where(must={key: v for key, v in must.items() if v}, must_not={"doc_id": list(exclude_doc_ids)})

    def _also(self, search: Search, where: Where, rerank: bool) -> list[Also]:
        """The extra candidate lists of the fusion: the definitions of the terms the query names, and the
        tables nearest to its concept vectors (statements are tables)."""
        vector = search.rerank if rerank else search.vector
        also = [(vector, Where(must={**where.must, "kind": "definition", "term": list(search.terms)},
                               must_not=where.must_not))] if search.terms else []
        tables = Where(must={**where.must, "kind": "table"}, must_not=where.must_not)
        also += [(v, tables) for v in (search.rerank_concepts if rerank else search.concepts)]
        return also

    def _query(self, search: Search, k: int, where: Where, per_page: int) -> list[Hit]:
        """Top-k hits within `where` after the per-page limit (asking the store for more when pages
        repeat); the definitions of the search's terms, and the tables nearest its concept vectors, join
        the fusion. Cascade: the fusion over the static vectors picks `index.rerank_depth` candidates, and
        the same fusion over the full embedder's vectors, among those candidates only, ranks them."""
        limit = k * 3 if per_page else k
        layout = self.layout
        rows = self.store.query(self.chunk_col, search.vector, max(limit, self.settings.rerank_depth) if layout.embed == "cascade" else limit,
                                where, sparse=search.sparse, also=self._also(search, where, False), using=layout.using)
        if layout.embed == "cascade" and rows and search.rerank is not None:
            ids = [point_id(payload["chunk_id"]) for _, payload in rows]
            self._rescore([_chunk(payload) for _, payload in rows], ids)
            rows = self.store.query(self.chunk_col, search.rerank, limit, where, sparse=search.sparse,
                                    also=self._also(search, where, True), using=RERANK, ids=ids)
        hits = []
        for score, payload in rows:
            chunk = _chunk(payload)
            hits.append(Hit(chunk=chunk, score=score, document=self.document(chunk.doc_id)))
        return _per_page(hits, per_page)[:k]

    def _rescore(self, chunks: list[Chunk], ids: list[str]) -> None:
        """Make sure every candidate has the full embedder's vector: embed those that have none yet (the
        same text as an ingest with --embed full embeds) and write them back to their points."""
        from finmbs.ingest.embed import clipper, embedding_text

        have = self.store.get_vectors(self.chunk_col, ids, RERANK)
        missing = [(pid, chunk) for pid, chunk in zip(ids, chunks) if have.get(pid) is None]
        if not missing:
            return
        clip = clipper(self.layout.model)
        texts = [embedding_text(self.document(chunk.doc_id), chunk, clip) for _, chunk in missing]
        vectors = self.reranker.encode(texts)
        self.rescored += self.store.set_vectors(self.chunk_col, RERANK, {pid: v for (pid, _), v in zip(missing, vectors)})

    def context(self, chunk: Chunk, budget: int) -> Chunk:
        """Small-to-big: the hit's enclosing window of its document, up to `budget` tokens: a table chunk's
        whole table first (its row-split parts), then the neighbouring chunks of the same section (and PDF
        page), nearest first, as long as the window fits. The window is the stored document's exact text
        between its first and last chunk (offsets included), so it can be quoted verbatim."""
        if chunk.char_start is None or chunk.char_end is None or not chunk.doc_id:
            return chunk
        from finmbs.ingest.embed import token_counter

        count = token_counter(self.layout.model)
        siblings = [c for c in self.chunks(chunk.doc_id) if c.section_path == chunk.section_path and c.page == chunk.page
                    and c.char_start is not None and c.char_end is not None]
        at = next((i for i, c in enumerate(siblings) if c.chunk_id == chunk.chunk_id), None)
        if at is None:
            return chunk
        text = self.document_text(chunk.doc_id)
        lo = hi = at

        def size(a: int, b: int) -> int:
            return len(count(text[siblings[a].char_start : max(c.char_end for c in siblings[a : b + 1])]))

        if chunk.kind == "table":  # the whole table: its contiguous table parts
            while lo > 0 and siblings[lo - 1].kind == "table" and size(lo - 1, hi) <= budget:
                lo -= 1
            while hi + 1 < len(siblings) and siblings[hi + 1].kind == "table" and size(lo, hi + 1) <= budget:
                hi += 1
        grew = True
        while grew:
            grew = False
            for step in (-1, 1):  # before, then after: a caption above a table, a paragraph's continuation below
                a, b = (lo - 1, hi) if step < 0 else (lo, hi + 1)
                if 0 <= a and b < len(siblings) and size(a, b) <= budget:
                    lo, hi, grew = a, b, True
        if lo == hi:
            return chunk
        start, end = siblings[lo].char_start, max(c.char_end for c in siblings[lo : hi + 1])
        return chunk.model_copy(update={"text": text[start:end], "char_start": start, "char_end": end,
                                        "chunk_id": f"{chunk.chunk_id}#window"})

    def similar_documents(self, text: str, k: int, *, exclude_doc_ids=()) -> list[tuple[Document, float]]:
        """Top-k documents by summary vector (re-grounding: unseen documents like the seed's)."""
        with self._held():
            vector = self.reranker.encode([text])[0]
            rows = self.store.query(self.doc_col, vector, k, Where(must_not={"doc_id": list(exclude_doc_ids)}), exclude=("text",))
        return [(_document(payload), score) for score, payload in rows]


def _written_as_name(words: list[tuple[str, int, int, str]], i: int, alias: str) -> bool:
    """Whether the one word at `i` is written as a name: with a capital; and a common word ("Now" for NOW Inc.)
    as the query's first word or anywhere only in capitals throughout, or as a possessive."""
    _, start, end, written = words[i]
    if not written[:1].isupper() and not written[:1].isdigit():
        return False
    bare = re.sub(r"['’]s?$", "", written)
    if alias not in _GENERIC:
        return True
    return bare != written or (bare.isupper() and len(bare) > 1) or any(ch.isdigit() for ch in bare)


def ranking_text(query: str, spans: Sequence[tuple[int, int]]) -> str:
    """The query without the words that chose the filter (a company name with its possessive, a year): what
    ranks the chunks once the filter has chosen the documents. The query itself when nothing would be left."""
    if not spans:
        return query
    out, at = [], 0
    for start, end in sorted(spans):
        if start < at:
            continue
        out.append(query[at:start])
        at = end
        while at < len(query) and query[at] in "'’s" and query[at - 1] in "'’":  # "Kimco's": the possessive too
            at += 1
    out.append(query[at:])
    text = re.sub(r"\s+([?.!,;:])", r"\1", re.sub(r"\s{2,}", " ", "".join(out))).strip(" ,;")
    return text if re.search(r"\w", text) else query


def _per_page(hits: list[Hit], per_page: int) -> list[Hit]:
    """At most `per_page` hits from one page of one document (0: all); chunks without a page all count."""
    if not per_page:
        return hits
    taken: dict[tuple[str | None, int], int] = {}
    out = []
    for hit in hits:
        if hit.chunk.page is None:
            out.append(hit)
            continue
        key = (hit.chunk.doc_id, hit.chunk.page)
        if taken.get(key, 0) < per_page:
            taken[key] = taken.get(key, 0) + 1
            out.append(hit)
    return out


def _chunk(payload: dict[str, Any]) -> Chunk:
    return Chunk.model_validate({k: v for k, v in payload.items() if k in Chunk.model_fields})


def _document(payload: dict[str, Any]) -> Document:
    return Document.model_validate({k: v for k, v in payload.items() if k in Document.model_fields})


def store_url(settings: IndexSettings) -> str | None:
    """The Qdrant server/cluster URL of the settings (or QDRANT_URL); None for the embedded folder."""
    return settings.url or os.environ.get("QDRANT_URL")


def open_store(settings: IndexSettings) -> Store:
    """Qdrant server/cluster when `url` (or QDRANT_URL) is set, else the embedded Qdrant Edge folder."""
    url = store_url(settings)
    if url:
        api_key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
        return ClientStore(url=url, api_key=api_key, options=settings.collection_options())
    try:
        return EdgeStore(settings.path, lock_timeout_s=settings.lock_timeout_s)
    except OSError as exc:
        raise ConfigError(f"cannot open index folder {settings.path}: {exc}", key="index.path") from None


def open_index(settings: IndexSettings) -> Index:
    """The index named by the settings (see `open_store`)."""
    return Index(open_store(settings), settings)
