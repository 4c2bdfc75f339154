"""`finmbs report`: one self-contained HTML file (inline CSS, JS and SVG; no server, no CDN)."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from finmbs.report.assets import assets
from finmbs.report.charts import Chart, bar_chart
from finmbs.report.drift import drift_charts
from finmbs.report.view import BANDS, ReportView, band_of, build_view
from finmbs.runs.folder import atomic_write_text
from finmbs.runs.load import load_run

TEMPLATES = Path(__file__).parent / "templates"


def charts(view: ReportView) -> list[Chart]:
    """The band histogram (seeds vs synthetic) and the histogram of target pass counts k over 0..N."""
    band_chart = bar_chart(
        "Target-policy bands",
        [(group, [(band, view.bands[group][band]) for band in BANDS]) for group in ("seeds", "synthetic")],
        x_title="problems",
    )
    k_chart = bar_chart(
        f"Synthetic candidates by target pass count k of N = {view.rollouts}",
        [(str(k), [(band_of(k, view.rollouts), sum(by_band.values()))]) for k, by_band in view.pass_rates.items()],
        x_title="correct rollouts k",
        width=max(460, min(1100, 60 + 26 * len(view.pass_rates))),
    )
    if view.other_n:
        k_chart.note = f"{view.other_n} candidate(s) evaluated with another number of rollouts are not drawn."
    return [band_chart, k_chart]


def render_report(run_dir: str | Path) -> str:
    view = build_view(load_run(run_dir))
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html", "j2"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("report.html.j2").render(
        view=view, charts=charts(view), drift_charts=drift_charts(view.drift), bands=BANDS, assets=assets()
    )


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Render the report of a run folder to `out` (default RUN/report.html), atomically."""
    path = Path(out) if out is not None else Path(run_dir) / "report.html"
    atomic_write_text(path, render_report(run_dir))
    return path
