"""The paper as published (issue 37): the paper profile and its errors, and each decision rule read back
to the paper, in the scripted arithmetic world on the real OpenAI-compatible server (expectations worked
out by hand from finmbs/testing/world.py); fresh calibration draws; dollar budgets without prices;
direct synthesis as appendix C asks; documents held out of re-grounding."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import PAPER_VALUES, ConfigError, QualitySettings, RunConfig, load_config
from finmbs.ingest.parse import ParsedDocument, cover_page, defined_company
from finmbs.llm import BudgetExceeded, Gateway
from finmbs.mbs.compose import synthesize
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.decompose import ANSWER_LEAK, decompose
from finmbs.mbs.direct import BUDGET_STAGES_OUT, budget_tokens
from finmbs.mbs.novelty import reveals
from finmbs.mbs.pipeline import grow_seed
from finmbs.mbs.reground import held_out
from finmbs.mbs.solve import train_prompt
from finmbs.mbs.traces import teacher_trace
from finmbs.records import Document, Problem, RunMetrics, Trace, TreeNode
from finmbs.resources import resource_dir
from finmbs.runs.budgets import construction_budgets
from finmbs.runs.grow import run_grow
from finmbs.testing.world import TASK_MARKERS, Agent, World, world_config

SEED = Problem(id="a", question="Compute (2 + 3) * (4 + 1).", answer="25")


def context(server, tmp_path, agents, *, world=None, students=("s",), target="target", **stages):
    world = world or World(agents={})
    world.agents = {"teacher": Agent(), "target": Agent(capacity=6, partial=0.5), **agents}
    server.handler = world
    config = world_config(
        server.base_url, ["teacher"], list(students), target, str(tmp_path / "cache.sqlite"), **stages
    )
    return Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "cache.sqlite"))), config


def asks(server, task: str) -> list:
    return [r for r in server.requests if TASK_MARKERS[task] in r.text]


# the profile --------------------------------------------------------------------------------------
def test_paper_profile_sets_every_addition_to_the_papers_value():
    paper = load_config(profile="paper")  # --profile paper over the default config: its additions give way
    finmbs = load_config()
    for key, value in PAPER_VALUES.items():
        section, name = key.split(".")
        assert getattr(getattr(paper, section), name) == value, key
    # the default (finmbs) profile has additions on: the profile changes something
    assert finmbs.novelty.enabled and finmbs.novelty.unworkable and finmbs.verify.programs
    assert finmbs.stages.extract == "retrieve" and finmbs.stages.leakage_rules == "all"
    # every key of the table is a real setting with a description (so `config explain` can say what it is)
    for key in PAPER_VALUES:
        section, name = key.split(".")
        field = type(getattr(finmbs, section)).model_fields[name]
        assert field.description, key


def test_shipped_paper_configs_use_the_profile():
    for name in ("paper-math.yaml", "paper-finance.yaml"):
        text = (resource_dir("configs") / name).read_text()
        assert "profile: paper" in text and "novelty:" not in text
        config = load_config(resource_dir("configs") / name)
        assert config.profile == "paper" and not config.novelty.enabled and not config.quality.enabled


def test_a_key_contradicting_the_paper_profile_is_one_error(tmp_path):
    path = tmp_path / "mixed.yaml"
    data = yaml.safe_load((resource_dir("configs") / "paper-math.yaml").read_text())
    data["novelty"] = {"enabled": True}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "novelty.enabled is False" in message and str(path) in message and "key novelty.enabled" in message
    # an override too, and a config built in code
    with pytest.raises(ConfigError, match="stages.extract is 'copy'"):
        load_config(overrides=["profile=paper"])  # in the file's own layer: default.yaml sets extract: retrieve
    with pytest.raises(ConfigError, match="stages.keep is 'roots'"):
        load_config(overrides=["stages.keep=all"], profile="paper")  # --profile paper --set stages.keep=all
    with pytest.raises(ConfigError, match="unknown profile"):
        load_config(profile="papr")
    with pytest.raises(ValueError, match="stages.relabel is False"):
        RunConfig.model_validate({**data, "novelty": {}, "stages": {"relabel": True}})
    # the paper's own value is no contradiction
    data["novelty"] = {"enabled": False}
    path.write_text(yaml.safe_dump(data))
    assert load_config(path).profile == "paper"


def test_cli_profile_option_and_explain(tmp_path):
    config = resource_dir("configs") / "default.yaml"  # extract: retrieve, programs ...: --profile paper overrides them
    result = CliRunner().invoke(
        app, ["config", "explain", "--config", str(config), "--profile", "paper"], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "profile: paper" in flat
    rows = {
        line.split("│")[1].strip(): [c.strip() for c in line.split("│")[1:]]
        for line in result.output.splitlines()
        if line.count("│") >= 5 and "." in line.split("│")[1]
    }
    assert rows["novelty.enabled"][1:4] == ["False", "finmbs", "False"]
    assert rows["stages.extract"][1:4] == ["copy", "finmbs", "copy"]
    assert rows["stages.N_direct"][1:4] == ["1", "finmbs", "1"]  # eq. 5: one problem per call
    assert rows["stages.direct_reground"][2].startswith("finmbs: paper silent")
    assert rows["quality.direct"][1:4] == ["True", "finmbs", "True"]  # appendix C: "on quality control"
    symbols = {
        line.split("│")[1].strip(): [c.strip() for c in line.split("│")[1:]]
        for line in result.output.splitlines()
        if line.count("│") >= 5
    }
    assert symbols["Nc"][1:3] == ["2", "paper"] and symbols["Nt"][2] == "finmbs"
    # the default profile: the same keys, the additions on, still marked finmbs with the paper's value
    result = CliRunner().invoke(app, ["config", "explain"], env={"COLUMNS": "250"})
    rows = {
        line.split("│")[1].strip(): [c.strip() for c in line.split("│")[1:]]
        for line in result.output.splitlines()
        if line.count("│") >= 5 and "." in line.split("│")[1]
    }
    assert rows["stages.extract"][1:4] == ["retrieve", "finmbs", "copy"]
    # grow with the profile and a contradicting --set: one error line naming the key and the paper value
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(SEED.model_dump_json(include={"id", "question", "answer"}) + "\n")
    result = CliRunner().invoke(
        app,
        [
            "grow",
            "--seeds",
            str(seeds),
            "--out",
            str(tmp_path / "run"),
            "--config",
            str(config),
            "--profile",
            "paper",
            "--set",
            "quality.enabled=true",
        ],
    )
    assert result.exit_code == 2
    assert "quality.enabled is False" in " ".join(result.output.split()) and not (tmp_path / "run").exists()


# decomposition: two or three children; the leak check reads what students read ----------------------
async def test_decomposition_asks_for_at_least_two_children(tmp_path, openai_server):
    ctx, _ = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, Nd=0, N=4, K=3)
    await decompose(ctx, TreeNode(problem=SEED), Ledger("a"))
    [ask] = asks(openai_server, "decompose")
    schema = ask.body["response_format"]["json_schema"]["schema"]["properties"]["subproblems"]
    assert schema["minItems"] == 2 and "maxItems" not in schema  # the first K that do not leak are taken


async def test_a_child_whose_trace_states_the_parents_answer_is_a_leak(tmp_path, openai_server):
    # every solution mentions 25 before its answer: the children 2+3, 4+1, 5*6 are shown to the students
    # with traces that state the parent's answer, so each is rejected before any student sees it
    world = World(agents={}, trace_note=" (25 is a square)")
    ctx, _ = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, world=world, Nd=0, N=4)
    root, ledger = TreeNode(problem=SEED), Ledger("a")
    assert await decompose(ctx, root, ledger) is False
    leaks = [r for r in ledger.rejected if r.data.get("check") == ANSWER_LEAK]
    assert [r.problem.question for r in leaks] == ["Compute 2 + 3.", "Compute 4 + 1.", "Compute 5 * 6."]
    assert {r.reason for r in leaks} == {"reveals the parent's answer: its worked solution states '25'"}
    assert not any(TASK_MARKERS["conditioned"] in r.text for r in openai_server.requests)
    # without the note the same children pass and the decomposition is effective
    openai_server.reset()
    ctx, _ = context(openai_server, tmp_path / "plain", {"s": Agent(capacity=1, boost=2)}, Nd=0, N=4)
    assert await decompose(ctx, TreeNode(problem=SEED), Ledger("a")) is True


def test_math_answers_are_stated_as_any_number():
    parent = Problem(id="p", question="What fraction of the 12 marbles are red if 9 are red?", answer="3/4")
    child = lambda q, a="1": Problem(id="c", question=q, answer=a)  # noqa: E731
    assert reveals(child("Half of \\frac{3}{4} is what?"), parent)
    assert reveals(child("What is 0.75 as a percent?"), parent)
    assert reveals(child("Simplify 6/8."), parent) is None
    small = Problem(id="p", question="How many rows are left after 2 rows of 10 from 50 trees?", answer="3")
    assert reveals(child("A box has 3 rows. How many?", "3"), small)  # by its answer
    assert (
        reveals(child("A box has 3 rows of 4. How many?", "12"), small)
        == "reveals the parent's answer: its question states '3'"
    )
    big = Problem(id="p", question="How many bags of 25 can 1,470 apples fill?", answer="58")
    assert reveals(child("What is 1,470 / 25?", "58.8"), big) is None
    assert (
        reveals(child("Compute 14 * 4.", "56"), big, shown="14 * 4 = 56, two short of 58")
        == "reveals the parent's answer: its worked solution states '58'"
    )
    # a figure the parent's own question gives is a given of the child too
    given = Problem(id="p", question="Add 7 to 7.", answer="14")
    assert reveals(child("What is 7 + 7 + 0?", "14"), given, by_answer=False) is None


# composition: up to Nc trials; finmbs's default stops at the first that passes --------------------------
async def test_composition_stops_at_the_first_passing_trial(tmp_path, openai_server):
    # each pool holds one 3-op variant (the 2-op one is too easy): one combination; the first trial passes
    ctx, _ = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2, partial=0.875)}, N_leaf=2, Nc=3, N=8)
    trace, _ = await teacher_trace(ctx, SEED)
    root, ledger = TreeNode(problem=SEED, trace=trace), Ledger("a")
    assert await decompose(ctx, root, ledger)
    versions, _ = await synthesize(ctx, root, ledger)
    assert [r.body.get("seed") for r in asks(openai_server, "compose")] == [0]
    assert [v.problem.id for v in versions] == ["a.s0"]
    assert root.decisions[-1].reason == "kept 1 of 1 composition trials (1 distinct combinations; up to 3)"


async def test_composition_runs_on_while_trials_fail(tmp_path, openai_server):
    # the weakest student solves every composed parent of 7 ops 8/8 ( > alpha_parent): all Nc trials run, one by one
    agents = {"s": Agent(capacity=1, boost=2, partial=0.875, table={7: 1.0})}
    ctx, _ = context(openai_server, tmp_path, agents, N_leaf=2, Nc=3, N=8)
    trace, _ = await teacher_trace(ctx, SEED)
    root, ledger = TreeNode(problem=SEED, trace=trace), Ledger("a")
    assert await decompose(ctx, root, ledger)
    versions, _ = await synthesize(ctx, root, ledger)
    assert [r.body.get("seed") for r in asks(openai_server, "compose")] == [0, 1, 2] and versions == []
    assert root.decisions[-1].reason == "kept 0 of 3 composition trials (1 distinct combinations; up to 3)"
    assert sum(r.stage == "compose" and "too easy" in r.reason for r in ledger.rejected) == 3


def solved(pid: str, expr: str, path: str, children=()) -> TreeNode:
    answer = str(eval(expr))  # noqa: S307 - the world's own arithmetic
    problem = Problem(id=pid, question=f"Compute {expr}.", answer=answer)
    return TreeNode(
        problem=problem,
        path=path,
        children=list(children),
        trace=Trace(text=f"Evaluate {expr} = {answer}.", answer=answer, model="teacher", verified=True),
    )


async def test_a_child_without_versions_does_not_stop_its_parent(tmp_path, openai_server):
    # leaf "9" has variants of 1 and 2 ops, both too easy for s (1.0 and 0.875 > 0.8): no version. Leaf
    # "4 + 1" keeps its 3-op variant. The parent is composed from that one version (the pattern still shows
    # both original children), not dropped with every ancestor
    ctx, _ = context(openai_server, tmp_path, {"s": Agent(capacity=1, partial=0.875)}, N_leaf=2, R=1, Nc=2, N=8)
    root = solved("r", "9 * (4 + 1)", "0", [solved("r.c0", "9", "0.0"), solved("r.c1", "4 + 1", "0.1")])
    ledger = Ledger("r")
    versions, orphans = await synthesize(ctx, root, ledger)
    assert [d.reason for d in root.decisions if d.data.get("missing")] == ["no synthetic version of ['r.c0']"]
    [version] = versions
    assert [c.problem.id for c in version.children] == ["r.c1.h0v1"] and orphans == []
    [ask] = asks(openai_server, "compose")
    assert "Compute 9." in ask.text and ask.text.count("<example>") == 1
    # no child with a version: nothing to compose, nothing asked
    openai_server.reset()
    ctx, _ = context(openai_server, tmp_path / "none", {"s": Agent(capacity=1, partial=0.875)}, N_leaf=2, R=1, N=8)
    root = solved("q", "9 * 7", "0", [solved("q.c0", "9", "0.0"), solved("q.c1", "7", "0.1")])
    assert await synthesize(ctx, root, Ledger("q")) == ([], [])
    assert root.decisions[-1].reason == "no synthetic version of ['q.c0', 'q.c1']: nothing to compose"
    assert not asks(openai_server, "compose")


async def test_a_root_whose_children_are_all_dropped_drops_its_seed(tmp_path, openai_server):
    # the root decomposes effectively into 2+3, 4+1, 5*6 (D=2 lets them recurse); each child is itself
    # unsolved by s (table: 1 op at 0) and its own decomposition never helps (Nd=0): all three are dropped,
    # so the seed is dropped, with no synthetic root counted from harder variants of it
    agents = {"s": Agent(capacity=1, boost=2, table={1: 0.0})}
    ctx, config = context(openai_server, tmp_path, agents, Nd=0, N=4, D=2)
    outcome = await grow_seed(SEED, ctx)
    assert outcome.synthetic == [] and outcome.qualified == []
    assert outcome.dropped == "dropped: every child of its effective decomposition was dropped"
    assert not asks(openai_server, "leaf") and not any(r.model.endswith("target") for r in openai_server.requests)


# calibration: fresh draws, on the training prompt ---------------------------------------------------
async def test_calibration_draws_fresh_samples_with_the_training_prompt(tmp_path, openai_server):
    # the target IS the weakest student (same endpoint): before, calibration was answered from the cache
    # with the rollouts the alpha screens had drawn; now the target makes its own calls
    agents = {"s": Agent(capacity=1, boost=2, partial=0.875)}
    ctx, config = context(openai_server, tmp_path, agents, students=("s",), target="s", N_leaf=2, Nc=2, N=8, L=4096)
    assert config.roles.target.model == config.roles.students[-1].model
    metrics = await run_grow(config, [SEED], tmp_path / "run")
    target = metrics.usage["target"]
    assert target.calls == 1 and target.samples == 8 and target.cache_hits == 0
    calibrations = [
        r
        for r in openai_server.requests
        if r.text.startswith("Solve the following problem")
        and "<example>" not in r.text
        and r.body.get("max_tokens") == 4096
        and r.n == 8
        and r.text
        == train_prompt(Problem(id="x", question=r.text.split("<problem>\n")[1].split("\n</problem>")[0], answer="0"))
    ]
    assert len(calibrations) >= 1
    # the screen's samples and calibration's are apart in the cache: the same request for another purpose
    gateway = Gateway(cache_path=str(tmp_path / "cache.sqlite"))
    endpoint = config.roles.target.model_copy(update={"supports_n": False})
    messages = [{"role": "user", "content": train_prompt(SEED)}]
    before = len(openai_server.requests)
    await gateway.generate(endpoint, role="student", messages=messages, n=2)
    await gateway.generate(endpoint, role="student", messages=messages, n=2)  # cached
    await gateway.generate(endpoint, role="target", messages=messages, n=2, purpose="calibrate")
    fresh = openai_server.requests[before:]
    from finmbs.llm.gateway import seed_base

    seeds = [r.body.get("seed") for r in fresh]  # a call's n requests run at once: their order of arrival varies
    assert len(seeds) == 4 and sorted(seeds[:2]) == [0, 1]
    assert sorted(seeds[2:]) == [seed_base("calibrate"), seed_base("calibrate") + 1]
    assert seed_base("calibrate") > 1000 and seed_base(None) == 0
    gateway.close()


async def test_metrics_count_roots_rejected_before_calibration_and_fresh_draws(tmp_path, openai_server):
    # all 3 composition trials pass (compose_all_trials): a.s0 is calibrated (qualified), a.s1 and a.s2
    # restate it and the novelty guard rejects them: 3 candidates, 1 qualified -> rates 1/3
    agents = {"s": Agent(capacity=1, boost=2, partial=0.875)}
    _, config = context(openai_server, tmp_path, agents, N_leaf=2, Nc=3, N=8, L=4096, compose_all_trials=True)
    metrics = await run_grow(config, [SEED], tmp_path / "run")
    assert (metrics.descendants, metrics.gated_roots, metrics.root_candidates, metrics.qualified) == (1, 2, 3, 1)
    assert metrics.qualified_rate == pytest.approx(1 / 3) and metrics.goldilocks_rate == pytest.approx(1 / 3)
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["root_candidates"] == 3 and saved["seeds_done"] == 1
    # construction tokens per seed divide by the finished seeds
    assert RunMetrics(seeds_in=4, seeds_done=2, construction_tokens=100).construction_tokens_per_seed == 50
    # fresh draws: the target is s (the weakest student): its screen said 0/8 (hard) on a.s0, not Goldilocks
    assert (metrics.screen_goldilocks, metrics.screen_goldilocks_out) == (0, 0)


# dollar budgets need prices --------------------------------------------------------------------------
async def test_a_dollar_budget_with_an_unpriced_model_stops_before_calling_it(tmp_path, openai_server):
    _, config = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, N=4)
    config.budget.max_cost_usd = 5.0
    from finmbs.llm.gateway import unpriced

    assert unpriced(config) == [
        "teacher teacher (openai/teacher)",
        "student s (openai/s)",
        "target target (openai/target)",
        "judge teacher (openai/teacher)",
    ]
    with pytest.raises(BudgetExceeded, match="no price is known for teacher"):
        await run_grow(config, [SEED], tmp_path / "run")
    assert openai_server.requests == []
    # priced (as a self-hosted server: 0, or a real price), the same run goes through and counts dollars
    for _, endpoint in config.roles.all():
        endpoint.input_cost_per_mtok, endpoint.output_cost_per_mtok = 1.0, 2.0
    assert unpriced(config) == []
    metrics = await run_grow(config, [SEED], tmp_path / "priced")
    assert sum(u.cost_usd for u in metrics.usage.values()) > 0


def test_grow_warns_at_start_about_unpriced_models(tmp_path, openai_server):
    _, config = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, N=4)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(SEED.model_dump_json(include={"id", "question", "answer"}) + "\n")
    result = CliRunner().invoke(
        app,
        [
            "grow",
            "--seeds",
            str(seeds),
            "--out",
            str(tmp_path / "run"),
            "--config",
            str(path),
            "--set",
            "budget.max_cost_usd=5",
        ],
    )
    flat = " ".join(result.output.split())
    assert "warning: budget.max_cost_usd is set but no price is known for teacher teacher (openai/teacher)" in flat
    assert result.exit_code == 3 and "no price is known for teacher" in flat.split("warning:")[1].split("error:")[-1]


# direct synthesis as published ----------------------------------------------------------------------
async def test_direct_asks_for_several_problems_in_one_call(tmp_path, openai_server):
    _, config = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, N=4, N_direct=3, L=4096)
    metrics = await run_grow(config, [SEED], tmp_path / "direct", method="direct")
    [ask] = asks(openai_server, "direct")
    assert "Generate 3 diverse" in ask.text
    schema = ask.body["response_format"]["json_schema"]["schema"]["properties"]["problems"]
    assert (schema["minItems"], schema["maxItems"]) == (3, 3)
    tree = json.loads((tmp_path / "direct" / "trees" / "a.json").read_text())
    assert [t["root"]["problem"]["question"] for t in tree["synthetic"]] == [
        "Compute (3 + 4) * (5 + 2).",
        "Compute (4 + 5) * (6 + 3).",
        "Compute (5 + 6) * (7 + 4).",
    ]
    assert metrics.descendants == 3


@pytest.mark.parametrize("direct", [True, False])
async def test_direct_output_is_quality_controlled_as_appendix_c_says(tmp_path, openai_server, direct):
    # the paper profile turns quality control of MBS output off (quality.enabled) but keeps it for the direct
    # baseline (quality.direct), which appendix C rejection-samples "on quality control"
    _, config = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, N=4, N_direct=1, L=4096)
    config = config.model_copy(update={"quality": QualitySettings(enabled=False, direct=direct)})
    metrics = await run_grow(config, [SEED], tmp_path / "direct", method="direct")
    assert metrics.descendants + metrics.gated_roots == 1
    assert len(asks(openai_server, "well_posed")) == int(direct)
    openai_server.reset()
    await run_grow(config, [SEED], tmp_path / "mbs")  # MBS output: quality.enabled alone decides
    assert not asks(openai_server, "well_posed")


async def test_matched_budget_counts_like_with_like_and_needs_a_finished_run(tmp_path, openai_server):
    _, config = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2, partial=0.875)}, N=8, N_leaf=2)
    await run_grow(config, [SEED], tmp_path / "mbs")
    stages = json.loads((tmp_path / "mbs" / "trees" / "a.json").read_text())["stages"]
    assert set(stages) >= {"traces", "decompose", "leaf", "compose", "quality", "calibrate"}
    counted = sum(c["tokens"] for s, c in stages.items() if s not in ("quality", "calibrate"))
    assert construction_budgets(tmp_path / "mbs") == {"a": counted} == {"a": budget_tokens(stages)}
    assert BUDGET_STAGES_OUT == {"reground", "quality", "calibrate"}
    with pytest.raises(ValueError, match="no such run folder"):
        construction_budgets(tmp_path / "nothing")
    (tmp_path / "mbs" / "done" / "a").unlink()
    with pytest.raises(ValueError, match=r"not finished \(1 of 1 seeds not done: a\)"):
        construction_budgets(tmp_path / "mbs")
    await run_grow(config, [SEED], tmp_path / "direct", method="direct")
    with pytest.raises(ValueError, match="a run of method 'direct'"):
        construction_budgets(tmp_path / "direct")
    # the CLI: one error line, exit 2
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(SEED.model_dump_json(include={"id", "question", "answer"}) + "\n")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    result = CliRunner().invoke(
        app,
        [
            "grow",
            "--seeds",
            str(seeds),
            "--method",
            "direct",
            "--config",
            str(path),
            "--out",
            str(tmp_path / "d2"),
            "--match-budget",
            str(tmp_path / "mbs"),
        ],
    )
    assert result.exit_code == 2 and "is not finished" in " ".join(result.output.split())


# unseen means unseen ----------------------------------------------------------------------------------
def test_a_holdout_entry_names_documents_by_id_file_company_or_cik():
    doc = Document(
        doc_id="apple_2023_10k",
        source_path="/data/filings/APPLE_2023_10K.pdf",
        sha256="x",
        company="Apple Inc.",
        cik="320193",
    )
    assert held_out(doc, "apple_2023_10k") and held_out(doc, "APPLE_2023_10K.pdf") and held_out(doc, "APPLE_2023_10K")
    assert held_out(doc, "Apple Inc") and held_out(doc, "apple") and held_out(doc, "0000320193")
    assert not held_out(doc, "Apple Hospitality REIT") and not held_out(doc, "320194") and not held_out(doc, "")


def test_ingest_reads_cik_company_and_period_off_a_cover_page():
    text = (
        "UNITED STATES SECURITIES AND EXCHANGE COMMISSION\nFORM 10-K\n"
        "For the fiscal year ended September 30, 2023\nCommission File Number: 001-36743\n"
        "Apple Inc.\n(Exact name of Registrant as specified in its charter)\n"
        "Central Index Key: 0000320193\n"
    )
    doc = ParsedDocument(text=text)
    cover_page(doc, text)
    assert (doc.company, doc.period, doc.cik) == ("Apple Inc.", "September 30, 2023", "320193")
    kept = ParsedDocument(text=text, company="APPLE", period="2023")  # what the file already said wins
    cover_page(kept, text)
    assert (kept.company, kept.period, kept.cik) == ("APPLE", "2023", "320193")
    plain = ParsedDocument(text="CREDIT AGREEMENT dated as of May 1, 2022")
    cover_page(plain, plain.text)
    assert (plain.company, plain.period, plain.cik) == (None, None, None)


# appendix E's templates -----------------------------------------------------------------------------
APPENDIX_E = {  # each task's sentences as appendix E prints them
    "decompose": "Identify the key skills and knowledge required by the parent. Produce two or three easier, "
    "independent, self-contained subproblems that collectively teach those skills. Give each subproblem a correct "
    "worked solution and one concise final answer. If a document is supplied, every subproblem must be answerable "
    "using only that document.",
    "leaf_harder": "Generate diverse variants that test the same core skills but are harder than the leaf and "
    "require more reasoning steps. Each variant must be self-contained and have exactly one verifiable final "
    "answer. Supply a correct worked solution. If a document is supplied, use no facts outside it.",
    "compose_parent": "Combine the synthetic children into one new parent problem. Require the skills from all "
    "children and mirror the logical dependency pattern by which the original children form the original parent. "
    "Match the original parent's difficulty and level of abstraction; do not simplify. Return one problem, a worked "
    "solution that composes the child results, and one final answer. A document-grounded parent must be "
    "answerable solely from the supplied document.",
    "direct_synthesis": "Generate diverse, self-contained problems that test the same underlying skills identified "
    "in the original problem and its verified solution. The problem must be novel and not a simple rewrite. For "
    "each problem, provide a correct worked solution and one final answer.",
}
FINMBS_WORDING = ("not by making the numbers awkward", "a few lines", "never state or ask", "Good subproblems")


def test_paper_prompts_are_appendix_e_verbatim():
    for name, sentences in APPENDIX_E.items():
        text = (resource_dir("prompts") / "paper" / f"{name}.txt").read_text()
        instructions, _, reply = text.partition("Reply with only one JSON object")
        assert instructions.startswith(sentences), name
        assert not any(extra in text for extra in FINMBS_WORDING), name
        assert reply, name  # the serialization appendix E's "production wrappers" add
    assert load_config(profile="paper").stages.prompts == "paper" and load_config().stages.prompts == "finmbs"


async def test_the_paper_profile_asks_with_appendix_e_templates(tmp_path, openai_server):
    agents = {"s": Agent(capacity=1, boost=2, partial=0.875)}
    _, config = context(openai_server, tmp_path, agents, N=4, N_leaf=2, prompts="paper")
    await run_grow(config, [SEED], tmp_path / "run")
    for task, name in (("decompose", "decompose"), ("leaf", "leaf_harder"), ("compose", "compose_parent")):
        sent = asks(openai_server, task)
        assert sent and all(APPENDIX_E[name] in r.text for r in sent), task
        assert not any(extra in r.text for r in sent for extra in FINMBS_WORDING), task
    openai_server.reset()
    await run_grow(config, [SEED], tmp_path / "direct", method="direct")
    [ask] = asks(openai_server, "direct")
    assert APPENDIX_E["direct_synthesis"] in ask.text and "holding 4 problems" in ask.text


def test_the_third_pass_switches_are_in_the_paper_table_and_differ_by_default():
    # issue 48: each behaviour the paper does not describe has its switch, at the paper's value in the profile
    paper_values = {
        "stages.answer_leaks": [],
        "stages.easy_seeds": "decompose",
        "stages.prompts": "paper",
        "stages.reground_document": "whole",
        "stages.reground_judge": False,
        "stages.reground_screen": False,
        "stages.N_direct": 1,
        "quality.direct": True,
        "verify.math_judge": True,
        "stages.compose_all_trials": True,  # every passing trial a version (table 10: more roots than seeds)
    }
    assert {k: PAPER_VALUES[k] for k in paper_values} == paper_values
    paper, finmbs = load_config(profile="paper"), load_config()
    for key, value in paper_values.items():
        section, name = key.split(".")
        assert getattr(getattr(paper, section), name) == value, key
    changed = [k for k in paper_values if getattr(getattr(finmbs, k.split(".")[0]), k.split(".")[1]) != paper_values[k]]
    assert changed == [k for k in paper_values if k != "quality.direct"]  # quality.direct: on in both


@pytest.mark.parametrize(
    "text, company, period",
    [
        (  # words joined by no-break spaces, as pymupdf reads many filings' PDFs
            "For\xa0the\xa0fiscal\xa0year\xa0ended\xa0December\xa031,\xa02018\nCommission\xa0file\xa0number\xa0001-01011\n"
            "CVS\xa0HEALTH\xa0CORPORATION\n(Exact\xa0name\xa0of\xa0registrant\xa0as\xa0specified\xa0in\xa0its\xa0charter)\n",
            "CVS HEALTH CORPORATION",
            "December 31, 2018",
        ),
        (  # the name and its legal form on two lines
            "FORM 8-K\nDate of Report (Date of earliest event\nreported): July 1, 2022 (June 30,\n2022)\n\xa0\nAMCOR\nPLC\n"
            "(Exact\nname of registrant as specified in its charter)\n",
            "AMCOR PLC",
            "July 1, 2022",
        ),
        (  # the name is a logo: the line above is the file number, which is no name
            "For the fiscal year ended December 31, 2017\nCommission File Number 001-02217\n"
            "(Exact name of Registrant as specified in its charter)\n",
            None,
            "December 31, 2017",
        ),
        (  # an earnings release names its company with its listing
            "New Brunswick, N.J. (January 24, 2023) – Johnson & Johnson (NYSE: JNJ) today announced results",
            "Johnson & Johnson",
            None,
        ),
        (
            "BOLINGBROOK, Ill.--(BUSINESS WIRE)-- Ulta Beauty, Inc. (NASDAQ: ULTA) today announced",
            "Ulta Beauty, Inc.",
            None,
        ),
    ],
)
def test_a_filing_without_a_manifest_or_telling_file_name_names_its_company_and_period(text, company, period):
    # written from the tuning half's covers (bench_retrieval held_out), except the two-line name, added after
    # reading one held-out 8-K while diagnosing (docs/measurements.md says so)
    doc = ParsedDocument(text=text)
    cover_page(doc, text)
    assert (doc.company, doc.period) == (company, period)


@pytest.mark.parametrize(
    "text, company",
    [
        (  # the cover's name is a logo; the report says whom its terms mean
            'In this report, the terms "The Acme Beverage Company," "Company," "we," "us" and "our" mean The Acme '
            "Beverage Company and all entities included in our consolidated financial statements.",
            "The Acme Beverage Company",
        ),
        (  # a party a contract defines is not what a report's terms mean
            "among Globex Holdings, Inc. (together with its subsidiaries, the “Company”) and the lenders",
            None,
        ),
        ("The Registrant (the “Company”) had no sales.", None),
    ],
)
def test_a_filing_whose_cover_name_is_a_logo_is_named_by_its_definition_of_the_company(text, company):
    # the cover reader's fallback (fitted on one tuning-half 10-K whose cover name is an image)
    doc = ParsedDocument(text=text)
    cover_page(doc, text)
    defined_company(doc, text)
    assert doc.company == company
    named = ParsedDocument(text=text, company="Initech")
    defined_company(named, text)
    assert named.company == "Initech"  # a name the cover or a manifest gave stays
