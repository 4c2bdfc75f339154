"""End to end: `finmbs eval` and `finmbs eval compare` through the CLI against the scripted OpenAI server.

The server plays the evaluated model with a known mix of correct, wrong and refusing samples per
question (told apart by the sample index the gateway sends as `seed`), and the judge for the finance
answers the comparer cannot decide; the reported pass@1 / pass@5 must be exact.
"""

from __future__ import annotations

import json
from fractions import Fraction as F

import pytest
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.testing.server import Request
from finmbs.testing.world import blocks

runner = CliRunner()

# AIME 2024, first three problems (answers 204, 113, 371): per question, the text of samples 0..7.
AIME = {
    "Every morning Aya": ["The walk takes \\boxed{204} minutes."] * 8,
    "Let $ABC$ be a triangle": ["\\boxed{113}"] * 3 + ["\\boxed{7}"] * 4 + ["I cannot determine the answer."],
    "regular octagon": ["\\boxed{1}"] * 6 + [""] * 2,
}
# FinanceBench, first three questions.
FINANCE = {
    "net PPNE for 3M": ["Final answer: $8.70"] * 5
    + ["Final answer: $9.99"] * 2
    + ["I cannot answer this without the balance sheet."],
    "capital-intensive": ["Final answer: No, capex is about 5% of revenue."] * 2  # comparer undecided: judge
    + ["Final answer: Yes, it is capital intensive."] * 6,  # comparer: different
    "operating margin change": ["Final answer: it fell by 1.7% because of litigation charges and a lower gross margin."]
    * 3
    + ["Final answer: it fell by 1.7% on higher sales volumes."] * 5,  # both undecided: the judge decides
}
JUDGE_MARK = "Decide whether the PREDICTED answer means the same"


def policy_and_judge(script: dict[str, list[str]]):
    def handle(request: Request) -> str:
        text = request.text
        if JUDGE_MARK in text:
            [predicted] = blocks(text, "predicted")
            equal = "litigation" in predicted or "capex" in predicted
            return json.dumps({"equal": equal, "reason": "scripted"})
        for marker, samples in script.items():
            if marker in text:
                return samples[request.body["seed"]]
        raise AssertionError(f"unexpected prompt: {text[:200]}")

    return handle


def answer_870(prompts: list[str]):
    """A policy that records each prompt and always answers $8.70."""

    def handle(request: Request) -> str:
        prompts.append(request.text)
        return "Final answer: $8.70"

    return handle


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def eval_args(shared_data, tmp_path, server, bench: str, *extra: str, limit: int = 3) -> list[str]:
    return [
        "eval",
        bench,
        "--model",
        "openai/policy",
        "--api-base",
        server.base_url,
        "--data",
        str(shared_data / bench),
        "-n",
        "8",
        "--max-tokens",
        "64",
        "--limit",
        str(limit),
        "--set",
        f"cache_path={tmp_path / 'cache.sqlite'}",
        *extra,
    ]


def test_math_eval_exact_pass_at_k_refusals_and_resume(openai_server, shared_data, tmp_path):
    openai_server.handler = policy_and_judge(AIME)
    out = tmp_path / "results"
    args = eval_args(shared_data, tmp_path, openai_server, "aime2024", "--k", "1,5", "--out", str(out))
    result = invoke(*args)
    assert openai_server.request_count == 24
    stem = "aime2024-closed-book-openai_policy-n8-t1-L64-limit3"
    data = json.loads((out / f"{stem}.json").read_text())
    overall = data["metrics"]["overall"]
    assert overall["pass_at"]["pass@1"]["value"] == pytest.approx(float(F(1) + F(3, 8)) / 3)
    assert overall["pass_at"]["pass@5"]["value"] == pytest.approx(float((F(1) + F(55, 56)) / 3))
    assert (overall["questions"], overall["samples"], overall["correct"], overall["refusals"]) == (3, 24, 11, 3)
    assert data["n"] == 8 and data["temperature"] == 1.0 and data["max_tokens"] == 64 and data["judge"] is None
    assert [q["id"] for q in data["questions"]] == ["60", "61", "62"]
    assert [s["correct"] for s in data["questions"][1]["samples"]] == [True] * 3 + [False] * 5
    assert data["questions"][1]["samples"][7]["decided_by"] == "refusal"
    assert "| overall | 3 | 45.8 [" in result.output and "3/24" in result.output
    assert (out / f"{stem}.md").read_text().startswith("### aime2024 (closed-book)")

    refused = runner.invoke(app, args)  # the same settings again: the result is not replaced silently
    assert refused.exit_code == 2 and f"{stem}.json exists" in refused.output and "--overwrite" in refused.output
    again = invoke(*args, "--overwrite")  # a rerun (or a killed run started again) is answered from the cache
    assert openai_server.request_count == 24
    assert json.loads((out / f"{stem}.json").read_text())["metrics"] == data["metrics"]
    assert "| overall | 3 | 45.8 [" in again.output


def test_finance_eval_comparer_then_judge_exact_numbers_per_type(openai_server, shared_data, tmp_path):
    openai_server.handler = policy_and_judge(FINANCE)
    out = tmp_path / "fb.json"
    judge = [
        "--set",
        "roles.judge.model=openai/judge",
        "--set",
        f"roles.judge.api_base={openai_server.base_url}",
        "--set",
        "roles.judge.chat=true",
    ]
    # a partial run (killed after two questions), then the full run: finished samples are not asked again
    invoke(*eval_args(shared_data, tmp_path, openai_server, "financebench", *judge, "--out", str(out), limit=2))
    assert openai_server.request_count == 16 + 1
    invoke(*eval_args(shared_data, tmp_path, openai_server, "financebench", *judge, "--out", str(out), "--overwrite"))
    judge_calls = [r for r in openai_server.requests if JUDGE_MARK in r.text]
    assert len(judge_calls) == 3  # three distinct undecided answers; repeated ones come from the cache
    assert openai_server.request_count == 24 + 3

    data = json.loads(out.read_text())
    m = data["metrics"]
    assert data["judge"]["model"] == "openai/judge" and data["k"] == [1, 5]
    assert m["overall"]["pass_at"]["pass@1"]["value"] == pytest.approx(10 / 24)
    assert m["overall"]["pass_at"]["pass@5"]["value"] == pytest.approx(161 / 168)
    assert m["metrics-generated"]["pass_at"]["pass@1"]["value"] == pytest.approx(5 / 8)
    assert m["metrics-generated"]["pass_at"]["pass@5"]["value"] == pytest.approx(1.0)
    assert m["domain-relevant"]["pass_at"]["pass@1"]["value"] == pytest.approx(5 / 16)
    assert m["domain-relevant"]["pass_at"]["pass@5"]["value"] == pytest.approx(105 / 112)
    assert (m["overall"]["refusals"], m["overall"]["judged"]) == (1, 10)
    ci = m["overall"]["pass_at"]["pass@1"]
    assert ci["ci_low"] <= ci["value"] <= ci["ci_high"]
    by = {q["id"]: [s["decided_by"] for s in q["samples"]] for q in data["questions"]}
    assert by["financebench_id_04672"] == ["comparer"] * 7 + ["refusal"]
    assert by["financebench_id_00499"] == ["judge"] * 2 + ["comparer"] * 6
    assert set(by["financebench_id_01226"]) == {"judge"}
    assert data["usage"]["judge"]["calls"] == 2 and data["usage"]["policy"]["calls"] == 8


def test_eval_compare_shows_deltas_with_paired_ci(openai_server, shared_data, tmp_path):
    openai_server.handler = policy_and_judge(AIME)
    base, trained = tmp_path / "base.json", tmp_path / "trained.json"
    invoke(*eval_args(shared_data, tmp_path, openai_server, "aime2024", "--k", "1,5", "--out", str(base)))
    better = {**AIME, "regular octagon": ["\\boxed{371}"] * 4 + ["\\boxed{1}"] * 4}
    openai_server.handler = policy_and_judge(better)
    invoke(
        *eval_args(
            shared_data,
            tmp_path,
            openai_server,
            "aime2024",
            "--k",
            "1,5",
            "--out",
            str(trained),
            "--set",
            f"cache_path={tmp_path / 'other.sqlite'}",
        )
    )
    table = tmp_path / "compare.md"
    result = invoke("eval", "compare", str(base), str(trained), "--out", str(table))
    # pass@1: (1 + 3/8 + 0)/3 -> (1 + 3/8 + 4/8)/3, delta +16.7 points; pass@5 third question 0 -> 1
    assert "| overall | pass@1 | 45.8 | 62.5 | +16.7 |" in result.output
    assert "| overall | pass@5 | 66.1 | 99.4 | +33.3 |" in result.output
    assert table.read_text() == result.stdout.strip() + "\n"


def test_bad_input_is_skipped_and_the_run_continues(openai_server, shared_data, tmp_path):
    rows = (shared_data / "financebench" / "financebench_open_source.jsonl").read_text().splitlines()
    present = next(r for r in rows if '"doc_name":"3M_2018_10K"' in r)
    missing_pdf = next(r for r in rows if '"doc_name":"3M_2023Q2_10Q"' in r)
    data = tmp_path / "fb.jsonl"
    data.write_text("\n".join([present, "{broken", missing_pdf, present]) + "\n")
    prompts: list[str] = []
    openai_server.handler = answer_870(prompts)
    out = tmp_path / "r.json"
    result = invoke(
        "eval",
        "financebench",
        "--model",
        "openai/policy",
        "--api-base",
        openai_server.base_url,
        "--data",
        str(data),
        "--mode",
        "oracle",
        "--pdf-dir",
        str(shared_data / "financebench" / "pdfs"),
        "-n",
        "2",
        "--k",
        "1",
        "--judge",
        "none",
        "--set",
        f"cache_path={tmp_path / 'c.sqlite'}",
        "--out",
        str(out),
    )
    result_data = json.loads(out.read_text())
    reasons = {s["id"]: s["reason"] for s in result_data["skipped"]}
    assert reasons["fb.jsonl:line 2"].startswith("malformed row: not valid JSON")
    assert reasons["fb.jsonl:line 4"] == "malformed row: duplicate id 'financebench_id_04672'"
    assert reasons["financebench_id_00807"] == "evidence PDF 3M_2023Q2_10Q.pdf not found in " + str(
        shared_data / "financebench" / "pdfs"
    )
    assert "skipped" in result.output and "3M_2023Q2_10Q.pdf" in result.output
    assert result_data["metrics"]["overall"]["pass_at"]["pass@1"]["value"] == 1.0
    assert len(prompts) == 2 and "Accounts receivable — net of allowances" in prompts[0]  # the real PDF page


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", "nosuch", "--model", "target"], "unknown benchmark 'nosuch'; known: aime2024"),
        (["eval", "aime2024", "--model", "target", "-n", "2", "--k", "1,5"], "k=[5] with n=2"),
        (["eval", "aime2024", "--model", "target", "--mode", "oracle"], "modes closed-book, not 'oracle'"),
        (["eval", "aime2024", "--model", "target", "-n", "0"], "invalid n: Input should be greater than or equal to 1"),
        (["eval", "aime2024", "--model", "nobody"], "'nobody' is neither a role or endpoint of the config"),
        (["eval", "compare", "missing-a.json", "missing-b.json"], "eval result not found: missing-a.json"),
    ],
)
def test_usage_errors_are_one_clear_line(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default config's cache and results are relative to the working folder
    result = runner.invoke(app, args)
    assert result.exit_code != 0
    assert message in " ".join(result.output.split())
    assert list(tmp_path.iterdir()) == []  # nothing written: no response cache opened, no result folder


def test_retrieval_mode_reads_the_company_documents_from_a_real_index(openai_server, shared_data, tmp_path):
    from finmbs.config import IndexSettings
    from finmbs.ingest import ingest_paths

    rows = [
        json.loads(line)
        for line in (shared_data / "financebench" / "financebench_open_source.jsonl").read_text().splitlines()
    ]
    docs = tmp_path / "docs"
    docs.mkdir()
    for doc_name in ("3M_2018_10K", "ADOBE_2017_10K"):  # each document: its real evidence pages as text
        pages = [e["evidence_text_full_page"] for r in rows if r["doc_name"] == doc_name for e in r["evidence"]]
        (docs / f"{doc_name}.txt").write_text("\n\n".join(pages))
    index = tmp_path / "index"
    ingest_paths([docs], IndexSettings(path=str(index)), show_progress=False)
    prompts: list[str] = []
    openai_server.handler = answer_870(prompts)
    out = tmp_path / "r.json"
    invoke(
        "eval",
        "financebench",
        "--model",
        "openai/policy",
        "--api-base",
        openai_server.base_url,
        "--data",
        str(shared_data / "financebench"),
        "--mode",
        "retrieval",
        "--retrieval-k",
        "2",
        "--limit",
        "1",
        "-n",
        "1",
        "--k",
        "1",
        "--judge",
        "none",
        "--out",
        str(out),
        "--set",
        f"cache_path={tmp_path / 'c.sqlite'}",
        "--set",
        f"index.path={index}",
    )
    [prompt] = prompts
    assert "[3M_2018_10K" in prompt and "Property, plant and equipment" in prompt
    assert "ADOBE" not in prompt.upper()  # the question's company only
    assert json.loads(out.read_text())["metrics"]["overall"]["pass_at"]["pass@1"]["value"] == 1.0


def test_settings_name_the_result_and_each_sample_is_logged_in_full(openai_server, shared_data, tmp_path):
    openai_server.handler = policy_and_judge(AIME)
    out = tmp_path / "results"
    base = eval_args(shared_data, tmp_path, openai_server, "aime2024", "--k", "1", "--out", str(out))
    invoke(*base)
    one = [a if a != "8" else "1" for a in base]  # -n 1: a result of other settings, beside the first
    invoke(*one)
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        f"aime2024-closed-book-openai_policy-n{n}-t1-L64-limit3.{ext}"
        for n in (1, 8)
        for ext in ("json", "md", "samples.jsonl")
    ]

    logs = [
        json.loads(line)
        for line in (out / "aime2024-closed-book-openai_policy-n8-t1-L64-limit3.samples.jsonl").read_text().splitlines()
    ]
    assert len(logs) == 24 and [log["sample"] for log in logs[:8]] == list(range(8))
    second = [log for log in logs if log["id"] == "61"]
    assert second[0]["response"] == "\\boxed{113}" and second[0]["extracted"] == "113" and second[0]["correct"]
    assert second[3]["extracted"] == "7" and not second[3]["correct"] and second[3]["decided_by"] == "math"
    assert second[7]["refusal"] and second[7]["decided_by"] == "refusal"
    assert second[0]["prompt"][-1]["role"] == "user" and "Let $ABC$ be a triangle" in second[0]["prompt"][-1]["content"]
    assert {log["finish_reason"] for log in logs} == {"stop"} and all(log["completion_tokens"] > 0 for log in logs)


def test_seed_limit_fraction_and_system_prompt(openai_server, shared_data, tmp_path):
    seen: list[dict] = []

    def handle(request: Request) -> str:
        seen.append(request.body)
        return "\\boxed{204}"

    openai_server.handler = handle
    system = tmp_path / "system.txt"
    system.write_text("You are a careful olympiad solver.\n")
    out = tmp_path / "r"
    args = [
        "eval",
        "aime2024",
        "--model",
        "openai/policy",
        "--api-base",
        openai_server.base_url,
        "--data",
        str(shared_data / "aime2024"),
        "-n",
        "2",
        "--k",
        "1",
        "--max-tokens",
        "64",
        "--set",
        f"cache_path={tmp_path / 'c.sqlite'}",
        "--out",
        str(out),
    ]
    invoke(*args, "--limit", "0.1", "--seed", "3", "--system-prompt", f"@{system}")
    (result,) = [p for p in out.glob("*.json")]
    data = json.loads(result.read_text())
    assert data["metrics"]["overall"]["questions"] == 3  # 10% of AIME 2024's 30 problems
    assert data["settings"]["seed"] == 3 and data["settings"]["limit"] == 0.1
    assert result.name.startswith("aime2024-closed-book-openai_policy-n2-t1-L64-limit0.1-seed3-sys")
    assert sorted({body["seed"] for body in seen}) == [6, 7]  # seed 3 draws sample indices 6 and 7
    assert all(
        body["messages"][0] == {"role": "system", "content": "You are a careful olympiad solver."} for body in seen
    )
    bad = runner.invoke(app, [*args, "--limit", "1.5"])
    assert bad.exit_code == 2 and "--limit must be a count >= 1 or a fraction within (0, 1]" in bad.output


def test_embedded_model_note_only_where_a_teacher_or_judge_is_used(openai_server, shared_data, tmp_path):
    openai_server.handler = policy_and_judge(AIME)
    result = invoke(
        *eval_args(shared_data, tmp_path, openai_server, "aime2024", "--k", "1", "--out", str(tmp_path / "r.json"))
    )
    assert "embedded Gemma 3 270M" not in result.output  # a math benchmark asks neither a teacher nor a judge


def test_eval_and_calibrate_name_a_missing_key_before_any_call(openai_server, shared_data, tmp_path, monkeypatch):
    monkeypatch.delenv("FINMBS_NO_POLICY_KEY", raising=False)
    openai_server.handler = policy_and_judge(AIME)
    hosted = [
        "--set",
        "roles.target.model=openai/policy",
        "--set",
        f"roles.target.api_base={openai_server.base_url}",
        "--set",
        "roles.target.api_key_env=FINMBS_NO_POLICY_KEY",
        "--set",
        "roles.judge.model=openai/judge",
        "--set",
        f"roles.judge.api_base={openai_server.base_url}",
        "--set",
        f"cache_path={tmp_path / 'c.sqlite'}",
    ]
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "p", "question": "Compute 2 + 2.", "answer": "4"}) + "\n")
    commands = {
        "eval": [
            "eval",
            "aime2024",
            "--model",
            "target",
            "--data",
            str(shared_data / "aime2024"),
            "-n",
            "2",
            "--max-tokens",
            "64",
            "--limit",
            "3",
            "--out",
            str(tmp_path / "r.json"),
            *hosted,
        ],
        "calibrate": ["calibrate", str(problems), "--out", str(tmp_path / "a.jsonl"), "-n", "2", *hosted],
    }
    for name, args in commands.items():
        result = runner.invoke(app, args)
        assert result.exit_code in (1, 2), (name, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "before any model call" in lines[0] and "FINMBS_NO_POLICY_KEY" in lines[0], name
        assert openai_server.request_count == 0 and not (tmp_path / "r.json").exists(), name
    monkeypatch.setenv("FINMBS_NO_POLICY_KEY", "sk-test")  # with the key set, the same eval runs
    assert runner.invoke(app, commands["eval"]).exit_code == 0 and openai_server.request_count == 6
