"""Re-grounding searches each unseen document for the seed's concept too (`stages.reground_concept`): the
concept named by `concepts.yaml` or, when no entry matches, by one teacher call (the scripted
OpenAI-speaking server plays the teacher); and a real index of shipped agreements, where the concept
finds the default-rate clause of an agreement the Brown-Forman seed passage alone does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from finmbs.config import IndexSettings
from finmbs.ingest import find_verbatim, ingest_paths, open_index
from finmbs.ingest.concepts import named_concept
from finmbs.llm import Gateway
from finmbs.mbs.context import Context
from finmbs.mbs.reground import CONCEPT_WORDS, EXCERPT_CHUNKS, document_chunks, fused, seed_concept
from finmbs.records import Chunk, Problem, Snippet
from finmbs.testing.world import world_config

ROOT = Path(__file__).resolve().parents[1]
FINANCE = ROOT / "corpora" / "finance"
DEFAULT_RATE = "default interest rate"


def shipped_seeds() -> dict[str, Problem]:
    return {
        p.id: p
        for path in sorted(FINANCE.glob("seeds*.jsonl"))
        for p in (Problem.model_validate_json(line) for line in path.read_text().splitlines() if line.strip())
    }


SEEDS = shipped_seeds()
BF = SEEDS["qs-bf-default-rate"]  # its passage quotes no defined term


def test_the_seed_concept_comes_from_concepts_yaml():
    for seed_id in (
        "qs-bf-default-rate",
        "qs-av-default-rate",
        "qs-ri-post-default-rate",
        "qs-bf-overdue-principal-rate",
    ):
        seed = SEEDS[seed_id]
        assert named_concept(seed.question, seed.snippet.text) == DEFAULT_RATE, seed_id
    # the question decides: Alphatec's default-rate passage also names the Required Lenders
    required = SEEDS["qs-al-required-lenders"]
    assert "required lenders" in named_concept(required.question, required.snippet.text)
    al = SEEDS["qs-al-default-rate"]
    assert "Required Lenders" in al.snippet.text and named_concept(al.question, al.snippet.text) == DEFAULT_RATE
    assert named_concept("What is 3M's quick ratio?") == "quick ratio"
    assert named_concept("Which state's law governs the agreement?", "governed by the laws of New York") is None
    # every shipped finance seed names a concept: none of them costs a teacher call
    unnamed = [s.id for s in SEEDS.values() if s.snippet and not named_concept(s.question, s.snippet.text)]
    assert not unnamed


async def test_a_seed_no_entry_names_is_named_by_one_teacher_call(tmp_path, openai_server):
    seed = Problem(
        id="gov-law",
        question="Under the agreement, which state's law governs it?",
        answer="New York",
        domain="finance",
        snippet=Snippet(text="THIS AGREEMENT SHALL BE GOVERNED BY THE LAW OF THE STATE OF NEW YORK.", doc_id="x"),
    )
    long_name = "governing law clause choosing the law of one state for the agreement and any dispute under it"
    openai_server.handler = lambda request: json.dumps({"provision": f'"{long_name}."'})
    cache = str(tmp_path / "cache.sqlite")
    for _ in range(2):
        config = world_config(openai_server.base_url, ["teacher"], ["student"], "target", cache)
        gateway = Gateway.from_config(config)
        try:
            concept = await seed_concept(Context(config=config, gateway=gateway), seed)
        finally:
            gateway.close()
        assert concept == " ".join(long_name.split()[:CONCEPT_WORDS])
    [request] = openai_server.requests  # the second run's ask was the gateway cache's
    assert "name the provision" in request.text.lower() and seed.snippet.text in request.text
    assert request.body.get("temperature") == 0.0

    off = world_config(openai_server.base_url, ["teacher"], ["student"], "target", cache, reground_concept=False)
    gateway = Gateway.from_config(off)
    try:
        assert await seed_concept(Context(config=off, gateway=gateway), seed) is None
    finally:
        gateway.close()
    assert len(openai_server.requests) == 1


async def test_an_unparseable_teacher_name_is_no_concept(tmp_path, openai_server):
    seed = Problem(id="x", question="What is it?", answer="1", domain="finance", snippet=Snippet(text="It is one."))
    openai_server.handler = lambda request: "I cannot say."
    config = world_config(openai_server.base_url, ["teacher"], ["student"], "target", str(tmp_path / "c.sqlite"))
    gateway = Gateway.from_config(config)
    try:
        assert await seed_concept(Context(config=config, gateway=gateway), seed) is None
    finally:
        gateway.close()


def test_fusion_puts_what_both_searches_find_first():
    a, b, c, d = (Chunk(chunk_id=i, doc_id="d", text=i) for i in "abcd")
    assert [x.chunk_id for x in fused([a, b, c], [d, b])] == ["b", "a", "d", "c"]


@pytest.fixture(scope="module")
def agreements(tmp_path_factory):
    """A real index of two shipped agreements the Brown-Forman seed is re-grounded on (not its own)."""
    docs = tmp_path_factory.mktemp("docs")
    for stem in UNSEEN:
        (docs / f"{stem}.txt").write_bytes((FINANCE / "docs" / f"{stem}.txt").read_bytes())
    settings = IndexSettings(path=str(tmp_path_factory.mktemp("index") / "qdrant"))
    report = ingest_paths([docs], settings, show_progress=False)
    assert report.documents == len(UNSEEN) and not report.failed
    with open_index(settings) as index:
        yield index


# each agreement's default interest clause, by words it alone uses
UNSEEN = {
    "alphatec_2023_credit_security_guaranty_agreement": "two percent (2.0%) per annum in excess of the rates "
    "otherwise payable under this Agreement",
    "realty_income_2023_term_loan_agreement": "the interest rate otherwise applicable to such Class of Loans plus "
    "an additional two percent (2.0%) per annum",
}


def shows(index, doc_id: str, chunks: list[Chunk]) -> bool:
    start, end = find_verbatim(UNSEEN[doc_id], index.document_text(doc_id))
    return any(c.char_start < end and start < c.char_end for c in chunks)


def test_the_concept_finds_the_default_rate_clause_the_passage_misses(agreements):
    missed = []
    for doc_id in UNSEEN:
        before = document_chunks(agreements, doc_id, BF.snippet.text, EXCERPT_CHUNKS)
        after = document_chunks(agreements, doc_id, BF.snippet.text, EXCERPT_CHUNKS, DEFAULT_RATE)
        assert shows(agreements, doc_id, after), doc_id
        assert {c.chunk_id for c in before} <= {c.chunk_id for c in after}  # nothing the passage found is lost
        assert len(after) <= EXCERPT_CHUNKS + EXCERPT_CHUNKS // 2
        missed += [doc_id] if not shows(agreements, doc_id, before) else []
    assert missed  # the passage alone misses at least one of them
