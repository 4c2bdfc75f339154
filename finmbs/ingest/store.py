"""The vector stores under the index: one interface over two Qdrant engines.

Engine: a server or cluster (`url`) goes through qdrant-client; the embedded default is Qdrant Edge
(`qdrant-edge-py`), chosen by measurement (bench/bench_retrieval.py: filtered search on the same
vectors is far faster than qdrant-client's local mode, which scans numpy arrays in Python).
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finmbs.config import ConfigError, IndexSettings

_NAMESPACE = uuid.UUID("6f1d2c4e-8a7b-4c3d-9e2f-0a1b2c3d4e5f")
KEY_FIELDS = (
    "doc_id",
    "source_path",
    "company_key",
    "doc_type_key",
    "periods",
    "kind",
    "term",
    "statement",  # the primary statement a chunk lies in (`statements.py`)
    "line_items",  # the line items of its rows
)


def point_id(key: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, key))


@dataclass
class Where:
    """A payload filter: `must` key == value (a list: any of), `must_not` key in values."""

    must: dict[str, Any] = field(default_factory=dict)
    must_not: dict[str, list[Any]] = field(default_factory=dict)


SPARSE = "bm25"  # the sparse (BM25, IDF-weighted) vector of each chunk, next to the dense one(s)
RRF_K = 60  # reciprocal-rank fusion constant (score = sum 1 / (RRF_K + rank))


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

    def release(self) -> None:  # noqa: B027 (optional: a server store holds nothing to release)
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
    def query(
        self,
        name: str,
        vector: list[float],
        k: int,
        where: Where | None,
        exclude: tuple[str, ...] = (),
        sparse: Sparse | None = None,
        also: Sequence[Also] = (),
        using: str = "",
        ids: Sequence[str] | None = None,
    ) -> list[tuple[float, dict[str, Any]]]:
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
        raise ConfigError(
            f"index {folder.parent} is busy: another process has it open outside finmbs's index lock; "
            "wait for it to finish, then rerun",
            key="index.path",
        ) from None


LOCK_FILE = ".finmbs-index.lock"  # held (exclusive) by the process whose turn it is
WANT_FILE = ".finmbs-index.want"  # held (shared) by each process waiting for its turn
# One probe of the want file at a time in this process: a probe holds the file exclusively for a moment,
# so two of this process's probes at once (the idle watcher's and an operation's release) would each
# read the other as another process waiting, and give the index up in the middle of this process's work.
_PROBING = threading.Lock()


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
                        raise ConfigError(
                            f"index {self.path} is busy: another finmbs process kept it for more than "
                            f"{self.lock_timeout_s:g} s (index.lock_timeout_s); wait for it to finish, then rerun",
                            key="index.path",
                        ) from None
                    time.sleep(0.01)
        finally:
            want.close()  # drops the shared lock
        self._lock = handle
        self._watch()

    def wanted(self) -> bool:
        """Whether another process waits for its turn at the index."""
        import fcntl

        with _PROBING, open(self.path / WANT_FILE, "a+") as probe:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(probe, fcntl.LOCK_UN)
        return False

    def _watch(self) -> None:
        """A daemon thread that gives the index up while this process is idle and another one waits."""
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
            must_not=[qe.FieldCondition(key, match=qe.MatchAny(list(v))) for key, v in where.must_not.items() if v]
            or None,
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
            batch = [
                self.qe.Point(pid, self._vector(dense, sparse), payload)
                for pid, dense, sparse, payload in points[i : i + 256]
            ]
            self.shards[name].update(self.qe.UpdateOperation.upsert_points(batch))

    def delete(self, name: str, where: Where) -> None:
        if (shard := self._shard(name)) is not None:
            shard.update(self.qe.UpdateOperation.delete_points_by_filter(self._filter(where)))

    def _payload(self, exclude: tuple[str, ...]):
        return self.qe.PayloadSelector.Exclude(list(exclude)) if exclude else True

    def query(
        self,
        name: str,
        vector: list[float],
        k: int,
        where: Where | None,
        exclude: tuple[str, ...] = (),
        sparse: Sparse | None = None,
        also: Sequence[Also] = (),
        using: str = "",
        ids: Sequence[str] | None = None,
    ) -> list[tuple[float, dict[str, Any]]]:
        if (shard := self._shard(name)) is None:
            return []
        qe, filter_, using_ = self.qe, self._filter(where, ids), using or None
        if sparse is None or not sparse.indices:
            request = qe.QueryRequest(
                limit=k,
                query=qe.Query.Nearest(vector, using=using_),
                filter=filter_,
                with_payload=self._payload(exclude),
            )
        else:
            depth = prefetch_depth(k)
            prefetches = [
                qe.Prefetch(limit=depth, query=qe.Query.Nearest(vector, using=using_), filter=filter_),
                qe.Prefetch(
                    limit=depth,
                    query=qe.Query.Nearest(qe.SparseVector(sparse.indices, sparse.values), using=SPARSE),
                    filter=filter_,
                ),
            ]
            prefetches += [
                qe.Prefetch(limit=depth, query=qe.Query.Nearest(v, using=using_), filter=self._filter(w, ids))
                for v, w in also
            ]
            request = qe.QueryRequest(
                limit=k,
                prefetches=prefetches,
                query=qe.Fusion.Rrf(k=RRF_K),
                filter=filter_,
                with_payload=self._payload(exclude),
            )
        return [(p.score, p.payload or {}) for p in shard.query(request)]

    def scroll(self, name: str, where: Where, exclude: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        if (shard := self._shard(name)) is None:
            return []
        out, offset = [], None
        while True:
            request = self.qe.ScrollRequest(
                offset=offset, limit=512, filter=self._filter(where), with_payload=self._payload(exclude)
            )
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

    def __init__(
        self,
        url: str | None = None,
        path: str | None = None,
        api_key: str | None = None,
        options: dict[str, int] | None = None,
    ):
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
            self.client.create_collection(
                name, vectors_config=vectors, sparse_vectors_config=sparse_config, **self.options
            )
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
            must_not=[
                m.FieldCondition(key=key, match=m.MatchAny(any=list(v))) for key, v in where.must_not.items() if v
            ]
            or None,
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
        found = {
            str(p.id): p.vector
            for p in self.client.retrieve(name, list(ids), with_payload=False, with_vectors=[vector])
        }
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
            batch = [
                self.models.PointStruct(id=pid, vector=self._vector(dense, sparse), payload=p)
                for pid, dense, sparse, p in points[i : i + 256]
            ]
            self.client.upsert(name, batch)

    def delete(self, name: str, where: Where) -> None:
        if self.client.collection_exists(name):
            self.client.delete(name, points_selector=self.models.FilterSelector(filter=self._filter(where)))

    def _payload(self, exclude: tuple[str, ...]):
        return self.models.PayloadSelectorExclude(exclude=list(exclude)) if exclude else True

    def query(
        self,
        name: str,
        vector: list[float],
        k: int,
        where: Where | None,
        exclude: tuple[str, ...] = (),
        sparse: Sparse | None = None,
        also: Sequence[Also] = (),
        using: str = "",
        ids: Sequence[str] | None = None,
    ) -> list[tuple[float, dict[str, Any]]]:
        if not self.client.collection_exists(name):
            return []
        m, filter_, using_ = self.models, self._filter(where, ids), using or None
        if sparse is None or not sparse.indices:
            result = self.client.query_points(
                name, query=vector, using=using_, limit=k, query_filter=filter_, with_payload=self._payload(exclude)
            )
        else:
            depth = prefetch_depth(k)
            prefetch = [
                m.Prefetch(query=vector, using=using_, limit=depth, filter=filter_),
                m.Prefetch(
                    query=m.SparseVector(indices=sparse.indices, values=sparse.values),
                    using=SPARSE,
                    limit=depth,
                    filter=filter_,
                ),
            ]
            prefetch += [m.Prefetch(query=v, using=using_, limit=depth, filter=self._filter(w, ids)) for v, w in also]
            result = self.client.query_points(
                name,
                prefetch=prefetch,
                query=rrf_query(m),
                limit=k,
                query_filter=filter_,
                with_payload=self._payload(exclude),
            )
        return [(p.score, p.payload or {}) for p in result.points]

    def scroll(self, name: str, where: Where, exclude: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        if not self.client.collection_exists(name):
            return []
        out, offset = [], None
        while True:
            records, offset = self.client.scroll(
                name, scroll_filter=self._filter(where), limit=512, offset=offset, with_payload=self._payload(exclude)
            )
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
