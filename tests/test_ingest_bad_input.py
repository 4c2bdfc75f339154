"""Bad input: every broken file is skipped with its reason, the rest is ingested, the exit code says so."""

from __future__ import annotations

import json
import os

import pymupdf
import pytest
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import IndexSettings
from finmbs.ingest import ingest_paths
from finmbs.ingest.parse import ParseError, parse_file

GOOD = """# Revolving Credit Agreement

ARTICLE I
DEFINITIONS

Section 1.01 Defined Terms.

"Leverage Ratio" means, as of any date, the ratio of Consolidated Funded Debt to Consolidated EBITDA.
"""


@pytest.fixture
def bad_folder(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "good.md").write_text(GOOD)
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.7\n" + os.urandom(3000))
    (folder / "empty.pdf").write_bytes(b"")
    pdf = pymupdf.open()
    pdf.new_page().insert_text((72, 72), "Secret covenant text")
    pdf.save(folder / "encrypted.pdf", encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="owner", user_pw="user")
    blank = pymupdf.open()
    blank.new_page()
    blank.save(folder / "scanned.pdf")
    image = pymupdf.open()  # a scanned page: an image and no text layer
    pixmap = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 64, 32), False)
    pixmap.set_rect(pixmap.irect, (200, 200, 200))
    image.new_page().insert_image(pymupdf.Rect(72, 72, 272, 172), pixmap=pixmap)
    image.save(folder / "scanned-image.pdf")
    (folder / "junk.html").write_bytes(bytes(range(256)) * 40)
    (folder / "unreadable.txt").symlink_to(folder / "missing-target.txt")
    (tmp_path / "nothing").mkdir()
    (tmp_path / "nothing" / "notes.csv").write_text("a,b\n")
    return tmp_path


EXPECTED = {
    "corrupt.pdf": "corrupt or unreadable PDF",
    "empty.pdf": "empty file",
    "encrypted.pdf": "encrypted PDF",
    "scanned.pdf": "no extractable text",
    "scanned-image.pdf": "no extractable text",
    "junk.html": "binary content",
    "unreadable.txt": "unreadable",
    "nothing": "folder holds no documents",
    "absent.pdf": "not found",
}


def test_each_bad_file_skipped_with_reason_rest_ingested(bad_folder):
    settings = IndexSettings(path=str(bad_folder / "index"))
    report = ingest_paths(
        [bad_folder / "in", bad_folder / "nothing", bad_folder / "absent.pdf"], settings, show_progress=False
    )
    reasons = {os.path.basename(s.path): s.reason for s in report.skipped}
    assert set(reasons) == set(EXPECTED)
    for name, reason in EXPECTED.items():
        assert reason in reasons[name], (name, reasons[name])
    assert report.documents == 1 and report.definitions == 1 and report.failed


def test_cli_exit_code_and_json_report(bad_folder):
    runner = CliRunner()
    index = str(bad_folder / "index")
    bad = runner.invoke(app, ["ingest", str(bad_folder / "in"), "--index-path", index, "--json"])
    assert bad.exit_code == 1
    report = json.loads(bad.stdout)
    assert report["documents"] == 1 and len(report["skipped"]) == 7
    skipped = {os.path.basename(s["path"]): s["reason"] for s in report["skipped"]}
    assert skipped["scanned-image.pdf"] == "no extractable text (scanned or image-only PDF)"
    wide = runner.invoke(
        app, ["ingest", str(bad_folder / "in"), "--index-path", str(bad_folder / "index2")], env={"COLUMNS": "300"}
    )
    named = [line for line in wide.output.splitlines() if "scanned-image.pdf: no extractable text" in line]
    assert wide.exit_code == 1 and len(named) == 1  # one line of the report names the scanned PDF
    good = runner.invoke(app, ["ingest", str(bad_folder / "in" / "good.md"), "--index-path", index])
    assert good.exit_code == 0 and "unchanged" in good.output
    hits = json.loads(
        runner.invoke(app, ["search", "leverage ratio definition", "--index-path", index, "--json"]).stdout
    )
    assert hits[0]["kind"] == "definition" and hits[0]["term"] == "Leverage Ratio"
    assert hits[0]["section"] == "ARTICLE I DEFINITIONS > Section 1.01 Defined Terms"


def test_search_on_missing_index_is_one_error(tmp_path):
    """A search of an index folder that holds nothing (a typo, no ingest yet) says so and exits non-zero,
    rather than printing an empty result; the folder is not created."""
    missing = tmp_path / "no-index-here"
    result = CliRunner().invoke(app, ["search", "leverage ratio", "--index-path", str(missing)])
    assert result.exit_code == 2
    assert f"the index at {missing} holds no documents" in result.output and "finmbs ingest" in result.output
    assert not missing.exists()


def test_unsupported_extension_named():
    with pytest.raises(ParseError, match="unsupported file type '.xlsx'"):
        parse_file(__import__("pathlib").Path("contract.xlsx"))
