"""The document index: chunks and documents in separate collections of a vector store (`store`), the
full document text stored with each document so a passage can be proven verbatim; hybrid search with
the query's company and year as filters (`query`), the cascade re-ranking and small-to-big context.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from finmbs.config import ConfigError, IndexSettings
from finmbs.ingest.concepts import expansion
from finmbs.ingest.query import (
    Recognised,
    abbreviates,
    alias_table,
    company_key,
    doc_type_key,
    periods,
    possessive_names,
    query_terms,
    query_words,
    ranking_text,
    ticker_spans,
    written_as_name,
    year_spans,
)
from finmbs.ingest.statements import StatementQuery, StatementRegion, chunk_tags, statement_query
from finmbs.ingest.store import Also, Dense, Sparse, Store, Where, open_store, point_id, store_url
from finmbs.records import Chunk, Document, Record

TERMS = "terms"  # a document record's defined terms
FIRST = "static"  # cascade: the static embedder's dense vector, written at ingest
RERANK = "rerank"  # cascade: the full embedder's vector, written back the first time a search re-scores the chunk


class Hit(Record):
    """One retrieved chunk with its similarity score and its document."""

    chunk: Chunk
    score: float
    document: Document
    context: Chunk | None = None  # small-to-big: the enclosing table or section window (exact document text)
    statement: str | None = None  # the primary statement the chunk lies in (index.statements), e.g. balance_sheet


def _chunk_payload(chunk: Chunk, document: Document, statements: Sequence[StatementRegion] = ()) -> dict[str, Any]:
    return {
        **chunk.model_dump(),
        "company_key": company_key(document.company),
        "doc_type_key": doc_type_key(document.doc_type),
        "periods": periods(document.period),
        **chunk_tags(statements, chunk.char_start, chunk.char_end),
    }


STATEMENTS = "statements"  # a document record's primary statements with their line items (statements.py)
MAX_STATEMENT_LISTS = 3  # statements one query adds a candidate list for, at most


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
    statements: StatementQuery | None = None  # index.statements: the statements and line items the query names


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
        self._contested: dict[str, set[str]] = {}  # a name or symbol two companies claim -> their keys
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
        rows = self.store.scroll(self.doc_col, Where(), exclude=("text", "summary", "entities", TERMS, STATEMENTS))
        counts: dict[str, int] = {}
        for row in rows:
            label = row.get(EMBEDDING) or "not recorded (an older finmbs)"
            counts[label] = counts.get(label, 0) + 1
        recorded = {
            row[EMBEDDING]: (row.get("embed_mode"), row.get("embed_model")) for row in rows if row.get(EMBEDDING)
        }
        if len(counts) > 1:
            where = store_url(self.settings) or self.settings.path
            held = "; ".join(f"{n} documents {label}" for label, n in counts.items())
            raise ConfigError(
                f"index {where} mixes documents embedded two ways ({held}): one ranking never mixes "
                "vectors of two embedders; re-ingest them all into a new --index-path",
                key="index.path",
            )
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
                    raise ConfigError(
                        f"index {where} holds {shown} vectors ({', '.join(counts) or 'no documents'}), but "
                        f"{layout.label} makes {made}: search with the embedder the index was built with "
                        "(--set index.embedding_model=..., --set index.embed=...), or ingest into another "
                        "--index-path",
                        key="index.embedding_model",
                    )
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
        return (
            f"index {where} holds {layout.label} vectors; the settings would write {self.wanted.label}: it is "
            f"searched as it is (one embedder per ranking); to upgrade, ingest the same files with "
            f"--embed {self.wanted.embed} into a new --index-path"
        )

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

    def add_document(
        self,
        document: Document,
        text: str,
        chunks: list[Chunk],
        chunk_texts: list[str],
        summary: str,
        batch_size: int = 64,
        statements: Sequence[StatementRegion] = (),
    ) -> None:
        """Embed and write a document's chunks (dense + BM25 vectors of `chunk_texts`; cascade: the static
        embedder's vector only), then the document itself with its summary vector (its presence marks the
        document complete). `statements`: its primary statements; each chunk inside one is tagged with its
        kind and line items, and the document record keeps them with their rows."""
        with self._held():
            layout = self.layout
            if layout != self.wanted:
                where = store_url(self.settings) or self.settings.path
                raise ConfigError(
                    f"index {where} holds {layout.label} vectors; this ingest would write {self.wanted.label}: "
                    f"ingest with --embed {layout.embed} (and index.embedding_model {layout.model}), or into "
                    "another --index-path",
                    key="index.embed",
                )
            first = self.embedder
            vectors = first.encode(chunk_texts, batch_size=batch_size) if chunk_texts else []
            summary_vector = self.reranker.encode([summary])[0]
            dims: int | dict[str, int] = (
                {FIRST: first.dim, RERANK: self.reranker.dim} if layout.embed == "cascade" else first.dim
            )
            self.store.ensure(self.chunk_col, dims, sparse=True)
            self.store.ensure(self.doc_col, len(summary_vector))
            sparse = (
                [self.sparse(t, query=False) for t in chunk_texts]
                if self.store.has_sparse(self.chunk_col)
                else [None] * len(chunks)
            )
            dense: list[Dense] = [{FIRST: v} for v in vectors] if layout.embed == "cascade" else list(vectors)
            self.store.upsert(
                self.chunk_col,
                [
                    (point_id(c.chunk_id), v, sv, _chunk_payload(c, document, statements))
                    for c, v, sv in zip(chunks, dense, sparse)
                ],
            )
            payload = {
                **document.model_dump(),
                "text": text,
                "company_key": company_key(document.company),
                "doc_type_key": doc_type_key(document.doc_type),
                "periods": periods(document.period),
                TERMS: sorted({c.term for c in chunks if c.kind == "definition" and c.term}),
                STATEMENTS: [region.model_dump() for region in statements],
                EMBEDDING: layout.label,
                "embed_mode": layout.embed,
                "embed_model": layout.model,
            }
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
            rows = self.store.scroll(
                self.doc_col, Where(must={k: v for k, v in must.items() if v is not None}), exclude=("text", STATEMENTS)
            )
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

    def statements(self, doc_id: str) -> list[StatementRegion]:
        """A document's primary statements with their line items (page, offsets), as ingest read them."""
        with self._held():
            rows = self.store.scroll(self.doc_col, Where(must={"doc_id": doc_id}), exclude=("text",))
        return [StatementRegion.model_validate(r) for row in rows for r in row.get(STATEMENTS, [])]

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
                    self._catalogue.setdefault(key, set()).update(
                        p for p in periods(doc.period) if re.fullmatch(r"\d{4}", p)
                    )
                    self._names.setdefault(key, doc.company)
                    spellings.setdefault(key, set()).update([doc.company or "", *doc.entities.get("borrower", [])])
                    listed = doc.entities.get("tickers", [])
                    if self.settings.filing_aliases:  # the filing's own everyday names (aliases.py)
                        spellings[key].update(doc.entities.get("aliases", []))
                        listed = [*listed, *doc.entities.get("listed", [])]
                    for symbol in listed:
                        symbols.setdefault(symbol, set()).add(key)
            self._tickers = {symbol: next(iter(keys)) for symbol, keys in symbols.items() if len(keys) == 1}
            self._contested = {symbol.lower(): keys for symbol, keys in symbols.items() if len(keys) > 1}
            self._aliases = alias_table(spellings, self._contested)
        return self._catalogue

    def terms(self) -> set[str]:
        """The terms the index's definition chunks define (from the document records; an index written
        before they listed their terms is read from its definition chunks)."""
        if self._terms is None:
            with self._held():
                rows = self.store.scroll(self.doc_col, Where(), exclude=("text", STATEMENTS))
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
        words = query_words(query)
        best: tuple[int, list[str], tuple[int, int]] | None = None
        for i in range(len(words)):
            for j in range(i + 1, min(i + 6, len(words) + 1)):
                phrase = "".join(w for w, *_ in words[i:j])
                found = self._aliases.get(phrase)
                if found is None:
                    continue
                keys, single = found
                if single and j - i == 1 and not written_as_name(words, i, phrase):
                    continue
                if best is None or len(phrase) > best[0]:
                    best = (len(phrase), sorted(keys), (words[i][1], words[j - 1][2]))
        named: list[tuple[list[str], tuple[int, int]]] = [(best[1], best[2])] if best else []
        for word, span in ticker_spans(query):
            if word.upper() in self._tickers:
                named.append(([self._tickers[word.upper()]], span))
            elif len(short := [key for key, name in self._names.items() if abbreviates(word, name)]) == 1:
                named.append((short, span))
        contested = {  # names the query uses that two companies of the index claim: no filter (the search says so)
            re.sub(r"['’]s?$", "", words[i][3]): sorted(self._contested[word])
            for i, (word, *_) in enumerate(words)
            if word in self._contested and written_as_name(words, i, word)
        }
        if not named:
            return Recognised(terms=terms, contested=contested)
        companies = named[0][0]
        spans = [span for keys, span in named if keys == companies]
        years: dict[str, list[tuple[int, int]]] = {}
        for year, span in year_spans(query):
            if any(year in catalogue.get(key, ()) for key in companies):
                years.setdefault(year, []).append(span)
        period = max(years) if years else None
        return Recognised(
            company=companies[0],
            period=period,
            terms=terms,
            companies=companies,
            company_spans=spans,
            year_spans=years,
            contested=contested,
        )

    def company_keys(self, company: str) -> list[str]:
        """The index's companies an explicit company filter names: its own key where the index holds it, else
        the companies its words name as a query would (an alias, a ticker, "Alphatec" for "Alphatec Holdings,
        Inc."), else its key alone (which matches nothing, and the search says so)."""
        key = company_key(company)
        if key is None or key in self.catalogue():
            return [key] if key else []
        return self.recognise(company).companies or [key]

    def search(
        self,
        query: str,
        k: int,
        *,
        exclude_doc_ids=(),
        doc_type: str | None = None,
        company: str | None = None,
        period: str | None = None,
        doc_id: str | None = None,
        hybrid: bool = True,
        metadata: bool = True,
        concepts: bool = True,
        per_page: int = 1,
        context_tokens: int | None = None,
        context_scope: str | None = None,
    ) -> Hits:
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
        (default `index.context_tokens`; 0: none), within its section or its whole page (`context_scope`,
        default `index.context_scope`)."""
        with self._held():
            return self._search(
                query,
                k,
                exclude_doc_ids=exclude_doc_ids,
                doc_type=doc_type,
                company=company,
                period=period,
                doc_id=doc_id,
                hybrid=hybrid,
                metadata=metadata,
                concepts=concepts,
                per_page=per_page,
                context_tokens=context_tokens,
                context_scope=context_scope,
            )

    def _search(
        self,
        query,
        k,
        *,
        exclude_doc_ids,
        doc_type,
        company,
        period,
        doc_id,
        hybrid,
        metadata,
        concepts,
        per_page,
        context_tokens,
        context_scope,
    ) -> Hits:
        notes: list[str] = []
        hybrid = hybrid and self.store.has_sparse(self.chunk_col)
        recognised = Recognised()
        if metadata:
            recognised = self.recognise(query) if not doc_id else Recognised(terms=query_terms(query, self.terms()))
        filtered_companies = self.company_keys(company) if company else recognised.companies
        if company and not set(filtered_companies) & set(self.catalogue()):
            notes.append(f"no document of {company!r} in the index (its companies: {self._listed()})")
        elif metadata and not company and not doc_id and not recognised.companies:
            unknown = [
                n
                for n in possessive_names(query)
                if company_key(n) not in self.catalogue() and n not in recognised.contested
            ]
            if unknown:
                notes.append(
                    f"the query names {unknown[0]!r}, and no company of the index goes by that name (its companies: "
                    f"{self._listed()}): all documents were searched"
                )
        for name, keys in recognised.contested.items():
            if not recognised.companies:
                claimed = ", ".join(self._names.get(key, key) for key in keys)
                notes.append(f"{name!r} names more than one company of the index ({claimed}): not used to filter")
        named_here = bool(recognised.companies) and (
            not company or bool(set(filtered_companies) & set(recognised.companies))
        )
        use_period = period or (recognised.period if not company or named_here else None)
        strip = list(recognised.company_spans) if named_here else []
        if use_period and not period:
            strip += recognised.year_spans.get(use_period, [])
        ranking = ranking_text(query, strip)
        reported = expansion(query) if hybrid and concepts else ""
        search = self._vectors(ranking, reported, hybrid, recognised.terms)
        if hybrid and self.settings.statements:
            search.statements = statement_query(query, expansion(query) if concepts else "")
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
                notes.append(
                    f"only {len(hits)} of {k} hits: the query names {name}, and its documents hold no more "
                    "(other companies' documents are not searched; --no-metadata searches all)"
                )
        hits = _per_page(hits, per_page)[:k]
        budget = self.settings.context_tokens if context_tokens is None else context_tokens
        if budget:
            scope = context_scope or self.settings.context_scope
            hits = [hit.model_copy(update={"context": self.context(hit.chunk, budget, scope)}) for hit in hits]
        return Hits(hits, notes)

    def _listed(self) -> str:
        """The index's companies as its documents name them (the first 20)."""
        names = sorted(set(self._names.values()))
        return ", ".join(names[:20]) + (" ..." if len(names) > 20 else "")

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
        must = {
            "company_key": (keys[0] if len(keys) == 1 else keys) if keys else None,
            "doc_type_key": doc_type_key(doc_type),
            "periods": period,
            "doc_id": doc_id,
        }
        return Where(must={key: v for key, v in must.items() if v}, must_not={"doc_id": list(exclude_doc_ids)})

    def _also(self, search: Search, where: Where, rerank: bool) -> list[Also]:
        """The extra candidate lists of the fusion: the definitions of the terms the query names, and the
        tables nearest to its concept vectors (statements are tables)."""
        vector = search.rerank if rerank else search.vector
        also = (
            [
                (
                    vector,
                    Where(
                        must={**where.must, "kind": "definition", "term": list(search.terms)}, must_not=where.must_not
                    ),
                )
            ]
            if search.terms
            else []
        )
        tables = Where(must={**where.must, "kind": "table"}, must_not=where.must_not)
        also += [(v, tables) for v in (search.rerank_concepts if rerank else search.concepts)]
        asked = search.statements
        for kind in asked.kinds[:MAX_STATEMENT_LISTS] if asked else []:
            # one list per statement the query names or implies: its chunks holding the line items named there,
            # else all its chunks; a query naming two statements (EBITDA: income, cash flows) searches each
            items = {"line_items": asked.items[kind]} if asked.items.get(kind) else {}
            also.append((vector, Where(must={**where.must, "statement": kind, **items}, must_not=where.must_not)))
        return also

    def _query(self, search: Search, k: int, where: Where, per_page: int) -> list[Hit]:
        """Top-k hits within `where` after the per-page limit (asking the store for more when pages
        repeat); the definitions of the search's terms, and the tables nearest its concept vectors, join
        the fusion. Cascade: the fusion over the static vectors picks `index.rerank_depth` candidates, and
        the same fusion over the full embedder's vectors, among those candidates only, ranks them."""
        limit = k * 3 if per_page else k
        layout = self.layout
        rows = self.store.query(
            self.chunk_col,
            search.vector,
            max(limit, self.settings.rerank_depth) if layout.embed == "cascade" else limit,
            where,
            sparse=search.sparse,
            also=self._also(search, where, False),
            using=layout.using,
        )
        if layout.embed == "cascade" and rows and search.rerank is not None:
            ids = [point_id(payload["chunk_id"]) for _, payload in rows]
            self._rescore([_chunk(payload) for _, payload in rows], ids)
            rows = self.store.query(
                self.chunk_col,
                search.rerank,
                limit,
                where,
                sparse=search.sparse,
                also=self._also(search, where, True),
                using=RERANK,
                ids=ids,
            )
        hits = []
        for score, payload in rows:
            chunk = _chunk(payload)
            hits.append(
                Hit(chunk=chunk, score=score, document=self.document(chunk.doc_id), statement=payload.get("statement"))
            )
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
        self.rescored += self.store.set_vectors(
            self.chunk_col, RERANK, {pid: v for (pid, _), v in zip(missing, vectors)}
        )

    def context(self, chunk: Chunk, budget: int, scope: str = "section") -> Chunk:
        """Small-to-big: the hit's enclosing window of its document, up to `budget` tokens: a table chunk's
        whole table first (its row-split parts), then the neighbouring chunks of the same section (and PDF
        page; `scope` "page": of the same page, whatever their section), nearest first, as long as the
        window fits. The window is the stored document's exact text between its first and last chunk
        (offsets included), so it can be quoted verbatim."""
        if chunk.char_start is None or chunk.char_end is None or not chunk.doc_id:
            return chunk
        from finmbs.ingest.embed import token_counter

        count = token_counter(self.layout.model)
        siblings = [
            c
            for c in self.chunks(chunk.doc_id)
            if (scope == "page" or c.section_path == chunk.section_path)
            and c.page == chunk.page
            and c.char_start is not None
            and c.char_end is not None
        ]
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
        return chunk.model_copy(
            update={
                "text": text[start:end],
                "char_start": start,
                "char_end": end,
                "chunk_id": f"{chunk.chunk_id}#window",
            }
        )

    def similar_documents(self, text: str, k: int, *, exclude_doc_ids=()) -> list[tuple[Document, float]]:
        """Top-k documents by summary vector (re-grounding: unseen documents like the seed's)."""
        with self._held():
            vector = self.reranker.encode([text])[0]
            rows = self.store.query(
                self.doc_col, vector, k, Where(must_not={"doc_id": list(exclude_doc_ids)}), exclude=("text", STATEMENTS)
            )
        return [(_document(payload), score) for score, payload in rows]


def outermost(spans: Iterable[Chunk]) -> list[Chunk]:
    """The spans in their order, each one that lies inside an earlier one's offsets (same document) left
    out: small-to-big windows of several hits, with no text given twice (two hits of one table are one window)."""
    kept: list[Chunk] = []
    for span in spans:
        inside = any(
            w.doc_id == span.doc_id
            and None not in (w.char_start, span.char_start, w.char_end, span.char_end)
            and w.char_start <= span.char_start
            and span.char_end <= w.char_end
            for w in kept
        )
        if not inside:
            kept.append(span)
    return kept


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


def open_index(settings: IndexSettings) -> Index:
    """The index named by the settings (see `open_store`)."""
    return Index(open_store(settings), settings)


_SHARED: dict[str, list] = {}  # settings (as JSON) -> [the open index, how many users hold it]


@contextmanager
def shared_index(settings: IndexSettings) -> Iterator[Index]:
    """The index of `settings`, opened once per process while any user holds it (an embedded Qdrant Edge
    folder admits one opener at a time: the seeds of a run share one), closed when the last one lets go."""
    key = settings.model_dump_json()
    entry = _SHARED.setdefault(key, [None, 0])
    if entry[0] is None:
        entry[0] = open_index(settings)
    entry[1] += 1
    try:
        yield entry[0]
    finally:
        entry[1] -= 1
        if entry[1] == 0:
            _SHARED.pop(key)[0].close()
