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


SPARSE = "bm25"  # the sparse (BM25, IDF-weighted) vector of each chunk, next to the unnamed dense one
RRF_K = 60  # reciprocal-rank fusion constant (score = sum 1 / (RRF_K + rank))


@dataclass
class Sparse:
    """A sparse vector: token ids and weights."""

    indices: list[int]
    values: list[float]


Point = tuple[str, list[float], Sparse | None, dict[str, Any]]
Also = tuple[list[float], Where]  # one more dense candidate list for the fusion: its vector, its filter


class Store(ABC):
    """The few vector-store operations the index needs, per engine."""

    @abstractmethod
    def ensure(self, name: str, dim: int, sparse: bool = False) -> None:
        """Create the collection if missing: a dense vector, and with `sparse` a BM25 vector (IDF modifier)."""

    @abstractmethod
    def has_sparse(self, name: str) -> bool:
        """Whether the collection holds BM25 vectors (indexes built before hybrid search do not)."""

    @abstractmethod
    def dim(self, name: str) -> int | None:
        """The size of the collection's dense vectors; None when there is no such collection."""

    @abstractmethod
    def upsert(self, name: str, points: list[Point]) -> None: ...

    @abstractmethod
    def delete(self, name: str, where: Where) -> None: ...

    @abstractmethod
    def query(self, name: str, vector: list[float], k: int, where: Where | None, exclude: tuple[str, ...] = (),
              sparse: Sparse | None = None, also: Sequence[Also] = ()) -> list[tuple[float, dict[str, Any]]]:
        """Top-k points by the dense vector or, given `sparse`, by dense and BM25 candidates fused with
        reciprocal-rank fusion in one query (`prefetch` + RRF); each of `also` (hybrid only) adds one more
        candidate list to the fusion: the dense search for its vector within its filter."""

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
        self._has_sparse: dict[str, bool] = {}  # collection -> has BM25 vectors

    def _shard(self, name: str):
        if name not in self.shards:
            folder = self.path / name
            if not folder.is_dir():
                return None
            self.shards[name] = _busy_as_error(self.qe.EdgeShard.load, folder)
        return self.shards[name]

    def ensure(self, name: str, dim: int, sparse: bool = False) -> None:
        if self._shard(name) is None:
            qe = self.qe
            folder = self.path / name
            folder.parent.mkdir(parents=True, exist_ok=True)
            sparse_vectors = {SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)} if sparse else None
            config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine), sparse_vectors=sparse_vectors)
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

    def dim(self, name: str) -> int | None:
        config = self._config(name)
        return None if config is None else int(config["vectors"][""]["size"])

    def _vector(self, dense: list[float], sparse: Sparse | None):
        return {"": dense, SPARSE: self.qe.SparseVector(sparse.indices, sparse.values)} if sparse else dense

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
              sparse: Sparse | None = None, also: Sequence[Also] = ()) -> list[tuple[float, dict[str, Any]]]:
        if (shard := self._shard(name)) is None:
            return []
        qe, filter_ = self.qe, self._filter(where)
        if sparse is None or not sparse.indices:
            request = qe.QueryRequest(limit=k, query=qe.Query.Nearest(vector), filter=filter_, with_payload=self._payload(exclude))
        else:
            depth = prefetch_depth(k)
            prefetches = [qe.Prefetch(limit=depth, query=qe.Query.Nearest(vector), filter=filter_),
                          qe.Prefetch(limit=depth, query=qe.Query.Nearest(qe.SparseVector(sparse.indices, sparse.values), using=SPARSE), filter=filter_)]
            prefetches += [qe.Prefetch(limit=depth, query=qe.Query.Nearest(v), filter=self._filter(w)) for v, w in also]
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
        self._has_sparse: dict[str, bool] = {}  # collection -> has BM25 vectors
        self.client = QdrantClient(url=url, api_key=api_key) if url else QdrantClient(path=path)

    def ensure(self, name: str, dim: int, sparse: bool = False) -> None:
        m = self.models
        if not self.client.collection_exists(name):
            sparse_config = {SPARSE: m.SparseVectorParams(modifier=m.Modifier.IDF)} if sparse else None
            self.client.create_collection(name, vectors_config=m.VectorParams(size=dim, distance=m.Distance.COSINE),
                                          sparse_vectors_config=sparse_config, **self.options)
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

    def has_sparse(self, name: str) -> bool:
        if name not in self._has_sparse:
            if not self.client.collection_exists(name):
                return False
            self._has_sparse[name] = SPARSE in (self.client.get_collection(name).config.params.sparse_vectors or {})
        return self._has_sparse[name]

    def dim(self, name: str) -> int | None:
        if not self.client.collection_exists(name):
            return None
        return int(self.client.get_collection(name).config.params.vectors.size)

    def _vector(self, dense: list[float], sparse: Sparse | None):
        return {"": dense, SPARSE: self.models.SparseVector(indices=sparse.indices, values=sparse.values)} if sparse else dense

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
              sparse: Sparse | None = None, also: Sequence[Also] = ()) -> list[tuple[float, dict[str, Any]]]:
        if not self.client.collection_exists(name):
            return []
        m, filter_ = self.models, self._filter(where)
        if sparse is None or not sparse.indices:
            result = self.client.query_points(name, query=vector, limit=k, query_filter=filter_, with_payload=self._payload(exclude))
        else:
            depth = prefetch_depth(k)
            prefetch = [m.Prefetch(query=vector, limit=depth, filter=filter_),
                        m.Prefetch(query=m.SparseVector(indices=sparse.indices, values=sparse.values), using=SPARSE, limit=depth, filter=filter_)]
            prefetch += [m.Prefetch(query=v, limit=depth, filter=self._filter(w)) for v, w in also]
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
    """Company and period a query names, as the index spells them."""

    company: str | None = None
    period: str | None = None
    terms: list[str] = field(default_factory=list)


_YEAR = re.compile(r"\b(?:FY|fiscal(?: year)?\s*)?'?((?:19|20)\d\d)\b|\bFY\s?'?(\d\d)\b", re.I)


def query_years(query: str) -> list[str]:
    """Years a query names: '2022', 'FY2022', 'FY22', 'fiscal 2022'."""
    years = []
    for match in _YEAR.finditer(query):
        years.append(match[1] or f"20{match[2]}")
    return years


def query_phrases(query: str) -> set[str]:
    """Runs of up to five consecutive words, joined as company keys are ('american express' -> 'americanexpress')."""
    words = [re.sub(r"'s?$", "", w) for w in re.findall(r"[a-z0-9&']+", query.lower().replace("’", "'"))]  # Amcor's, Express'
    return {"".join(words[i : j]) for i in range(len(words)) for j in range(i + 1, min(i + 6, len(words) + 1))}


def query_tickers(query: str) -> list[str]:
    """Words a query may write as a trading symbol: two to five capitals ("JPM"; "FL" only so; not the word
    "A"), or three letters or more with a capital inside ("JnJ" for JNJ; never "key", "Key" or "all")."""
    return [word.upper() for word in re.findall(r"\b[A-Za-z]{2,5}(?:\.[A-Z])?\b", query)
            if word.isupper() or (len(word) >= 3 and not word.islower() and not word.istitle())]


def query_terms(query: str, terms: set[str]) -> list[str]:
    """The defined terms (of two words or more) a query names with their capitals ("Maturity Date" in
    "Kimco term loan Maturity Date", not "maturity date"; a plural names its singular), minus those
    inside a longer one it names."""
    words = re.findall(r"[\w&'’.-]+", query)
    named = {" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 2, min(i + 9, len(words) + 1))}
    named |= {phrase[:-1] for phrase in named if phrase.endswith("s")}  # "Restricted Payments": "Restricted Payment"
    found = sorted(named & terms, key=len, reverse=True)
    return [t for i, t in enumerate(found) if not any(re.search(rf"\b{re.escape(t)}\b", longer) for longer in found[:i])]


@dataclass
class Search:
    """One query's vectors: dense, BM25, concept vectors; and the defined terms it names."""

    vector: list[float]
    sparse: Sparse | None
    concepts: list[list[float]]
    terms: list[str]


class Index:
    """Chunks and documents of one index; hybrid (dense + BM25) chunk search, similar documents by summary."""

    def __init__(self, store: Store, settings: IndexSettings):
        from finmbs.ingest.embed import embedder

        self.store, self.settings = store, settings
        self.chunk_col = f"{settings.collection_prefix}_chunks"
        self.doc_col = f"{settings.collection_prefix}_documents"
        self._embedder = None
        self._embedder_factory = lambda: embedder(settings.embedding_model)
        self._bm25 = None
        self._documents: dict[str, Document] = {}
        self._catalogue: dict[str, set[str]] | None = None
        self._tickers: dict[str, str] = {}
        self._names: dict[str, str] = {}  # company key -> the company's name as a document spells it
        self._terms: set[str] | None = None

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    @property
    def embedder(self):
        """The index's embedder; one error when the index was built with vectors of another size."""
        if self._embedder is None:
            model = self._embedder_factory()
            built = self.store.dim(self.chunk_col)
            if built is not None and built != model.dim:
                where = store_url(self.settings) or self.settings.path
                raise ConfigError(f"index {where} holds {built}-dimensional vectors, but index.embedding_model "
                                  f"'{self.settings.embedding_model}' makes {model.dim}: search with the embedder the "
                                  "index was built with, or ingest into another --index-path", key="index.embedding_model")
            self._embedder = model
        return self._embedder

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
        """Embed and write a document's chunks (dense + BM25 vectors of `chunk_texts`), then the document
        itself with its summary vector (its presence marks the document complete)."""
        vectors = self.embedder.encode(chunk_texts, batch_size=batch_size) if chunk_texts else []
        summary_vector = self.embedder.encode([summary])[0]
        dim = len(summary_vector)
        self.store.ensure(self.chunk_col, dim, sparse=True)
        self.store.ensure(self.doc_col, dim)
        sparse = [self.sparse(t, query=False) for t in chunk_texts] if self.store.has_sparse(self.chunk_col) else [None] * len(chunks)
        self.store.upsert(self.chunk_col, [(point_id(c.chunk_id), v, sv, _chunk_payload(c, document)) for c, v, sv in zip(chunks, vectors, sparse)])
        payload = {**document.model_dump(), "text": text, "company_key": company_key(document.company),
                   "doc_type_key": doc_type_key(document.doc_type), "periods": periods(document.period),
                   TERMS: sorted({c.term for c in chunks if c.kind == "definition" and c.term})}
        self.store.upsert(self.doc_col, [(point_id(document.doc_id), summary_vector, None, payload)])
        self._documents.pop(document.doc_id, None)
        self._catalogue = self._terms = None

    def remove_source(self, source_path: str) -> None:
        """Delete every chunk and document that came from one source file."""
        where = Where(must={"source_path": source_path})
        self.store.delete(self.doc_col, where)
        self.store.delete(self.chunk_col, where)
        self._documents.clear()
        self._catalogue = self._terms = None

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

    def catalogue(self) -> dict[str, set[str]]:
        """Company key -> the years of its documents, from the index's own document records."""
        if self._catalogue is None:
            self._catalogue, symbols, self._names = {}, {}, {}
            for doc in self.documents():
                if key := company_key(doc.company):
                    self._catalogue.setdefault(key, set()).update(p for p in periods(doc.period) if re.fullmatch(r"\d{4}", p))
                    self._names.setdefault(key, doc.company)
                    for symbol in doc.entities.get("tickers", []):
                        symbols.setdefault(symbol, set()).add(key)
            self._tickers = {symbol: keys.pop() for symbol, keys in symbols.items() if len(keys) == 1}
        return self._catalogue

    def terms(self) -> set[str]:
        """The terms the index's definition chunks define (from the document records; an index written
        before they listed their terms is read from its definition chunks)."""
        if self._terms is None:
            rows = self.store.scroll(self.doc_col, Where(), exclude=("text",))
            if all(TERMS in row for row in rows):
                self._terms = {t for row in rows for t in row[TERMS]}
            else:
                chunks = self.store.scroll(self.chunk_col, Where(must={"kind": "definition"}), exclude=("text",))
                self._terms = {row["term"] for row in chunks if row.get("term")}
        return self._terms

    def recognise(self, query: str) -> Recognised:
        """The company (longest key among the index's companies, else a trading symbol its filings list or an
        abbreviation of one company's name, "AMEX"), year and defined terms a query names, if any; the year
        only where that company has a document of that year (the latest year named wins)."""
        catalogue = self.catalogue()
        terms = query_terms(query, self.terms())
        named = sorted((key for key in query_phrases(query) if key in catalogue), key=len, reverse=True)
        for word in query_tickers(query):
            if word in self._tickers:
                named.append(self._tickers[word])
            elif len(short := [key for key, name in self._names.items() if abbreviates(word, name)]) == 1:
                named += short
        if not named:
            return Recognised(terms=terms)
        company = named[0]
        years = [y for y in query_years(query) if y in catalogue[company]]
        return Recognised(company=company, period=max(years) if years else None, terms=terms)

    def search(self, query: str, k: int, *, exclude_doc_ids=(), doc_type: str | None = None, company: str | None = None,
               period: str | None = None, doc_id: str | None = None, hybrid: bool = True, metadata: bool = True,
               concepts: bool = True, per_page: int = 1) -> list[Hit]:
        """Top-k chunks for a query: dense and BM25 candidates fused by RRF in Qdrant (`hybrid=False`: dense
        only), at most `per_page` hits from one PDF page (0: no limit), optionally excluding documents and
        filtering by company/type/period (or one document). With `metadata`, a company and year the query
        names (as the index spells them) filter the search when no company is given; hits outside the
        filter fill up the list when it has fewer than k. With `concepts` (hybrid only), a finance concept
        the query names ("quick ratio") adds the statement and line items that report it (`concepts.yaml`)
        to the BM25 query, and their dense search among table chunks to the fusion."""
        where = self._where(exclude_doc_ids, doc_type, company, period, doc_id)
        hybrid = hybrid and self.store.has_sparse(self.chunk_col)
        reported = expansion(query) if hybrid and concepts else ""
        vector, *concept = self.embedder.encode([query, reported] if reported else [query])
        sparse = self.sparse(f"{query}\n{reported}", query=True) if hybrid else None
        recognised = Recognised()
        if metadata:
            recognised = self.recognise(query) if not (company or doc_id) else Recognised(terms=query_terms(query, self.terms()))
        search = Search(vector, sparse, concept, recognised.terms)
        hits: list[Hit] = []
        if recognised.company:
            narrow = self._where(exclude_doc_ids, doc_type, recognised.company, period or recognised.period, None)
            hits = self._query(search, k, narrow, per_page)
        if len(hits) < k:
            seen = {h.chunk.chunk_id for h in hits}
            hits += [h for h in self._query(search, k, where, per_page) if h.chunk.chunk_id not in seen]
        return _per_page(hits, per_page)[:k]

    def _where(self, exclude_doc_ids, doc_type, company, period, doc_id) -> Where:
        must = {"company_key": company_key(company), "doc_type_key": doc_type_key(doc_type), "periods": period, "doc_id": doc_id}
        return Where(must={key: v for key, v in must.items() if v}, must_not={"doc_id": list(exclude_doc_ids)})

    def _query(self, search: Search, k: int, where: Where, per_page: int) -> list[Hit]:
        """Top-k hits within `where` after the per-page limit (asking the store for more when pages
        repeat); the definitions of the search's terms, and the tables nearest its concept vectors, join
        the fusion."""
        limit = k * 3 if per_page else k
        also = [(search.vector, Where(must={**where.must, "kind": "definition", "term": list(search.terms)},
                                      must_not=where.must_not))] if search.terms else []
        tables = Where(must={**where.must, "kind": "table"}, must_not=where.must_not)  # statements are tables
        also += [(v, tables) for v in search.concepts]
        hits = []
        for score, payload in self.store.query(self.chunk_col, search.vector, limit, where, sparse=search.sparse, also=also):
            chunk = _chunk(payload)
            hits.append(Hit(chunk=chunk, score=score, document=self.document(chunk.doc_id)))
        return _per_page(hits, per_page)[:k]

    def similar_documents(self, text: str, k: int, *, exclude_doc_ids=()) -> list[tuple[Document, float]]:
        """Top-k documents by summary vector (re-grounding: unseen documents like the seed's)."""
        vector = self.embedder.encode([text])[0]
        rows = self.store.query(self.doc_col, vector, k, Where(must_not={"doc_id": list(exclude_doc_ids)}), exclude=("text",))
        return [(_document(payload), score) for score, payload in rows]


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
        return EdgeStore(settings.path)
    except OSError as exc:
        raise ConfigError(f"cannot open index folder {settings.path}: {exc}", key="index.path") from None


def open_index(settings: IndexSettings) -> Index:
    """The index named by the settings (see `open_store`)."""
    return Index(open_store(settings), settings)
