"""verify.programs in the engine, end to end through the scripted world on a real HTTP server: the
decision rule (program vs stated answer vs traces, relabel on/off), composition by child functions,
counted rejections, `finmbs verify FILE`, export rows, leakage rule 5 reading quotes, and the paper
profile (programs off: prompts and reply schemas exactly as without the layer)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import load_config
from finmbs.export.rows import training_row
from finmbs.export.trl import trl_row
from finmbs.llm import Gateway
from finmbs.mbs.context import Context, Ledger, in_stage
from finmbs.mbs.decompose import decompose
from finmbs.mbs.labels import check_labels
from finmbs.mbs.leakage import Grounding
from finmbs.mbs.programs import composed_parent, program_node, reexecute_all
from finmbs.records import Problem, Snippet, TreeNode
from finmbs.resources import resource_dir
from finmbs.runs import read_jsonl
from finmbs.runs.grow import run_grow
from finmbs.testing.world import PROGRAM_MARKER, TASK_MARKERS, Agent, World, world_config
from finmbs.verify.program import run_program

SEED = Problem(id="a", question="Compute (2 + 3) * (4 + 1).", answer="25")


def setup(server, tmp_path, world: World, *, teacher: Agent | None = None, **stages):
    world.agents = {"teacher": teacher or Agent(), "target": Agent(), "s": Agent(capacity=1, boost=2)}
    server.handler = world
    config = world_config(
        server.base_url, ["teacher"], ["s"], "target", str(tmp_path / "cache.sqlite"), **{"Nd": 0, "N": 4, **stages}
    )
    return Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "cache.sqlite")))


async def decomposed(server, tmp_path, world: World, **kw) -> tuple[TreeNode, Ledger]:
    ctx = setup(server, tmp_path, world, **kw)
    root, ledger = TreeNode(problem=SEED, path="0"), Ledger("a")
    await decompose(ctx, root, ledger)
    return root, ledger


async def test_right_programs_verify_and_are_recorded(tmp_path, openai_server):
    root, ledger = await decomposed(openai_server, tmp_path, World(agents={}))
    assert ledger.rejected == [] and len(root.children) == 3
    for child in root.children:
        meta = child.problem.meta
        assert meta["program"].startswith("answer = ") and meta["program_answer"] == child.problem.answer
        assert child.decisions[0].reason == "answer verified by its program and teacher"
        assert "relabeled_from" not in meta
    asked = [r for r in openai_server.requests if "easier, independent" in r.text]
    assert PROGRAM_MARKER in asked[0].text and "ends by binding the variable answer" in asked[0].text
    schema = json.dumps(asked[0].body.get("response_format", {}))
    assert '"program"' in schema


async def test_wrong_stated_answers_relabeled_to_program_and_traces(tmp_path, openai_server):
    # the teacher states each child's answer one too high; its programs and traces compute the true value
    root, ledger = await decomposed(openai_server, tmp_path, World(agents={}, wrong_child_answers=True), relabel=True)
    assert ledger.rejected == [] and len(root.children) == 3
    for child in root.children:
        stated, fixed = child.problem.meta["relabeled_from"], child.problem.answer
        assert int(stated) == int(fixed) + 1 and child.problem.meta["program_answer"] == fixed
        assert child.decisions[0].reason.startswith(f"relabeled: stated {stated!r}; its program and all traces")


async def test_wrong_stated_answers_rejected_without_relabel(tmp_path, openai_server):
    root, ledger = await decomposed(openai_server, tmp_path, World(agents={}, wrong_child_answers=True))
    assert root.children == [] and len(ledger.rejected) == 3
    for r in ledger.rejected:
        assert r.data["check"] == "program"
        assert (
            r.reason
            == f"program gives {int(r.problem.answer) - 1}, stated answer {r.problem.answer!r} (relabeling off)"
        )
    # rejected before any trace: no solve request for the children
    assert not [q for q in openai_server.requests if "<problem>" in q.text and "d0c" in q.text]


async def test_program_disagreeing_with_stated_and_traces_rejected(tmp_path, openai_server):
    for relabel in (False, True):
        root, ledger = await decomposed(
            openai_server, tmp_path / str(relabel), World(agents={}, wrong_programs=True), relabel=relabel
        )
        assert root.children == [] and len(ledger.rejected) == 3
        for r in ledger.rejected:
            assert r.data["check"] == "program"
            value = int(r.problem.answer)
            if relabel:  # traces verify the stated answer, the program gives another: no relabel
                assert r.reason == (
                    f"program and traces disagree: program gives {value + 1}, a trace of teacher "
                    f"verifies the stated {str(value)!r}"
                )
            else:
                assert r.reason.startswith(f"program gives {value + 1}, stated answer")


async def test_program_agreeing_with_stated_but_not_traces_rejected(tmp_path, openai_server):
    # a teacher that can no longer solve the children: all its traces agree on the answer plus one
    root, ledger = await decomposed(openai_server, tmp_path, World(agents={}), teacher=Agent(capacity=0), relabel=True)
    assert root.children == []
    child_rejections = [r for r in ledger.rejected if r.problem.id.startswith("a.d0")]
    assert len(child_rejections) == 3
    for r in child_rejections:
        value = int(r.problem.answer)
        assert r.reason == (
            f"program and traces disagree: program gives {value}, traces agree on "
            f"{str(value + 1)!r} (stated {str(value)!r})"
        )


async def test_failing_programs_are_counted_rejections(tmp_path, openai_server, monkeypatch):
    # a 2 s limit: the endless loop's three children wait for it (counted from the program's start, so the
    # sandbox's start-up is not in it)
    monkeypatch.setattr("finmbs.verify.program.PROGRAM_TIMEOUT_S", 2.0)
    for bad, why in (
        ("import os\nanswer = os.getpid()", "import of 'os' is not allowed"),
        ("while True:\n    pass", "time limit"),
        ("answer = 'five'", "not a finite number"),
    ):
        world = World(agents={}, bad_program=bad)
        root, ledger = await decomposed(openai_server, tmp_path / str(abs(hash(bad))), world)
        assert root.children == [] and len(ledger.rejected) == 3
        assert all(
            r.reason.startswith("program failed: ") and why in r.reason and r.data["check"] == "program"
            for r in ledger.rejected
        )


AGENTS = {
    "weak-teacher": Agent(capacity=2),
    "strong-teacher": Agent(),
    "s1": Agent(capacity=2, partial=0.5),
    "s2": Agent(capacity=1, boost=2, partial=0.875),
    "target": Agent(capacity=6, partial=0.5),
}


def grow_config(server, tmp_path, world: World, **kw):
    world.agents = dict(AGENTS)
    server.handler = world
    return world_config(
        server.base_url,
        ["weak-teacher", "strong-teacher"],
        ["s1", "s2"],
        "target",
        str(tmp_path / "cache.sqlite"),
        **{"Nt": 2, "N": 8, "N_leaf": 2, "L": 100, **kw},
    )


# the mends a program gets before it runs: (World flag, verify switch, what the teacher wrote looks like, what
# runs instead, why it fails with the switch off)
MENDS = {
    # the 1.5B wrote `total = 5 * 15 answer = total - 40` inside a JSON string: one line, a syntax error
    "line breaks": (
        "one_line_programs",
        "program_line_breaks",
        lambda written: written.startswith("value = ") and " answer = value" in written,
        lambda written: written.replace(" answer = ", "\nanswer = "),
        "SyntaxError",
    ),
    # told to bind `answer`, the 1.5B often ends with `print(total)`: the print is made `answer = total`
    "printed answer": (
        "printed_programs",
        "program_printed_answer",
        lambda written: written.endswith("\nprint(value)") and "answer" not in written,
        lambda written: written.replace("\nprint(value)", "\nanswer = value"),
        "did not bind answer",
    ),
}


@pytest.mark.parametrize("mend", list(MENDS))
async def test_mended_programs_run_as_mended_and_wrong_ones_are_still_rejected(mend, tmp_path, openai_server):
    flag, switch, shape, runs_as, off_error = MENDS[mend]
    root, ledger = await decomposed(openai_server, tmp_path / "on", World(agents={}, **{flag: True}))
    assert ledger.rejected == [] and len(root.children) == 3
    for child in root.children:
        meta = child.problem.meta
        assert shape(meta["program_as_written"]) and meta["program"] == runs_as(meta["program_as_written"])
        assert (
            meta["program_answer"] == child.problem.answer
            and run_program(meta["program"]).answer == meta["program_answer"]
        )
    # the mend makes a wrong program run, not agree: it is rejected as any wrong program is
    _, ledger = await decomposed(
        openai_server, tmp_path / "wrong", World(agents={}, wrong_programs=True, **{flag: True})
    )
    assert len(ledger.rejected) == 3 and all(r.reason.startswith("program gives ") for r in ledger.rejected)
    # switched off (the paper profile has programs off altogether): the program fails, rejected
    off = setup(openai_server, tmp_path / "off", World(agents={}, **{flag: True}))
    setattr(off.config.verify, switch, False)
    root, ledger = TreeNode(problem=SEED, path="0"), Ledger("a")
    await decompose(off, root, ledger)
    assert root.children == [] and len(ledger.rejected) == 3
    assert all(off_error in r.reason and r.data["check"] == "program" for r in ledger.rejected)


async def test_grow_composes_by_child_functions_and_reexecutes(tmp_path, openai_server):
    out = tmp_path / "run"
    metrics = await run_grow(grow_config(openai_server, tmp_path, World(agents={})), [SEED], out)
    assert metrics.qualified == 1 and metrics.program_rejected == 0
    [qualified] = [Problem.model_validate(r) for r in read_jsonl(out / "qualified.jsonl")]
    assert "child_1()" in qualified.meta["program"] and set(qualified.meta["program_functions"]) == {
        "child_1",
        "child_2",
        "child_3",
    }
    again = run_program(qualified.meta["program"], functions=qualified.meta["program_functions"])
    assert again.ok and again.answer == qualified.answer == qualified.meta["program_answer"]
    compose_prompt = next(r.text for r in openai_server.requests if "Combine the synthetic children" in r.text)
    assert "child_1() returns" in compose_prompt
    # export keeps the program beside the problem (veRL extra_info, TRL columns)
    row = training_row(qualified, 0, "train")
    assert row["extra_info"]["program"].startswith(qualified.meta["program"])
    assert "child_1" in row["extra_info"]["program"] and trl_row(row)["program"] == row["extra_info"]["program"]


async def test_grow_counts_program_rejections(tmp_path, openai_server):
    out = tmp_path / "run"
    metrics = await run_grow(grow_config(openai_server, tmp_path, World(agents={}, wrong_programs=True)), [SEED], out)
    assert metrics.qualified == 0 and metrics.program_rejected >= 3
    rows = list(read_jsonl(out / "rejected.jsonl"))
    assert sum(r["data"].get("check") == "program" for r in rows) == metrics.program_rejected
    assert json.loads((out / "metrics.json").read_text())["program_rejected"] == metrics.program_rejected


async def test_programs_off_asks_exactly_as_before(tmp_path, openai_server):
    out = tmp_path / "run"
    await run_grow(grow_config(openai_server, tmp_path, World(agents={}), programs=False), [SEED], out)
    teacher = [r for r in openai_server.requests if r.body.get("response_format")]
    assert teacher and not any(
        PROGRAM_MARKER in r.text or "program" in json.dumps(r.body["response_format"]) for r in teacher
    )
    assert not any("program" in r["problem"]["meta"] for r in read_jsonl(out / "rejected.jsonl"))


def test_paper_profile_has_programs_off_and_default_on():
    configs = resource_dir("configs")
    assert load_config(configs / "default.yaml").verify.programs is True
    for name in ("paper-math.yaml", "paper-finance.yaml"):
        assert load_config(configs / name).verify.programs is False


def test_rule_5_reads_the_program_quotes():
    passage = (
        "“Default Rate” means a rate per annum equal to two percent (2.0%) in excess of the rate otherwise applicable."
    )
    grounding = Grounding(passage, ["seed passage"], None)
    question = (
        "How much interest on an overdue principal of $100,000 if the rate otherwise applicable is 10% per annum?"
    )
    guessed = grounding.check(question, "$10,000")
    assert guessed and guessed.startswith("takes nothing")
    assert grounding.check(question, "$10,000", quotes=[]) == (
        "takes nothing from the passage: its program quotes no figure of it"
    )
    assert grounding.check(question, "$12,000", quotes=[{"text": "two percent (2.0%)", "value": "0.02"}]) is None


def write_config(server, tmp_path, world: World, **kw) -> str:
    config = grow_config(server, tmp_path, world, **kw)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    return str(path)


def test_verify_cli_verdicts_and_bad_line(tmp_path, openai_server):
    problems = tmp_path / "labels.jsonl"
    rows = [
        {"id": "right", "question": "Compute 6 * 7 * 35 - 20.", "answer": str(6 * 7 * 35 - 20)},
        {"id": "wrong", "question": "Compute 1470 - 25 * 58.", "answer": "21"},  # 20
        {"id": "carried", "question": "Compute 3 * 4.", "answer": "12", "meta": {"program": "answer = 3 * 5"}},
    ]
    problems.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = write_config(openai_server, tmp_path, World(agents={}), relabel=True)
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["verify", str(problems), "--config", config, "--out", str(out)])
    assert result.exit_code == 0, result.output
    verdicts = {v["id"]: v for v in read_jsonl(out)}
    assert verdicts["right"]["outcome"] == "verified" and verdicts["right"]["program_written"]
    assert verdicts["wrong"]["outcome"] == "relabeled" and verdicts["wrong"]["answer"] == "20"
    assert verdicts["carried"]["outcome"] == "rejected" and verdicts["carried"]["check"] == "program"
    assert verdicts["carried"]["program_answer"] == "15" and not verdicts["carried"]["program_written"]
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert (summary["verified"], summary["relabeled"], summary["rejected"], summary["rejected_by_program"]) == (
        1,
        1,
        1,
        1,
    )
    assert summary["tokens"] > 0
    # --no-relabel: the wrong label is rejected; --no-programs: the paper's trace rule alone
    no_relabel = tmp_path / "strict.jsonl"
    CliRunner().invoke(app, ["verify", str(problems), "--config", config, "--out", str(no_relabel), "--no-relabel"])
    assert {v["id"]: v["outcome"] for v in read_jsonl(no_relabel)}["wrong"] == "rejected"
    text_only = tmp_path / "text.jsonl"
    CliRunner().invoke(app, ["verify", str(problems), "--config", config, "--out", str(text_only), "--no-programs"])
    plain = {v["id"]: v for v in read_jsonl(text_only)}
    assert plain["carried"]["outcome"] == "verified" and plain["right"]["program"] is None
    # a bad line names the file and the line, and nothing is written
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n{not json\n")
    failed = CliRunner().invoke(app, ["verify", str(bad), "--config", config, "--out", str(tmp_path / "bad-out.jsonl")])
    assert failed.exit_code != 0 and str(bad) in failed.output and "line 2" in failed.output
    assert not (tmp_path / "bad-out.jsonl").exists()


def test_program_field_fits_a_llama_cpp_grammar():
    # llama.cpp refuses a grammar repeating one rule over 2,000 times (a string's maxLength): the whole reply
    # then went unconstrained in the first embedded run with programs
    from finmbs.mbs.candidates import with_program
    from finmbs.mbs.compose import ComposedParent
    from finmbs.mbs.programs import WrittenProgram

    for model in (with_program(ComposedParent), WrittenProgram):
        program = model.model_json_schema()["properties"]["program"]
        assert program["type"] == "string" and program.get("maxLength", 0) <= 2000


# a decomposition's parent program: the children's programs compose to the parent's verified answer ---------------
def parent_asks(server) -> list:
    return [r for r in server.requests if TASK_MARKERS["program_parent"] in r.text]


async def test_parent_program_over_the_children_is_recorded(tmp_path, openai_server):
    root, ledger = await decomposed(openai_server, tmp_path, World(agents={}))
    assert ledger.rejected == [] and len(root.children) == 3
    meta = root.problem.meta  # the seed carried no program: the decomposition's is its program now
    assert meta["program"] == "answer = (child_1()) * (child_2())" and meta["program_answer"] == "25"
    assert set(meta["program_functions"]) == {"child_1", "child_2", "child_3"} and "own_program" not in meta
    again = run_program(meta["program"], functions=meta["program_functions"])
    assert again.ok and again.answer == "25"
    [accepted] = [d for d in root.decisions if d.outcome == "accepted"]
    assert accepted.data["parent_program"] == meta["program"] and accepted.data["parent_program_answer"] == "25"
    # asked once, with the children's functions and answers, never with the parent's answer or solution
    [ask] = parent_asks(openai_server)
    assert "- child_1() returns 5; its problem: Compute 2 + 3." in ask.text and "- child_3() returns 30" in ask.text
    assert "25" not in ask.text and "<answer>" not in ask.text and "verified_solution" not in ask.text
    assert SEED.meta == {}  # the seed record itself is left alone


async def test_parent_program_disagreeing_rejects_the_attempt(tmp_path, openai_server):
    root, ledger = await decomposed(openai_server, tmp_path, World(agents={}, wrong_parent_programs=True))
    assert root.children == [] and "program" not in root.problem.meta
    reason = "parent program gives 26, the parent's answer is '25'"
    [attempt, gave_up] = root.decisions[-2:]
    assert attempt.outcome == "rejected" and attempt.reason == reason and attempt.data["check"] == "program"
    assert attempt.data["parent_program"] == "answer = (child_1()) * (child_2()) + 1" and gave_up.outcome == "rejected"
    # every verified child of the attempt is a counted program rejection; no student was conditioned on them
    assert len(ledger.rejected) == 3 and all(
        r.reason == reason and r.data["check"] == "program" for r in ledger.rejected
    )
    assert not any(TASK_MARKERS["conditioned"] in r.text for r in openai_server.requests)


async def test_parent_program_failing_in_the_sandbox_rejects_the_attempt(tmp_path, openai_server):
    # a retry is told why: the second attempt's prompt carries the first's reason as negative context
    world = World(agents={})
    ctx = setup(openai_server, tmp_path, world, Nd=1)
    world.program_parent = lambda agent, text: {"program": "answer = child_1() / (child_2() - 5)"}
    root, ledger = TreeNode(problem=SEED, path="0"), Ledger("a")
    assert await decompose(ctx, root, ledger) is False
    reasons = [d.reason for d in root.decisions if "attempt" in d.data]
    assert reasons == ["parent program failed: raised ZeroDivisionError: division by zero"] * 2
    retry = [r.text for r in openai_server.requests if TASK_MARKERS["decompose"] in r.text][-1]
    assert "parent program failed: raised ZeroDivisionError" in retry


async def test_parent_program_is_one_decompose_call_and_none_without_programs(tmp_path, openai_server):
    usage = {}
    for programs in (True, False):
        openai_server.reset()
        world = World(agents={})
        # the prose decomposition's parent program (from the program the engine writes it: test_decompose_slices.py)
        ctx = setup(openai_server, tmp_path / str(programs), world, decompose_from_program=False).for_seed()
        ctx.config.verify.programs = programs
        with in_stage("decompose"):
            assert await decompose(ctx, TreeNode(problem=SEED, path="0"), Ledger("a")) is True
        assert set(ctx.stage_usage()) == {"decompose"}
        usage[programs] = ctx.stage_usage()["decompose"]["requests"]
        assert len(parent_asks(openai_server)) == (1 if programs else 0)
    assert usage[True] == usage[False] + 1


async def test_composed_parent_keeps_a_nodes_own_program_and_quotes_its_passage(tmp_path, openai_server):
    ctx = setup(openai_server, tmp_path, World(agents={}))
    text = "Interest accrues at a rate per annum equal to two percent (2.0%) on the principal."
    node = Problem(
        id="f",
        question="What is a year's interest on a principal of $100,000?",
        answer="$2,000",
        domain="finance",
        snippet=Snippet(text=text),
        meta={"program": "answer = 100000 * 0.02"},
    )
    functions = {"child_1": "answer = 100000"}
    source = 'answer = child_1() * quote("two percent (2.0%)", 0.02)'
    parent, why = await composed_parent(ctx, node, source, functions)
    assert why is None and parent.meta["own_program"] == "answer = 100000 * 0.02"
    assert parent.meta["program"] == source and parent.meta["program_answer"] == "2000"
    assert parent.meta["quotes"] == [{"text": "two percent (2.0%)", "value": "0.02"}]
    _, why = await composed_parent(ctx, node, source.replace("two percent", "three percent"), functions)
    assert why == "parent program failed: raised ProgramError: quote not in the passage: 'three percent (2.0%)'"


# finmbs verify: the program writer falls back to the next teacher while a written program does not run ------------
async def checked(server, tmp_path, teachers: dict[str, Agent], problem: Problem):
    server.reset()
    server.handler = World(agents={**teachers, "target": Agent(), "s": Agent()})
    config = world_config(server.base_url, list(teachers), ["s"], "target", str(tmp_path / "cache.sqlite"), N=4)
    [verdict] = await check_labels(
        Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "cache.sqlite"))), [problem], concurrency=1
    )
    return verdict, [r.model.split("/")[-1] for r in server.requests if TASK_MARKERS["program_write"] in r.text]


async def test_verify_asks_the_next_teacher_when_a_written_program_fails(tmp_path, openai_server):
    problem = Problem(id="p", question="Compute 1470 - 25 * 58.", answer="20")
    broken = {"broken": Agent(program="import os\nanswer = 20"), "teacher": Agent()}
    verdict, asked = await checked(openai_server, tmp_path / "one", broken, problem)
    assert asked == ["broken", "teacher"] and verdict.outcome == "verified"
    assert verdict.program_writer == "teacher" and verdict.program == "answer = 1470 - 25 * 58"
    assert verdict.program_attempts == [
        "broken: program failed: raised ImportError: import of 'os' is not allowed (only math, fractions, decimal, statistics, datetime, sympy)"
    ]
    # every teacher's program fails: the last is kept and rejected, every attempt recorded
    words = {"broken": Agent(program="import os\nanswer = 20"), "words": Agent(program="answer = 'twenty'")}
    verdict, asked = await checked(openai_server, tmp_path / "all", words, problem)
    assert asked == ["broken", "words"] and verdict.outcome == "rejected" and verdict.check == "program"
    assert verdict.program_writer == "words" and verdict.reason.startswith(
        "program failed: answer is not a finite number"
    )
    assert [a.split(":")[0] for a in verdict.program_attempts] == ["broken", "words"]
    # a program that runs but gives another answer is the verdict, never a reason to ask the next teacher
    other = {"first": Agent(program="answer = 21"), "teacher": Agent()}
    verdict, asked = await checked(openai_server, tmp_path / "runs", other, problem)
    assert asked == ["first"] and verdict.program_writer == "first" and verdict.program_attempts == []
    assert verdict.outcome == "rejected" and verdict.check == "program"


# every qualified problem's program re-executes to its answer, apart from the run (bench/bench_reexec.py) ----------
async def test_qualified_programs_reexecute_to_their_answers(tmp_path, openai_server, capsys):
    out = tmp_path / "run"
    await run_grow(grow_config(openai_server, tmp_path, World(agents={})), [SEED], out)
    qualified = [Problem.model_validate(r) for r in read_jsonl(out / "qualified.jsonl")]
    assert qualified and [r.outcome for r in await reexecute_all(qualified)] == ["agree"] * len(qualified)
    # a wrong answer, a program that no longer runs, no program: each said, and the bench exits 1
    [good] = qualified[:1]
    wrong = good.model_copy(update={"id": "wrong", "answer": str(int(good.answer) + 1)})
    broken = good.model_copy(update={"id": "broken", "meta": {**good.meta, "program": "answer = child_9()"}})
    bare = Problem(id="bare", question="Compute 1 + 1.", answer="2")
    results = {r.id: r for r in await reexecute_all([good, wrong, broken, bare])}
    assert [results[i].outcome for i in (good.id, "wrong", "broken", "bare")] == [
        "agree",
        "mismatch",
        "failed",
        "no_program",
    ]
    assert results["wrong"].program_answer == good.answer and "child_9" in results["broken"].detail
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(p.model_dump_json() + "\n" for p in (good, wrong, broken, bare)))
    reexec = bench_module("bench_reexec")
    assert await asyncio.to_thread(reexec.main, [str(out)]) == 0  # a script: its own event loop
    assert await asyncio.to_thread(reexec.main, [str(mixed)]) == 1
    printed = capsys.readouterr().out
    assert "mismatch: wrong: answer" in printed and "failed: broken" in printed


def bench_module(name: str):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_program_that_binds_a_literal_proves_nothing():
    from finmbs.verify.program import computes_nothing

    assert computes_nothing("answer = 0") and computes_nothing("x = 3\nanswer = x") and computes_nothing("answer = -5")
    assert not computes_nothing("answer = 8 - 4 * 2") and not computes_nothing("answer = quote('2.0%', 0.02)")
    assert not computes_nothing("answer = child_1()") and not computes_nothing("answer = (")  # the sandbox's to reject
    assert not computes_nothing("answer = 'five'") and not computes_nothing(
        "while True:\n    pass"
    )  # the sandbox's too
    # the 1.5B computed, then bound the stated answer anyway: the literal is the result, so it proves nothing
    assert computes_nothing("answer = 12 - 5 * 1.5; answer = 4.5") and computes_nothing("x = 2 * 3\nanswer = -6")
    assert not computes_nothing("answer = 4.5\nanswer = answer * 2")  # the last binding computes
    assert not computes_nothing("x = 7\nif x > 5:\n    answer = 1\nelse:\n    answer = 2")  # decided by a comparison
    assert not computes_nothing("answer = 0\nfor i in range(4):\n    answer += i")


async def test_verify_rejects_a_label_whose_program_computes_nothing(tmp_path, openai_server):
    problem = Problem(id="p", question="Compute 8 - 4 * 2.", answer="0")
    verdict, _ = await checked(openai_server, tmp_path, {"teacher": Agent(program="answer = 0")}, problem)
    assert verdict.outcome == "rejected" and verdict.check == "program"
    assert verdict.reason == "the program computes nothing: it binds the answer to a literal"


# verify.program_agreement: k programs, a majority must agree before the trace rule ---------------------------------
async def agreeing(server, tmp_path, programs: tuple[str, ...], problem: Problem, k: int = 3):
    server.reset()
    server.handler = World(agents={"teacher": Agent(programs=programs), "target": Agent(), "s": Agent()})
    config = world_config(server.base_url, ["teacher"], ["s"], "target", str(tmp_path / "cache.sqlite"), N=4)
    config.verify.program_agreement = k
    ctx = Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "cache.sqlite")))
    [verdict] = await check_labels(ctx, [problem], concurrency=1)
    return verdict, len([r for r in server.requests if TASK_MARKERS["program_write"] in r.text])


async def test_program_agreement_trusts_a_label_only_on_a_majority(tmp_path, openai_server):
    problem = Problem(id="p", question="Compute 1470 - 25 * 58.", answer="20")
    right = "answer = 1470 - 25 * 58"
    # two of three agree with the stated answer: verified, the tally recorded
    verdict, asked = await agreeing(openai_server, tmp_path / "a", (right, right, "answer = 19 * 5"), problem)
    assert asked == 3 and verdict.outcome == "verified" and verdict.program == right
    assert verdict.problem.meta["program_votes"] == "20 x2; 95 x1 of 3 programs"
    # the first written program is in the minority: the engine's program gives way to the majority's
    verdict, _ = await agreeing(openai_server, tmp_path / "b", ("answer = 19 * 5", right, right), problem)
    assert verdict.outcome == "verified" and verdict.program == right
    assert verdict.problem.meta["program_votes"] == "95 x1; 20 x2 of 3 programs"
    # three answers: no majority, the label is not trusted although one program and the traces agree with it
    verdict, _ = await agreeing(openai_server, tmp_path / "c", (right, "answer = 19 * 5", "answer = 3 * 7"), problem)
    assert verdict.outcome == "rejected" and verdict.check == "program"
    assert verdict.reason == "programs disagree, no majority: 20 x1; 95 x1; 21 x1 of 3 programs"
    # a draw that fails to run votes for nothing: 1 of 3 is no majority
    verdict, _ = await agreeing(
        openai_server, tmp_path / "d", (right, "import os\nanswer = 20", "answer = 'x'"), problem
    )
    assert verdict.outcome == "rejected" and verdict.reason.startswith("programs disagree, no majority: 20 x1 of 3")
    # k = 1 (the paper profile's value): one program, no draws
    verdict, asked = await agreeing(openai_server, tmp_path / "e", (right, "answer = 19 * 5"), problem, k=1)
    assert asked == 1 and verdict.outcome == "verified" and "program_votes" not in verdict.problem.meta


async def test_a_candidates_own_program_outvoted_is_rejected(tmp_path, openai_server):
    ctx = setup(openai_server, tmp_path, World(agents={}), teacher=Agent(programs=("answer = 2 + 4",)))
    ctx.config.verify.program_agreement = 3
    candidate = Problem(id="c", question="Compute 2 + 3.", answer="5", meta={"program": "answer = 2 + 3"})
    ledger = Ledger("c")
    assert await program_node(ctx, candidate, ledger, stage="leaves", path="0") is None
    assert ledger.rejected[-1].reason == "its program gives 5, outvoted: 5 x1; 6 x2 of 3 programs"
    assert ledger.rejected[-1].data["check"] == "program"
    # the drawn programs agreeing with its own: verified, the votes in its meta
    ctx = setup(openai_server, tmp_path / "ok", World(agents={}))
    ctx.config.verify.program_agreement = 3
    node = await program_node(ctx, candidate, Ledger("c"), stage="leaves", path="0")
    assert node is not None and node.problem.meta["program_votes"] == "5 x3 of 3 programs"
    assert node.problem.meta["program"] == "answer = 2 + 3"
