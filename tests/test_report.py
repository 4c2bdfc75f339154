"""`finmbs report`: a self-contained HTML file, checked in headless Chromium (DOM, clicks, a screenshot)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from pathlib import Path

import pytest
from export_fixtures import finance_run, math_run
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.report import render_report, write_report


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Chromium driven by selenium (Debian packages chromium and chromium-driver)."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver_path:
        pytest.skip("chromium / chromedriver not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1800",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    yield driver
    driver.quit()


def test_report_in_a_real_browser(tmp_path, browser):
    from selenium.webdriver.common.by import By

    path = write_report(math_run(tmp_path / "run"))
    browser.get(path.resolve().as_uri())
    assert "finmbs report" in browser.title

    metrics = {
        row.get_attribute("data-metric"): row.find_element(By.TAG_NAME, "td").text
        for row in browser.find_elements(By.CSS_SELECTOR, "#metrics tr")
    }
    assert metrics["qualified"] == "3 (60.0%)" and metrics["decompositions"] == "1 / 2"
    assert metrics["seed_conversion"] == "2 (66.7%) of 3 finished, 3 in" and metrics["wall_time_s"] == "93.5 s"

    bars = {
        (b.get_attribute("data-group"), b.get_attribute("data-series")): int(b.get_attribute("data-count"))
        for b in browser.find_elements(By.CSS_SELECTOR, "#bands figure:first-of-type rect.bar")
    }
    assert bars == {
        ("seeds", "hard"): 2,
        ("seeds", "goldilocks"): 0,
        ("seeds", "stale"): 0,
        ("synthetic", "hard"): 0,
        ("synthetic", "goldilocks"): 3,
        ("synthetic", "stale"): 1,
    }
    heights = {
        key: float(b.get_attribute("height"))
        for key, b in zip(bars, browser.find_elements(By.CSS_SELECTOR, "#bands figure:first-of-type rect.bar"))
    }
    assert heights[("synthetic", "goldilocks")] == pytest.approx(3 * heights[("synthetic", "stale")])
    teacher = browser.find_element(By.CSS_SELECTOR, "#usage-table tr[data-role=teacher]").text
    assert "40" in teacher and "61,000" in teacher and "0.4123" in teacher

    # the tree browser: the first seed is open, its rejected leaf's details are hidden until clicked
    node = browser.find_element(By.CSS_SELECTOR, '.node[data-id="s1/t0/0.1"]')
    body = node.find_element(By.CSS_SELECTOR, ".node-body")
    assert not body.is_displayed()
    node.find_element(By.CSS_SELECTOR, ".node-head").click()
    assert body.is_displayed()
    assert "What is the product of the roots of x^3 - 9x^2 + 26x - 24?" in body.text
    assert "leaf: weakest-student accuracy 1.00 > alpha_leaf 0.80" in body.text
    assert "student-weak 100%" in body.text
    original = browser.find_element(By.CSS_SELECTOR, '.seed[data-seed="s1"] .original .node[data-path="0.1"]')
    assert "mirrored" in original.get_attribute("class")  # the decomposition node it mirrors is marked

    # a closed seed opens on click; the dropped seed says why
    dropped = browser.find_element(By.CSS_SELECTOR, '.seed[data-seed="s3"]')
    assert not dropped.find_element(By.CSS_SELECTOR, ".seed-body").is_displayed()
    dropped.find_element(By.CSS_SELECTOR, ".seed-head").click()
    assert "Dropped: no verified trace after 2 x 4 tries" in dropped.find_element(By.CSS_SELECTOR, ".seed-body").text

    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot))
    data = shot.read_bytes()
    width, height = struct.unpack(">II", data[16:24])
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and width >= 1000 and height >= 800 and len(data) > 30_000


def test_finance_node_shows_snippet_and_entity(tmp_path, browser):
    from selenium.webdriver.common.by import By

    path = write_report(finance_run(tmp_path / "run"))
    browser.get(path.resolve().as_uri())
    node = browser.find_element(By.CSS_SELECTOR, '.synthetic .node[data-id="f1/t0/0"]')
    assert "qualified" in node.find_element(By.CSS_SELECTOR, ".node-head").text
    node.find_element(By.CSS_SELECTOR, ".node-head").click()
    body = node.find_element(By.CSS_SELECTOR, ".node-body")
    assert "Globex Inc." in body.find_element(By.CSS_SELECTOR, ".entity").text
    assert (
        "Total Net Leverage Ratio is greater than 4.00 to 1.00" in body.find_element(By.CSS_SELECTOR, ".snippet").text
    )
    assert "4/8 correct (50%), goldilocks, in-budget solvable" in body.text
    browser.find_element(By.ID, "filter").send_keys("no such seed")
    assert not browser.find_element(By.CSS_SELECTOR, '.seed[data-seed="f1"]').is_displayed()


def test_report_is_self_contained_and_escaped(tmp_path):
    run = math_run(tmp_path / "run")
    seeds = run / "seeds.jsonl"
    seeds.write_text(seeds.read_text().replace("Find the number of ordered triples", "<script>alert(1)</script>"))
    html = render_report(run)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and html.count("<script>") == 1
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_cli_report(tmp_path):
    run = finance_run(tmp_path / "run")
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    result = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "run folder not found" in result.output


def rich_math_run(root):
    """The math run with what newer runs record: extra counts, per-stage time and tokens, a dropped seed's
    failed teacher outputs, LaTeX in a question, and a long source path."""
    import json

    from finmbs.records import Problem, Provenance, Rejection

    run = math_run(root)
    metrics = json.loads((run / "metrics.json").read_text())
    metrics.update(
        seeds_too_easy=1,
        novelty_rejected=2,
        regrounded_unverified=0,
        construction_tokens=123456,
        stages={"traces": {"wall_time_s": 12.5, "tokens": 84000}, "calibrate": {"wall_time_s": 40.25, "tokens": 49000}},
    )
    (run / "metrics.json").write_text(json.dumps(metrics))
    for name in ("trees/s1.json", "qualified.jsonl"):
        file = run / name
        file.write_text(
            file.read_text()
            .replace("A cubic g(x) = x^3 - 9x^2 + 26x - 24", "A cubic $g(x) = x^3 - 9x^2 + 26x - 24$")
            .replace("Work it out step by step.", "Work it out step by step: $r_1 r_2 r_3 = 24$.")
        )
    s3 = Problem(id="s3", question="q", answer="11", provenance=Provenance(seed_id="s3"))
    with (run / "rejected.jsonl").open("a") as handle:
        handle.write(
            Rejection(
                problem=s3,
                stage="traces",
                reason="no verified trace after 1x2 tries; answers: "
                "teacher-a#0: '12' (stop), teacher-a#1: None (length)",
                data={
                    "attempts": [
                        {"text": "The triples are few, so \\boxed{12}"},
                        {"text": "Let p = 2 and then ... (cut at the token limit)"},
                    ]
                },
            ).model_dump_json()
            + "\n"
        )
    return run


def test_report_reads_well_in_a_real_browser(tmp_path, browser):
    from selenium.webdriver.common.by import By

    path = write_report(rich_math_run(tmp_path / "run"))
    browser.get(path.resolve().as_uri())
    shots = Path(os.environ.get("FINMBS_REPORT_SHOTS", tmp_path))
    assert browser.save_screenshot(str(shots / "report-top.png"))

    # rejections as short codes with counts, the funnel, numbers newer stages add, per-stage time and tokens
    codes = {
        (r.get_attribute("data-stage"), r.get_attribute("data-code")): int(r.find_elements(By.TAG_NAME, "td")[-2].text)
        for r in browser.find_elements(By.CSS_SELECTOR, "#rejections tr[data-code]")
    }
    assert codes == {
        ("calibrate", "stale"): 1,
        ("leaf", "weakest-student-accuracy"): 1,
        ("traces", "no-verified-trace"): 1,
    }
    steps = {
        r.get_attribute("data-step"): r.find_elements(By.TAG_NAME, "td")[1].text
        for r in browser.find_elements(By.CSS_SELECTOR, "#funnel tr[data-step]")
    }
    assert steps["seeds_in"] == "3" and steps["qualified"] == "3" and steps["seeds_too_easy"] == "1"
    assert steps["novelty_rejected"] == "2" and "construction_tokens" not in steps  # not a funnel step
    metrics = {
        row.get_attribute("data-metric"): row.find_element(By.TAG_NAME, "td").text
        for row in browser.find_elements(By.CSS_SELECTOR, "#metrics tr")
    }
    assert metrics["regrounded_unverified"] == "0" and metrics["construction_tokens"] == "123,456"
    stage_table = browser.find_element(By.CSS_SELECTOR, 'table[data-table="stages"]').text
    assert "traces 12.5 84,000" in stage_table and "calibrate 40.25 49,000" in stage_table

    # the k histogram spans 0..N (N = 8 from the config) with zero bars drawn as such
    ks = [
        (b.get_attribute("data-group"), int(b.get_attribute("data-count")))
        for b in browser.find_elements(By.CSS_SELECTOR, "#bands figure:nth-of-type(2) rect.bar")
    ]
    assert ks == [("0", 0), ("1", 1), ("2", 0), ("3", 1), ("4", 0), ("5", 1), ("6", 0), ("7", 0), ("8", 1)]

    # the dropped seed: why, and its teachers' outputs behind a click; its question's math is typeset
    dropped = browser.find_element(By.CSS_SELECTOR, '.seed[data-seed="s3"]')
    dropped.find_element(By.CSS_SELECTOR, ".seed-head").click()
    failed = dropped.find_element(By.CSS_SELECTOR, "details.failed")
    assert "2 unverified outputs" in failed.text and not failed.find_element(By.TAG_NAME, "ol").is_displayed()
    failed.find_element(By.TAG_NAME, "summary").click()
    assert "The triples are few, so \\boxed{12}" in failed.find_element(By.TAG_NAME, "ol").text

    first = browser.find_element(By.CSS_SELECTOR, '.synthetic .node[data-id="s1/t0/0"]')
    first.find_element(By.CSS_SELECTOR, ".node-head").click()
    body = first.find_element(By.CSS_SELECTOR, ".node-body")
    assert body.find_elements(By.CSS_SELECTOR, ".answer .katex")  # 687 typeset by the bundled KaTeX
    assert body.find_elements(By.CSS_SELECTOR, ".question .katex")  # $g(x) = ...$
    first.find_element(By.CSS_SELECTOR, ".node-body details summary").click()
    assert body.find_elements(By.CSS_SELECTOR, ".trace .katex")  # $r_1 r_2 r_3 = 24$ in the trace
    assert browser.save_screenshot(str(shots / "report-rich.png"))


def test_empty_charts_say_no_data(tmp_path, browser):
    from selenium.webdriver.common.by import By

    run = math_run(tmp_path / "run")
    for name in ("qualified.jsonl", "rejected.jsonl", "metrics.json"):
        (run / name).unlink()
    for tree in (run / "trees").glob("*.json"):
        tree.unlink()
    browser.get(write_report(run).resolve().as_uri())
    empty = browser.find_elements(By.CSS_SELECTOR, "#bands figure.nodata")  # the seeds still have their bands
    assert [figure.get_attribute("data-title") for figure in empty] == [
        "Synthetic candidates by target pass count k of N = 8"
    ]
    assert "no data" in empty[0].text and not empty[0].find_elements(By.TAG_NAME, "svg")
    assert "no data" in browser.find_element(By.ID, "funnel").text
    assert "no data" in browser.find_element(By.ID, "stage-time").text


def test_long_source_paths_wrap(tmp_path, browser):
    from selenium.webdriver.common.by import By

    long_path = "/data/" + "/".join(["a-very-long-folder-name-without-any-spaces"] * 12) + "/globex_term_loan.txt"
    run = finance_run(tmp_path / "run")
    for name in ("qualified.jsonl", "trees/f1.json", "rejected.jsonl"):
        file = run / name
        file.write_text(file.read_text().replace("globex_term_loan.txt", long_path))
    browser.set_window_size(1200, 1600)
    browser.get(write_report(run).resolve().as_uri())
    seed = browser.find_element(By.CSS_SELECTOR, '.seed[data-seed="f1"]')
    node = seed.find_element(By.CSS_SELECTOR, '.synthetic .node[data-id="f1/t0/0"]')
    node.find_element(By.CSS_SELECTOR, ".node-head").click()
    source = node.find_element(By.CSS_SELECTOR, ".source")
    assert long_path in source.text
    browser.save_screenshot(str(Path(os.environ.get("FINMBS_REPORT_SHOTS", tmp_path)) / "report-long-path.png"))
    page_width = browser.execute_script("return document.documentElement.scrollWidth")
    assert page_width <= 1200 and source.size["height"] > 2 * 16  # wrapped onto several lines, no sideways scroll


def test_report_shows_what_re_grounding_excluded(tmp_path):
    run = finance_run(tmp_path / "run")
    assert 'id="contamination"' not in render_report(run)  # no contamination.json: no section
    (run / "contamination.json").write_text(
        json.dumps(
            {
                "holdout": ["FinanceBench filings", "0000320193"],
                "excluded": [
                    {
                        "doc_id": "apple_2023_10k",
                        "why": "held out (0000320193)",
                        "title": "",
                        "company": "Apple Inc.",
                        "cik": "320193",
                    },
                    {"doc_id": "bf_credit", "why": "document of seed bf-1", "title": "", "company": None, "cik": None},
                ],
                "holdout_unmatched": ["FinanceBench filings"],
            }
        )
    )
    html = render_report(run)
    section = html[html.index('id="contamination"') :]
    section = section[: section.index("</section>")]
    assert "apple_2023_10k" in section and "Apple Inc." in section and "320193" in section
    assert "held out (0000320193)" in section and "document of seed bf-1" in section
    assert "named no indexed document: FinanceBench filings" in section


def test_funnel_rates_are_over_what_reached_each_step():
    """Issue 63: "novelty rejected 8 - 200.0% of candidates" divided by the calibrated roots, which exclude
    what novelty rejected. Each final gate's rejections are over the roots that reached it; a count drawn
    from no known whole (novelty over every node, answer leaks) gets no rate."""
    from finmbs.report.view import funnel_rows

    m = {
        "seeds_in": 2,
        "seeds_done": 2,
        "descendants": 4,
        "gated_roots": 10,  # 8 by the novelty guard, 2 by quality control
        "root_candidates": 14,
        "novelty_rejected": 11,  # 3 of them leaf variants
        "novelty_rejected_roots": 8,
        "goldilocks": 2,
        "qualified": 1,
        "answer_leaks": 5,
        "seeds_too_easy": 1,
    }
    rows = {s.key: s for s in funnel_rows(m)}
    assert rows["root_candidates"].count == 14
    assert rows["novelty_rejected_roots"].rate == "57.1% of roots at the final gates"  # 8 / 14
    assert rows["quality_rejected_roots"].count == 2
    assert rows["quality_rejected_roots"].rate == "33.3% of roots past the novelty guard"  # 2 / 6
    assert rows["descendants"].rate == "28.6% of roots at the final gates"  # 4 / 14
    assert rows["qualified"].rate == "25.0% of candidates"  # 1 / 4 calibrated
    assert rows["novelty_rejected"].rate == "" and rows["answer_leaks"].rate == "" and rows["answer_leaks"].width == 0
    assert rows["seeds_too_easy"].rate == "50.0% of seeds"
    assert all(s.width <= 100 for s in rows.values())
    # a metrics.json written before novelty_rejected_roots: the gated roots as one row, over the candidates
    del m["novelty_rejected_roots"], m["root_candidates"]
    rows = {s.key: s for s in funnel_rows(m)}
    assert "novelty_rejected_roots" not in rows and "quality_rejected_roots" not in rows
    assert rows["gated_roots"].rate == "71.4% of roots at the final gates"  # 10 / 14
