"""`finmbs seeds mine` against a real Qdrant Edge index (MiniLM vectors) of real credit agreements, with the
scripted finance world on the real OpenAI-compatible server playing teacher, judge and target: every
keep / reject rule, the run folder, resume, bad input, and `finmbs grow` reading the mined seeds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import RunConfig, dump_config
from finmbs.ingest import ingest_paths, open_index
from finmbs.llm import GatewayError
from finmbs.mine.company import document_company
from finmbs.mine.passages import TYPES, plan, strong_figures
from finmbs.mine.questions import MinedQuestion, Options, locate_evidence, short_name
from finmbs.mine.run import MineError, run_mine
from finmbs.records import Document
from finmbs.runs import read_jsonl
from finmbs.runs.grow import run_grow
from finmbs.seeds import load_seeds
from finmbs.testing.finance_world import FinanceWorld
from finmbs.testing.server import Reply
from finmbs.testing.world import Agent, world_config

BF, CMC, HOST = (
    "brown_forman_2023_credit_agreement",
    "commercial_metals_2022_sixth_ar_credit_agreement",
    "host_hotels_2023_sixth_ar_credit_agreement",
)
NOTICES = "acme_notices_agreement"
NO_FIGURES = """CREDIT AGREEMENT
dated as of the date hereof
among
ACME WIDGETS, INC.,
as Borrower
ARTICLE I NOTICES
Section 1.01 Notices. All notices and other communications provided for herein shall be in writing and shall be
delivered by hand or overnight courier service, mailed by certified or registered mail or sent by telecopy.
Section 1.02 Counterparts. This Agreement may be executed in counterparts, each of which shall constitute an
original, but all of which when taken together shall constitute a single contract.
"""


@pytest.fixture(scope="module")
def settings(agreements_built, tmp_path_factory):
    from conftest import agreements_copy

    base = tmp_path_factory.mktemp("mine-index")
    built = agreements_copy(agreements_built, base)
    extra = base / "extra"
    extra.mkdir(exist_ok=True)
    (extra / f"{NOTICES}.txt").write_text(NO_FIGURES, encoding="utf-8")
    report = ingest_paths([extra], built, show_progress=False)
    assert not report.failed, report.skipped
    return built


def config_for(
    server,
    tmp_path: Path,
    settings,
    *,
    target: Agent | None = None,
    relabel: bool = False,
    concurrency: int = 4,
    **knobs,
) -> RunConfig:
    """The world's roles (teacher, student, target; the teacher judges), the test index, N=4."""
    server.handler = FinanceWorld(
        agents={"teacher": Agent(), "student": Agent(), "target": target or Agent(capacity=1)}, **knobs
    )
    config = world_config(
        server.base_url,
        ["teacher"],
        ["student"],
        "target",
        str(tmp_path / "cache.sqlite"),
        N=4,
        Nt=2,
        relabel=relabel,
        Kd=2,
    )
    config = config.model_copy(update={"index": settings, "domain": "finance", "seed_concurrency": concurrency})
    # the teacher writes question, answer and evidence (mine.from_facts off; tests/test_mine_facts.py has it on)
    return config.model_copy(update={"mine": config.mine.model_copy(update={"from_facts": False})})


def mine(
    config: RunConfig,
    tmp_path: Path,
    documents: list[str],
    *,
    per_document: int = 4,
    types=TYPES,
    hard_only: bool = False,
    eval_data=None,
    run: str = "run",
    evidence: str = "quote",
):
    out = tmp_path / f"{run}.jsonl"
    options = Options(per_document=per_document, types=list(types), hard_only=hard_only, evidence=evidence)
    metrics = asyncio.run(run_mine(config, options, out, tmp_path / run, documents=documents, eval_data=eval_data))
    rejected = list(read_jsonl(tmp_path / run / "rejected.jsonl"))
    return metrics, out, rejected


def checks(rejected: list[dict]) -> list[str]:
    return [row["data"]["check"] for row in rejected]


# passages and companies, no model ------------------------------------------------------------------
def full_agreement(stem: str):
    """(Document, text, chunks) of a whole shared agreement, parsed and chunked as ingest does (no vectors)."""
    from conftest import SHARED_DATA

    from finmbs.config import IndexSettings
    from finmbs.ingest.pipeline import prepare

    path = SHARED_DATA / "credit_agreements" / "docs" / f"{stem}.txt"
    if not path.is_file():
        pytest.skip(f"shared agreement not found at {path}")
    [prepared] = prepare(path, IndexSettings())
    return Document(doc_id=stem, source_path=str(path), sha256="-"), prepared.parsed.text, prepared.chunks


def test_passages_hold_figures_and_are_verbatim():
    doc, text, chunks = full_agreement(BF)
    planned = plan(doc, text, chunks, 8, list(TYPES))
    assert len(planned) == 8 and {kind for kind, _ in planned} == set(TYPES)
    for _, passage in planned:
        for part in passage.parts:
            assert text[part.char_start : part.char_end] == part.text  # verbatim by construction
        assert strong_figures(passage.text)  # a percentage, an amount or a ratio to ask about
        assert "By: Name:" not in passage.text and passage.parts[0].char_start < text.find("IN WITNESS WHEREOF")
    # the pricing grid of the Applicable Rate comes whole, its categories with their margins
    assert any("Applicable Rate" in p.text and "0.625%" in p.text for _, p in planned)
    starts = [p.parts[0].char_start for _, p in planned if len(p.parts) == 1]
    assert len(starts) == len(set(starts))  # no passage twice


def test_cross_passage_pairs_a_definition_with_the_provision_using_it():
    doc, text, chunks = full_agreement(BF)
    planned = plan(doc, text, chunks, 2, ["cross_passage"])
    assert planned
    for kind, passage in planned:
        assert kind == "cross_passage" and len(passage.parts) == 2 and passage.term
        definition, provision = passage.parts
        assert definition.text.lstrip('“" ').startswith(passage.term) and passage.term in provision.text
        assert "has the meaning" not in definition.text and strong_figures(provision.text)
    # asked for cross-passage questions only, a document without a pair gets none (no other type instead)
    blank = Document(doc_id="x", source_path="x", sha256="-")
    assert plan(blank, text, [c for c in chunks if c.kind != "definition"], 2, ["cross_passage"]) == []


def test_evidence_is_located_inside_the_cited_passage():
    doc, text, chunks = full_agreement(BF)
    [(_, passage)] = plan(doc, text, chunks, 1, ["lookup"])
    grid = passage.parts[0]
    row = "Category 2 A+/A1/A+ 0.625%"
    assert row in grid.text
    found, why = locate_evidence([row.replace(" ", "\n  "), "“Term SOFR Margin”"], passage, text, chunks)
    assert why is None and [q["text"] for q in found] == [row, "“Term SOFR Margin”"]
    assert all(grid.char_start <= q["char_start"] < q["char_end"] <= grid.char_end for q in found)
    assert found[0]["section_path"] == grid.section_path
    assert "not verbatim" in locate_evidence([row.replace("0.625%", "0.650%")], passage, text, chunks)[1]
    # a definition quoted without the spaced curly quotes around its term: every word and figure is the document's
    found, why = locate_evidence(
        ["Applicable Rate means, for any day, with respect to any Term SOFR Loan"], passage, text, chunks
    )
    assert why is None and found[0]["text"].startswith("Applicable Rate ” means, for any day")
    assert "not verbatim" in locate_evidence(["Applicable Rate means, for each day"], passage, text, chunks)[1]
    elsewhere = "IN WITNESS WHEREOF"
    assert "outside the cited passage" in locate_evidence([elsewhere], passage, text, chunks)[1]
    assert "under two words" in locate_evidence(["0.625%"], passage, text, chunks)[1]


def test_template_quotes_are_no_evidence_and_names_are_short():
    reply = {
        "question": "Under Acme's agreement, what is the margin?",
        "solution": "The grid gives 2.00%.",
        "answer": "2.00%",
    }
    with pytest.raises(ValueError, match="placeholder"):  # the 1.5B copied the reply template's quote
        MinedQuestion.model_validate({**reply, "evidence": ["<a piece of the passage, copied exactly>"]})
    kept = MinedQuestion.model_validate({**reply, "evidence": ["<a piece of the passage>", "Margin 2.00%"]})
    assert kept.evidence == ["Margin 2.00%"]
    assert list(MinedQuestion.model_json_schema()["properties"])[0] == "evidence"
    assert short_name("AMAZON.COM, INC.") == "Amazon" and short_name("Brown-Forman Corporation") == "Brown-Forman"
    assert short_name("Host Hotels & Resorts, L.P.") == "Host Hotels & Resorts"


def test_document_company_from_the_opening(settings):
    blank = Document(doc_id="x", source_path="x", sha256="x")
    assert document_company(blank, NO_FIGURES) == "Acme Widgets, Inc."
    assert (
        document_company(blank.model_copy(update={"company": "Brown-Forman Corporation"}), "")
        == "Brown-Forman Corporation"
    )
    with open_index(settings) as index:
        names = {d: document_company(index.document(d), index.document_text(d)) for d in (BF, CMC, HOST)}
    assert names == {
        BF: "Brown-Forman Corporation",
        CMC: "Commercial Metals Company",
        HOST: "Host Hotels & Resorts, L.P.",
    }
    assert document_company(blank, "Section 1. Notices shall be in writing.") is None


# kept seeds ----------------------------------------------------------------------------------------
def test_kept_seeds_are_verbatim_named_verified_and_measured(tmp_path, openai_server, settings):
    config = config_for(openai_server, tmp_path, settings)
    metrics, out, rejected = mine(config, tmp_path, [BF, HOST])
    seeds = [json.loads(line) for line in out.read_text().splitlines()]
    assert metrics.kept == len(seeds) >= 4 and metrics.documents_done == 2
    assert metrics.candidates == sum(metrics.candidates_by_type.values()) == metrics.kept + len(rejected)
    assert set(metrics.kept_by_type) >= {"lookup", "one_step", "multi_step"}
    with open_index(settings) as index:
        for seed in seeds:
            doc = seed["snippet"]["doc_id"]
            text = index.document_text(doc)
            assert set(seed) == {"id", "question", "answer", "domain", "entity", "snippet", "meta"}
            assert seed["domain"] == "finance" and seed["entity"].split()[0].lower() in seed["question"].lower()
            for quote in seed["meta"]["evidence"]:
                assert text[quote["char_start"] : quote["char_end"]] == quote["text"]
                assert quote["text"] in seed["snippet"]["text"] and quote["section_path"] is not None
            measured = seed["meta"]["measured"]
            assert measured["n"] == 4 and measured["policy"] == "target"
            # the target (capacity 1) solves the one-operation questions, fails the two-operation ones
            assert measured["k"] == (0 if seed["meta"]["type"] in ("multi_step", "cross_passage") else 4)
    assert metrics.hard == sum(s["meta"]["type"] in ("multi_step", "cross_passage") for s in seeds)
    # grow's reader takes the file as it is
    loaded = load_seeds(out)
    assert [p.id for p in loaded] == [s["id"] for s in seeds]
    assert all(p.domain == "finance" and p.snippet.doc_id and p.snippet.source_path for p in loaded)
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert summary["kept"] == len(seeds) and summary["tokens_per_kept"] > 0


def test_hard_only_keeps_what_the_target_fails(tmp_path, openai_server, settings):
    config = config_for(openai_server, tmp_path, settings)
    metrics, out, rejected = mine(config, tmp_path, [BF, HOST], hard_only=True)
    seeds = load_seeds(out)
    assert seeds and all(p.meta["measured"]["k"] == 0 for p in seeds)
    assert {p.meta["type"] for p in seeds} <= {"multi_step", "cross_passage"}
    solved = [r for r in rejected if r["data"]["check"] == "not_hard"]
    assert solved and all(r["problem"]["meta"]["measured"]["k"] == 4 for r in solved)
    assert metrics.calibrated == metrics.kept + len(solved) and metrics.hard == metrics.kept


# every rejection rule, counted -------------------------------------------------------------------------
def test_a_wrong_answer_without_programs_is_unverified_by_the_traces(tmp_path, openai_server, settings):
    config = config_for(openai_server, tmp_path, settings, mine_wrong={"Host Hotels"})
    config = config.model_copy(update={"verify": config.verify.model_copy(update={"programs": False})})
    metrics, out, rejected = mine(config, tmp_path, [HOST], per_document=2, types=["multi_step"])
    assert checks(rejected) == ["verify"] * 2 and metrics.kept == 0
    assert not any("program" in r["problem"]["meta"] for r in rejected)


@pytest.mark.parametrize(
    "knob, check",
    [
        ("mine_misquote", "evidence"),  # a quoted figure altered: not verbatim in the document
        ("mine_anonymous", "entity"),  # "the borrower": not answerable out of context
        ("mine_wrong", "program"),  # the stated answer is off by one: its program computes another (verify.programs)
        ("mine_invent", "judge"),  # a figure found nowhere: the judge finds the passage does not answer it
        ("mine_repeat", "novelty"),  # the same question again: a restatement
    ],
)
def test_each_bad_candidate_is_a_counted_rejection(tmp_path, openai_server, settings, knob, check):
    config = config_for(openai_server, tmp_path, settings, **{knob: {"Host Hotels"}})
    metrics, out, rejected = mine(config, tmp_path, [HOST, BF], per_document=3, types=["multi_step"])
    kept = load_seeds(out)
    asked = json.loads((tmp_path / "run" / "documents" / f"{HOST}.json").read_text())["candidates"]
    assert asked == ["multi_step"] * 3
    host = [r for r in rejected if r["problem"]["snippet"]["doc_id"] == HOST]
    if check == "novelty":  # the first is kept, the same question again is not
        assert checks(host) == ["novelty"] * 2 and metrics.kept_by_document[HOST] == 1
    else:
        assert checks(host) == [check] * 3 and metrics.kept_by_document[HOST] == 0
    assert all(r["reason"] and r["stage"] == "mine" and r["data"]["type"] == "multi_step" for r in host)
    assert metrics.rejected_by_check[check] >= len(host)
    assert metrics.kept_by_document[BF] >= 1 and all(p.snippet.doc_id == BF for p in kept if not p.id.startswith(HOST))


def test_selected_lines_are_verbatim_evidence(tmp_path, openai_server, settings):
    config = config_for(openai_server, tmp_path, settings, mine_misquote={"Brown-Forman"})
    metrics, out, rejected = mine(config, tmp_path, [HOST, BF], per_document=2, types=["multi_step"], evidence="select")
    asked = [r.text for r in openai_server.requests if "a set of hard finance questions" in r.text]
    assert asked and all("<passage>\n[1] " in t and "numbers of the passage's lines" in t for t in asked)
    seeds = load_seeds(out)
    assert [p.snippet.doc_id for p in seeds] == [HOST, HOST]
    with open_index(settings) as index:
        text = index.document_text(HOST)
        for seed in seeds:
            for quote in seed.meta["evidence"]:
                assert (
                    text[quote["char_start"] : quote["char_end"]] == quote["text"]
                    and quote["text"] in seed.snippet.text
                )
    assert checks(rejected) == ["evidence", "evidence"] and "names no line of the passage" in rejected[0]["reason"]


def test_contaminated_question_rejected(tmp_path, openai_server, settings):
    config = config_for(openai_server, tmp_path, settings)
    _, out, _ = mine(config, tmp_path, [BF], per_document=2, types=["multi_step"], run="first")
    question = load_seeds(out)[0].question
    eval_file = tmp_path / "evalset.jsonl"
    eval_file.write_text(json.dumps({"id": "e1", "question": question}) + "\n")
    metrics, out, rejected = mine(
        config, tmp_path, [BF], per_document=2, types=["multi_step"], eval_data=[eval_file], run="second"
    )
    hit = next(r for r in rejected if r["problem"]["question"] == question)
    assert hit["data"]["check"] == "contaminated" and "evalset e1" in hit["reason"]
    assert question not in [p.question for p in load_seeds(out)] if metrics.kept else True


def test_document_without_a_usable_passage_is_counted(tmp_path, openai_server, settings):
    config = config_for(openai_server, tmp_path, settings)
    metrics, out, rejected = mine(config, tmp_path, [NOTICES, HOST], per_document=2)
    assert checks(rejected) == ["no_passage"] and metrics.documents_without_passage == 1
    assert metrics.kept_by_document == {NOTICES: 0, HOST: 2} and metrics.documents_done == 2


def test_unparseable_reply_is_counted(tmp_path, openai_server, settings):
    config = config_for(openai_server, tmp_path, settings)
    world = openai_server.handler

    def handler(request):
        if "a set of hard finance questions" in request.messages[0]["content"]:  # the repair re-ask too
            return Reply(texts=['{"evidence": ["oops'])
        return world(request)

    openai_server.handler = handler
    metrics, _, rejected = mine(config, tmp_path, [BF], per_document=2, types=["lookup"])
    assert checks(rejected) == ["reply", "reply"] and metrics.kept == 0


# bad input -----------------------------------------------------------------------------------------
def test_missing_or_empty_index_and_unknown_names_are_one_error(tmp_path, openai_server, settings):
    config = config_for(openai_server, tmp_path, settings)
    missing = config.model_copy(update={"index": settings.model_copy(update={"path": str(tmp_path / "nowhere")})})
    with pytest.raises(MineError, match="index not found at .*nowhere"):
        mine(missing, tmp_path, [])
    (tmp_path / "empty").mkdir()
    empty = config.model_copy(update={"index": settings.model_copy(update={"path": str(tmp_path / "empty")})})
    with pytest.raises(MineError, match="holds no documents"):
        mine(empty, tmp_path, [], run="run2")
    with pytest.raises(MineError, match="not in the index.*no_such_doc"):
        mine(config, tmp_path, ["no_such_doc"], run="run3")
    with pytest.raises(MineError, match="unknown question type"):
        mine(config, tmp_path, [BF], types=["riddle"], run="run4")
    assert openai_server.request_count == 0


def test_cli_mines_and_reports(tmp_path, openai_server, settings, monkeypatch):
    config = config_for(openai_server, tmp_path, settings)
    path = tmp_path / "config.yaml"
    path.write_text(dump_config(config))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    args = [
        "seeds",
        "mine",
        "--config",
        str(path),
        "--index-path",
        settings.path,
        "--out",
        "mined.jsonl",
        "--document",
        HOST,
        "--per-document",
        "2",
        "--types",
        "lookup,multi_step",
        "--eval-data",
        str(path.parent / "none"),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "evaluation data not found" in result.output  # a bad --eval-data: one line
    result = runner.invoke(app, args[:-2])
    assert result.exit_code == 0, result.output
    assert "kept seeds" in result.output and "ETA" in result.output
    assert len(load_seeds(tmp_path / "mined.jsonl")) == 2 and (tmp_path / "runs" / "mine-mined" / "done").is_dir()
    result = runner.invoke(app, [*args[:5], str(tmp_path / "nowhere"), *args[6:-2]])
    assert result.exit_code == 2 and "index not found" in result.output and "Traceback" not in result.output


# resume ----------------------------------------------------------------------------------------------
def test_a_failed_run_resumes_where_it_stopped(tmp_path, openai_server, settings):
    config = config_for(openai_server, tmp_path, settings, concurrency=1)
    world = openai_server.handler

    def broken(request):  # the model is down for Commercial Metals' questions
        if "a set of hard finance questions" in request.text and "Host Hotels" in request.text:
            return Reply(status=400)
        return world(request)

    openai_server.handler = broken
    with pytest.raises(GatewayError):
        mine(config, tmp_path, [BF, HOST])
    run = tmp_path / "run"
    assert (run / "done" / BF).exists() and not (run / "done" / HOST).exists()
    first = load_seeds(tmp_path / "run.jsonl")
    assert first and {p.snippet.doc_id for p in first} == {BF}  # finished work is in the seeds file already
    openai_server.handler = world
    openai_server.reset()
    metrics, out, _ = mine(config, tmp_path, [BF, HOST])
    asked = [r.text for r in openai_server.requests if "a set of hard finance questions" in r.text]
    assert asked and not any("Brown-Forman" in t for t in asked)  # the finished document is not asked again
    assert metrics.documents_done == 2 and [p.id for p in load_seeds(out)][: len(first)] == [p.id for p in first]
    # a rerun asking for other questions is refused, not mixed in
    with pytest.raises(Exception, match="other options"):
        mine(config, tmp_path, [BF, HOST], per_document=2)


# grow reads the output -----------------------------------------------------------------------------
def test_grow_reads_the_mined_seeds_as_they_are(tmp_path, openai_server, settings):
    config = config_for(openai_server, tmp_path, settings)
    _, out, _ = mine(config, tmp_path, [HOST], per_document=2, types=["multi_step"], hard_only=True)
    seeds = load_seeds(out)
    assert len(seeds) == 2
    openai_server.handler.agents["student"] = Agent(capacity=1)  # the weakest student fails the root: decompose
    grow_config = config.model_copy(update={"stages": config.stages.model_copy(update={"extract": "retrieve"})})
    metrics = asyncio.run(run_grow(grow_config, seeds, tmp_path / "grow"))
    assert metrics.seeds_in == 2 and metrics.seeds_with_trace == 2
    assert metrics.decompositions_attempted > 0
    assert yaml.safe_load((tmp_path / "grow" / "config.yaml").read_text())["domain"] == "finance"


# stopping ---------------------------------------------------------------------------------------------
STUCK_IN_PLANNING = """
import importlib.util, runpy, sys
spec = importlib.util.spec_from_file_location("bench_figures", sys.argv.pop(1))
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
from finmbs.mine import passages
from finmbs.verify.finance import figures

def stuck(text):  # passage scoring meets text the old figure pattern took minutes over
    print("planning", file=sys.stderr, flush=True)
    with bench.old_pattern():
        figures("dated as of\\n\\n" + " " * 60 + "September 26, 1995\\n\\n" + " " * 60)
    return []

passages.strong_figures = stuck
sys.argv[0] = "finmbs"
runpy.run_module("finmbs.cli", run_name="__main__")
"""


def test_sigterm_stops_mining_inside_passage_planning_and_a_rerun_finishes(
    tmp_path, openai_server, settings, monkeypatch
):
    """SIGTERM while `seeds mine` is inside one long text match (before any model call) ends the run
    within seconds with exit 130; the same command then mines the document."""
    import signal
    import subprocess
    import sys
    import time

    from finmbs.runs.grow import STOP_GRACE_S

    config = tmp_path / "config.yaml"
    config.write_text(dump_config(config_for(openai_server, tmp_path, settings)))
    args = ["seeds", "mine", "--config", str(config), "--index-path", str(settings.path)]
    args += [
        "--out",
        str(tmp_path / "mined.jsonl"),
        "--document",
        BF,
        "--per-document",
        "2",
        "--types",
        "lookup,multi_step",
    ]
    script = tmp_path / "stuck.py"
    script.write_text(STUCK_IN_PLANNING)
    bench = Path(__file__).resolve().parents[1] / "bench" / "bench_figures.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(bench), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,  # the run folder (runs/mine-mined) goes there
    )
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.strip() == "planning":
                break
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=STOP_GRACE_S + 20)
    finally:
        proc.kill()
    assert time.monotonic() - sent < STOP_GRACE_S + 5
    assert proc.returncode == 130 and "interrupted" in out + err, "".join(seen) + out + err
    assert openai_server.request_count == 0  # stopped before any model call

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    seeds = load_seeds(tmp_path / "mined.jsonl")
    assert seeds and {p.snippet.doc_id for p in seeds if p.snippet} == {BF}
    assert (tmp_path / "runs" / "mine-mined" / "done" / BF).exists()
