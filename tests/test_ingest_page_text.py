"""The PDF page text built once per page (issue 62, ingest speed): `sorted_text` gives exactly what
`page.get_text(sort=True)` gives, and a ruled table's cells are read from the page's words."""

from __future__ import annotations

from pathlib import Path

import pymupdf
import pytest

from finmbs.ingest.parse import parse_pdf, sorted_text

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _statement_pdf(path: Path) -> Path:
    """A page laid out like a statement: a title, label and figure columns, a ruled grid around the rows."""
    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((72, 60), "Consolidated Balance Sheets", fontsize=12)
    page.insert_text((72, 76), "($ in millions)", fontsize=9)
    rows = [
        ("Inventories", "5,409", "5,209"),
        ("Accounts payable", "5,257", "4,873"),
        ("Total assets", "12,901", "13,049"),
    ]
    rows += [(f"Other item {i}", f"{i},10{i}", f"{i},20{i}") for i in range(1, 6)]
    for i, (label, a, b) in enumerate(rows):
        y = 110 + 20 * i
        page.insert_text((76, y), label, fontsize=10)
        page.insert_text((300, y), a, fontsize=10)
        page.insert_text((400, y), b, fontsize=10)
        page.draw_line((72, y + 5), (480, y + 5))
    for x in (72, 290, 390, 480):
        page.draw_line((x, 95), (x, 110 + 20 * (len(rows) - 1) + 5))
    page.draw_line((72, 95), (480, 95))
    pdf.save(path)
    return path


def test_sorted_text_is_pymupdfs_sorted_text(tmp_path: Path) -> None:
    with pymupdf.open(_statement_pdf(tmp_path / "sheet.pdf")) as pdf:
        for page in pdf:
            words = page.get_textpage(flags=pymupdf.TEXTFLAGS_TEXT).extractWORDS()
            assert sorted_text(words) == page.get_text(sort=True)
    assert sorted_text([]) == ""


def test_a_ruled_table_is_read_from_the_words_of_its_cells(tmp_path: Path) -> None:
    doc = parse_pdf(_statement_pdf(tmp_path / "sheet.pdf"))
    assert doc.n_tables == 1
    assert "| Inventories | 5,409 | 5,209 |" in doc.text
    assert "| Accounts payable | 5,257 | 4,873 |" in doc.text


@pytest.mark.skipif(not (SHARED / "financebench/pdfs").is_dir(), reason="shared data folder not found")
def test_sorted_text_on_a_real_filing() -> None:
    with pymupdf.open(SHARED / "financebench/pdfs/FOOTLOCKER_2022_8K_dated-2022-05-20.pdf") as pdf:
        for page in pdf:
            words = page.get_textpage(flags=pymupdf.TEXTFLAGS_TEXT).extractWORDS()
            assert sorted_text(words) == page.get_text(sort=True)
