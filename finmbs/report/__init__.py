"""Report: a static, self-contained HTML page with run metrics, band plots and a tree browser."""

from finmbs.report.html import render_report, write_report

__all__ = ["render_report", "write_report"]
