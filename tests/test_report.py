"""`finmbs report`: a self-contained HTML file, checked in headless Chromium (DOM, clicks, a screenshot)."""

from __future__ import annotations

import re
import shutil
import struct

import pytest
from typer.testing import CliRunner

from export_fixtures import finance_run, math_run
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
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1800",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    yield driver
    driver.quit()


def test_report_in_a_real_browser(tmp_path, browser):
    from selenium.webdriver.common.by import By

    path = write_report(math_run(tmp_path / "run"))
    browser.get(path.resolve().as_uri())
    assert "finmbs report" in browser.title

    metrics = {row.get_attribute("data-metric"): row.find_element(By.TAG_NAME, "td").text
               for row in browser.find_elements(By.CSS_SELECTOR, "#metrics tr")}
    assert metrics["qualified"] == "3 (60.0%)" and metrics["decompositions"] == "1 / 2"
    assert metrics["seed_conversion"] == "2 (66.7%)" and metrics["wall_time_s"] == "93.5 s"

    bars = {(b.get_attribute("data-group"), b.get_attribute("data-series")): int(b.get_attribute("data-count"))
            for b in browser.find_elements(By.CSS_SELECTOR, "#bands figure:first-of-type rect.bar")}
    assert bars == {("seeds", "hard"): 2, ("seeds", "goldilocks"): 0, ("seeds", "stale"): 0,
                    ("synthetic", "hard"): 0, ("synthetic", "goldilocks"): 3, ("synthetic", "stale"): 1}
    heights = {key: float(b.get_attribute("height")) for key, b in zip(bars, browser.find_elements(
        By.CSS_SELECTOR, "#bands figure:first-of-type rect.bar"))}
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
    assert "Total Net Leverage Ratio is greater than 4.00 to 1.00" in body.find_element(By.CSS_SELECTOR, ".snippet").text
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
