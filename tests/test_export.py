"""`finmbs export`: veRL parquet read back the way veRL reads it, HF dataset reload, JSONL, splits, atomicity."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from export_fixtures import finance_run, math_run
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.export import RunReadError, export_run
from finmbs.export.splits import assign_splits, parse_splits
from finmbs.records import Problem, Provenance

VERL_COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info"]


@pytest.fixture
def credit_doc(shared_data: Path) -> tuple[Path, str]:
    """A real credit agreement and its SHA-256 from the data folder's manifest."""
    row = json.loads((shared_data / "credit_agreements" / "manifest.jsonl").read_text().splitlines()[0])
    return shared_data / "credit_agreements" / row["file"], row["sha256"]


def test_verl_parquet_is_what_verl_reads(tmp_path, credit_doc):
    document, sha = credit_doc
    math = export_run(math_run(tmp_path / "math"), "verl", split="train", decontaminate=False)
    finance = export_run(finance_run(tmp_path / "fin", document=document), "verl", decontaminate=False)
    assert math.splits["train"].rows == 3 and finance.splits["train"].rows == 1

    # veRL's RLHFDataset: pandas/datasets read the parquet; prompt_key="prompt" is a chat; reward reads the rest.
    table = pq.read_table(tmp_path / "fin" / "export" / "verl" / "train.parquet")
    assert table.column_names == VERL_COLUMNS
    row = table.to_pylist()[0]
    assert row["data_source"] == "finmbs/finance" and row["ability"] == "finance"
    assert row["reward_model"] == {"style": "rule", "ground_truth": "260 bps"}
    (message,) = row["prompt"]
    assert message["role"] == "user"
    assert "Total Net Leverage Ratio is greater than 4.00 to 1.00" in message["content"]  # the snippet d
    assert "For Globex, what is the Applicable Margin" in message["content"]  # the question q
    info = row["extra_info"]
    assert info["index"] == 0 and info["split"] == "train" and info["seed_id"] == "f1"
    assert info["tree_path"] == "t0/0" and info["method"] == "mbs" and info["doc_id"] == "globex-term-loan-2024"
    assert len(info["snippet_id"]) == 16 and info["document_sha256"] == sha
    assert (info["band"], info["pass_rate"], info["rollouts"], info["correct"]) == ("goldilocks", 0.5, 8, 4)
    assert info["in_budget"] is True and info["contamination"] == ""

    frame = pd.read_parquet(tmp_path / "math" / "export" / "verl" / "train.parquet")
    assert list(frame.columns) == VERL_COLUMNS
    assert set(frame["data_source"]) == {"finmbs/math"}
    first = frame.iloc[0]
    assert "<problem>\nA cubic g(x)" in first["prompt"][0]["content"]
    assert "\\boxed{ANSWER}" in first["prompt"][0]["content"]
    assert first["reward_model"]["ground_truth"] == "687"
    assert first["extra_info"]["snippet_id"] is None and first["extra_info"]["pass_rate"] == 3 / 8
    assert list(frame["extra_info"].map(lambda e: e["index"])) == [0, 1, 2]


def test_reward_scores_one_row_of_each_domain(tmp_path):
    from finmbs import reward

    export_run(math_run(tmp_path / "math"), "verl", split="train", decontaminate=False)
    export_run(finance_run(tmp_path / "fin"), "verl", decontaminate=False)
    for run, right, wrong in [
        ("math", "so the total is \\boxed{687}", "\\boxed{686}"),
        ("fin", "The margin is 2.60%. Final answer: 260 bps", "Final answer: 250 bps"),
    ]:
        row = pd.read_parquet(tmp_path / run / "export" / "verl" / "train.parquet").iloc[0]
        truth, extra = row["reward_model"]["ground_truth"], dict(row["extra_info"])
        assert reward.compute_score(row["data_source"], right, truth, extra)["score"] == 1.0
        assert reward.compute_score(row["data_source"], wrong, truth, extra)["score"] == 0.0


def test_hf_dataset_and_jsonl_hold_the_same_rows(tmp_path):
    from datasets import load_from_disk

    run = math_run(tmp_path / "run")
    verl = export_run(run, "verl", split="train=0.5,test=0.5", decontaminate=False)
    hf = export_run(run, "hf", split="train=0.5,test=0.5", decontaminate=False)
    jsonl = export_run(run, "jsonl", split="train=0.5,test=0.5", decontaminate=False)
    assert verl.splits == hf.splits == jsonl.splits
    dataset = load_from_disk(hf.out)
    assert set(dataset) == {"train", "test"}
    for split in ("train", "test"):
        parquet_rows = pq.read_table(Path(verl.out) / f"{split}.parquet").to_pylist()
        assert dataset[split].to_list() == parquet_rows
        lines = (Path(jsonl.out) / f"{split}.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in lines] == parquet_rows
    saved = json.loads((Path(hf.out) / "export_report.json").read_text())
    assert saved["format"] == "hf" and saved["splits"]["train"]["rows"] + saved["splits"]["test"]["rows"] == 3


def test_splits_keep_each_seed_in_one_split_deterministically():
    problems = [
        Problem(id=f"s{s}/{i}", question="q", answer="1", provenance=Provenance(seed_id=f"s{s}"))
        for s in range(40)
        for i in range(s % 4 + 1)
    ]
    fractions = parse_splits("train=0.8,test=0.2")
    splits = assign_splits(problems, fractions)
    assert splits == assign_splits(list(problems), fractions)
    assert sum(map(len, splits.values())) == len(problems)
    train_seeds = {p.provenance.seed_id for p in splits["train"]}
    assert not train_seeds & {p.provenance.seed_id for p in splits["test"]}
    assert 0.7 < len(splits["train"]) / len(problems) < 0.9
    for bad in ("train=0.9,test=0.2", "train=x", "a=0.5,a=0.5", "tr ain=1"):
        with pytest.raises(ValueError, match="--split"):
            parse_splits(bad)


def test_output_folder_is_replaced_whole_and_foreign_folders_are_refused(tmp_path):
    run = math_run(tmp_path / "run")
    out = tmp_path / "out"
    export_run(run, "jsonl", out=out, split="train=0.5,test=0.5", decontaminate=False)
    export_run(run, "jsonl", out=out, split="train", decontaminate=False)
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "contamination.jsonl",
        "export_report.json",
        "train.jsonl",
    ]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folders left
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a finmbs export"):
        export_run(run, "verl", out=foreign, decontaminate=False)
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_bad_records_are_named_by_file_and_line(tmp_path):
    run = math_run(tmp_path / "run")
    with (run / "qualified.jsonl").open("a") as handle:
        handle.write('{"id": "x", "question": "q"}\n')
    with pytest.raises(RunReadError, match=r"qualified.jsonl line 4: not a Problem: answer"):
        export_run(run, "verl")
    result = CliRunner().invoke(app, ["export", str(run)])
    assert result.exit_code == 2 and "qualified.jsonl line 4" in result.output


def test_cli_export_prints_and_saves_the_report(tmp_path, shared_data):
    run = math_run(tmp_path / "run")
    result = CliRunner().invoke(
        app, ["export", str(run), "--format", "jsonl", "--eval-data", str(shared_data), "--split", "train=0.5,test=0.5"]
    )
    assert result.exit_code == 0, result.output
    assert "math500 500" in result.output and "split test" in result.output
    saved = json.loads((run / "export" / "jsonl" / "export_report.json").read_text())
    assert saved["eval_sets"]["gsm8k"] == 1319 and saved["dropped"] == 0
    assert CliRunner().invoke(app, ["export", str(run), "--format", "csv"]).exit_code == 2


def test_export_and_report_a_run_grown_by_the_engine(tmp_path):
    """End to end on the engine's scripted arithmetic world: grow -> export (veRL) -> reward -> report."""
    import asyncio

    from finmbs import reward
    from finmbs.report import render_report
    from finmbs.runs.grow import run_grow
    from finmbs.testing.server import ScriptedOpenAIServer
    from finmbs.testing.world import Agent, World, question, value, world_config

    expr = "(2 + 3) * (4 - 1) + 5 * 6"
    seed = Problem(id="w0", question=question(expr), answer=str(value(expr)))
    world = World(
        agents={
            "teacher": Agent(),
            "strong": Agent(capacity=3, partial=0.5, boost=3),
            "weak": Agent(capacity=1, partial=0.5, boost=3),
            "target": Agent(capacity=7, partial=0.5),
        }
    )
    with ScriptedOpenAIServer(world) as server:
        config = world_config(
            server.base_url,
            ["teacher"],
            ["strong", "weak"],
            "target",
            str(tmp_path / "cache.db"),
            N=8,
            Nt=2,
            N_leaf=2,
            R=1,
            Nc=2,
            D=2,
            L=4096,
        )
        metrics = asyncio.run(run_grow(config, [seed], tmp_path / "run"))
    assert metrics.qualified >= 1

    report = export_run(tmp_path / "run", "verl", split="train", decontaminate=True, eval_data=[])
    assert report.problems == report.splits["train"].rows == metrics.qualified and report.dropped == 0
    rows = pq.read_table(Path(report.out) / "train.parquet").to_pylist()
    for row in rows:
        info = row["extra_info"]
        assert info["seed_id"] == "w0" and info["band"] == "goldilocks" and 0 < info["pass_rate"] < 1
        assert info["program"].startswith("answer = ")  # verify.programs: the program travels with the row
        assert info["tree_path"] and info["method"] == "mbs" and info["question"] in row["prompt"][0]["content"]
        truth = row["reward_model"]["ground_truth"]
        assert truth == str(value(info["question"].removeprefix("Compute ").rstrip(".")))
        assert reward.compute_score(row["data_source"], f"Final answer: \\boxed{{{truth}}}", truth, info)["score"] == 1
    html = render_report(tmp_path / "run")
    assert html.count('class="node') >= metrics.descendants and 'data-seed="w0"' in html
    # verify.programs: each teacher-written problem's program is shown beside it, and kept in the rows
    assert html.count('<pre class="program">answer = ') >= metrics.descendants and "child_1()" in html
