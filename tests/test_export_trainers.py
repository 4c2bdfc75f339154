"""From a run to a trainer: held-out splits, the TRL format and reward, veRL's own loader, the dataset card,
empty exports, roots only, and --push-to-hub without a network."""

from __future__ import annotations

import asyncio
import inspect
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from export_fixtures import math_run, problem
from typer.testing import CliRunner

from finmbs import reward
from finmbs.cli import app
from finmbs.export import EmptyExport, export_run

ROOT = Path(__file__).resolve().parents[1]


def test_default_export_holds_out_a_test_split_by_seed_lineage(tmp_path):
    report = export_run(math_run(tmp_path / "run"), "verl", decontaminate=False)
    assert report.split_spec == "train=0.95,test=0.05"
    assert {name: (s.rows, s.seeds) for name, s in report.splits.items()} in (
        {"train": (2, 1), "test": (1, 1)},
        {"train": (1, 1), "test": (2, 1)},
    )
    seeds = {
        name: {r["extra_info"]["seed_id"] for r in pq.read_table(Path(report.out) / f"{name}.parquet").to_pylist()}
        for name in ("train", "test")
    }
    assert seeds["train"] and seeds["test"] and not seeds["train"] & seeds["test"]


def test_dataset_card_names_run_seeds_target_budget_and_bands(tmp_path):
    report = export_run(math_run(tmp_path / "run"), "verl", split="train", decontaminate=False)
    card = (Path(report.out) / "README.md").read_text()
    assert card.startswith("---\npretty_name: finmbs verl export of run\n")
    assert "path: train.parquet" in card
    assert "- seeds: 3 in the run, 2 with exported descendants (s1, s2)" in card
    assert "- target policy: target" in card and "- budget: L = 4096 tokens, N = 8 rollouts" in card
    assert "| train | 3 | 2 | 0 | 3 | 0 | 0 |" in card  # hard, goldilocks, stale, no report
    assert "reward.custom_reward_function.path=pkg://finmbs.reward" in card
    assert str(Path(report.out) / "README.md") in report.files


def test_an_empty_export_is_an_error_unless_allowed(tmp_path):
    run = math_run(tmp_path / "run")
    (run / "qualified.jsonl").write_text("")
    with pytest.raises(EmptyExport, match=r"no qualified problems in .*qualified.jsonl"):
        export_run(run, "verl", decontaminate=False)
    assert not (run / "export").exists()
    result = CliRunner().invoke(app, ["export", str(run), "--no-decontaminate"])
    assert result.exit_code == 1 and "nothing to export" in result.output and "--allow-empty" in result.output
    result = CliRunner().invoke(app, ["export", str(run), "--no-decontaminate", "--allow-empty"])
    assert result.exit_code == 0, result.output
    assert "empty export" in result.output
    assert pq.read_table(run / "export" / "verl" / "train.parquet").num_rows == 0


def test_every_problem_dropped_as_contaminated_is_an_empty_export(tmp_path):
    seed_copy = problem(
        "s1/t9/0",
        "Let f(x) = x^3 - 6x^2 + 11x - 6. Find the sum of the squares of the roots of "
        "f, then multiply it by the product of the roots.",
        "84",
        "s1",
        "t9/0",
        k=4,
    )
    run = math_run(tmp_path / "run")
    (run / "qualified.jsonl").write_text(seed_copy.model_dump_json() + "\n")
    with pytest.raises(EmptyExport, match="all 1 qualified problems were dropped as contaminated"):
        export_run(run, "jsonl", eval_data=[])


def test_only_roots_ship_by_default_when_rows_say_their_kind(tmp_path):
    inner = problem(
        "s1/t0/0.9", "Compute 17 times 23, then add the number of primes below 20.", "399", "s1", "t0/0.9", k=2
    )
    inner.meta["kind"] = "node"
    run = math_run(tmp_path / "run", extra_qualified=[inner])
    roots = export_run(run, "jsonl", split="train", decontaminate=False)
    assert roots.not_roots == 1 and roots.splits["train"].rows == 3
    every = export_run(run, "jsonl", split="train", decontaminate=False, nodes="all")
    assert every.splits["train"].rows == 4


def _trl_inputs(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def test_trl_export_and_reward_with_grpo_calling_convention(tmp_path):
    report = export_run(math_run(tmp_path / "run"), "trl", split="train", decontaminate=False)
    inputs = _trl_inputs(Path(report.out) / "train.parquet")
    first = inputs[0]
    assert first["prompt"][0]["role"] == "user" and "<problem>" in first["prompt"][0]["content"]
    assert (first["answer"], first["data_source"], first["seed_id"], first["band"]) == (
        "687",
        "finmbs/math",
        "s1",
        "goldilocks",
    )
    # GRPOTrainer: every column but the prompt goes to the reward function as a keyword list, aligned with
    # the completions; conversational completions are lists of one assistant message.
    reward_kwargs = {
        key: [row[key] for row in inputs] for key in inputs[0] if key not in ("prompt", "completion", "completion_ids")
    }
    completions = [[{"role": "assistant", "content": f"Work. \\boxed{{{row['answer']}}}"}] for row in inputs]
    completions[1] = [{"role": "assistant", "content": "I think it is \\boxed{1}"}]
    prompts = [row["prompt"] for row in inputs]
    scores = reward.trl_reward(
        prompts=prompts, completions=completions, completion_ids=[[1]] * 3, trainer_state=None, **reward_kwargs
    )
    assert scores == [1.0, 0.0, 1.0] and all(type(s) is float for s in scores)
    assert reward.trl_reward(["\\boxed{687}", "no answer"], answer=["687", "687"]) == [1.0, 0.0]


def test_trl_reward_agrees_with_trls_own_accuracy_reward():
    """Called the way TRL's GRPOTrainer calls a reward function (TRL 1.16 `_calculate_rewards`: keyword columns,
    prompts, completion ids, trainer state, log_extra, log_metric), on inputs TRL's accuracy_reward also takes."""
    rewards = pytest.importorskip("trl.rewards", reason="trl is not installed")
    answers = ["687", "\\frac{14}{3}", "24", "0.5"]
    texts = [
        "so the total is \\boxed{687}",
        "x = \\boxed{\\dfrac{14}{3}}",
        "\\boxed{25}",
        "half: \\boxed{\\frac{1}{2}}",
    ]
    completions = [[{"role": "assistant", "content": text}] for text in texts]
    logged: dict[str, list] = {}
    ours = reward.trl_reward(
        prompts=[[{"role": "user", "content": "q"}]] * 4,
        completions=completions,
        completion_ids=[[1]] * 4,
        answer=answers,
        data_source=["finmbs/math"] * 4,
        question=["q"] * 4,
        trainer_state=None,
        log_extra=lambda column, values: logged.setdefault(column, values),
        log_metric=lambda *args: None,
    )
    theirs = rewards.accuracy_reward(completions, solution=[f"${a}$" for a in answers])
    assert ours == [1.0, 1.0, 0.0, 1.0] and ours == [float(t) for t in theirs]
    assert logged["finmbs_pred"] == ["687", "\\dfrac{14}{3}", "25", "\\frac{1}{2}"]
    assert logged["finmbs_decided_by"] == ["math"] * 4


def test_compute_score_async_matches_compute_score():
    assert inspect.iscoroutinefunction(reward.compute_score_async)  # veRL's reward loop awaits it directly
    result = asyncio.run(
        reward.compute_score_async(
            "finmbs/math",
            "\\boxed{687}",
            "687",
            {"question": "q"},
            reward_router_address=None,
            reward_model_tokenizer=None,
        )
    )
    assert result == reward.compute_score("finmbs/math", "\\boxed{687}", "687", {"question": "q"})


def test_reward_loads_through_verls_own_loader():
    """veRL 0.9.1: `reward.custom_reward_function.{path,name}` -> get_custom_reward_fn -> load_extern_object; a
    coroutine function stays one (the reward loop awaits it), a plain one runs in its thread pool."""
    import_utils = pytest.importorskip("verl.utils.import_utils", reason="verl is not installed")
    by_file = import_utils.load_extern_object(str(ROOT / "finmbs" / "reward.py"), "compute_score")
    assert by_file("finmbs/math", "\\boxed{7}", "8")["score"] == 0.0
    ppo_reward = pytest.importorskip("verl.trainer.ppo.reward", reason="verl's trainer does not import here")
    from omegaconf import OmegaConf

    for name in ("compute_score", "compute_score_async"):
        config = OmegaConf.create(
            {"reward": {"custom_reward_function": {"path": "pkg://finmbs.reward", "name": name, "reward_kwargs": {}}}}
        )
        score = ppo_reward.get_custom_reward_fn(config)
        extra = {"question": "q", "num_turns": None, "rollout_reward_scores": {}}  # what the naive manager adds
        if inspect.iscoroutinefunction(score):
            assert name == "compute_score_async"
            result = asyncio.run(
                score(data_source="finmbs/math", solution_str="\\boxed{7}", ground_truth="7", extra_info=extra)
            )
        else:
            result = score(data_source="finmbs/math", solution_str="\\boxed{7}", ground_truth="7", extra_info=extra)
        assert result["score"] == 1.0 and result["decided_by"] == "math"


def test_push_to_hub_offline_says_so_and_keeps_the_export(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    run = math_run(tmp_path / "run")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = CliRunner().invoke(
        app, ["export", str(run), "-f", "trl", "--no-decontaminate", "--push-to-hub", "me/finmbs-demo"]
    )
    assert result.exit_code == 1 and "offline" in result.output and "nothing was pushed" in result.output
    assert (run / "export" / "trl" / "train.parquet").is_file()

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: no network
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    result = CliRunner().invoke(
        app, ["export", str(run), "-f", "hf", "--no-decontaminate", "--push-to-hub", "me/finmbs-demo"]
    )
    assert result.exit_code == 1 and "could not push to me/finmbs-demo" in result.output
    saved = json.loads((run / "export" / "hf" / "export_report.json").read_text())
    assert saved["format"] == "hf"
