"""The dataset card written with every export (README.md): what run, seeds, target and budget, counts per band."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from finmbs.export.rows import difficulty
from finmbs.records import Problem

if TYPE_CHECKING:
    from finmbs.export.exporter import ExportReport
    from finmbs.runs.load import Run

CARD = "README.md"
BANDS = ("hard", "goldilocks", "stale")
PARQUET_FORMATS = ("verl", "trl")


def _get(data: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def target_and_budget(run: Run, problems: list[Problem]) -> tuple[str, str]:
    """The calibrating policy and its rollout budget, from the difficulty reports, else from the run config."""
    reports = [r for r in (difficulty(p) for p in problems) if r]
    policies = sorted({r.policy for r in reports})
    budgets = sorted({r.budget for r in reports})
    target = _get(run.config, "roles", "target") or {}
    policy = ", ".join(policies) or str(target.get("name") or "unknown")
    model = target.get("model")
    if model and model not in policy:
        policy += f" ({model})"
    rollouts = sorted({r.n for r in reports}) or [_get(run.config, "stages", "N")]
    budget = ", ".join(map(str, budgets)) or str(_get(run.config, "stages", "L") or "unknown")
    return policy, f"L = {budget} tokens, N = {', '.join(str(n) for n in rollouts if n) or 'unknown'} rollouts"


def band_table(splits: dict[str, list[Problem]]) -> list[str]:
    lines = ["| split | rows | seeds | " + " | ".join(BANDS) + " | no report |", "|---" * (len(BANDS) + 4) + "|"]
    for name, problems in splits.items():
        bands = Counter(r.band if r else "none" for r in (difficulty(p) for p in problems))
        seeds = len({p.provenance.seed_id or p.id for p in problems})
        cells = " | ".join(str(bands[b]) for b in BANDS)
        lines.append(f"| {name} | {len(problems)} | {seeds} | {cells} | {bands['none']} |")
    return lines


def _front_matter(report: ExportReport) -> list[str]:
    lines = ["---", f"pretty_name: finmbs {report.format} export of {report.run_name}", "tags: [finmbs, rlvr]"]
    if report.format in PARQUET_FORMATS:
        lines += ["configs:", "- config_name: default", "  data_files:"]
        lines += [f"  - split: {name}\n    path: {name}.parquet" for name in report.splits]
    return [*lines, "---", ""]


def usage_lines(report: ExportReport) -> list[str]:
    train, held = "train", next((s for s in report.splits if s != "train"), None)
    if report.format == "verl":
        val = f" data.val_files={held}.parquet" if held else ""
        return [
            "```",
            f"python3 -m verl.trainer.main_ppo data.train_files={train}.parquet{val} \\",
            "  reward.custom_reward_function.path=pkg://finmbs.reward reward.custom_reward_function.name=compute_score",
            "```",
        ]
    if report.format == "trl":
        files = ", ".join(f'"{s}": "{s}.parquet"' for s in report.splits)
        return [
            "```python",
            "from datasets import load_dataset",
            "from trl import GRPOTrainer",
            "from finmbs.reward import trl_reward",
            f'data = load_dataset("parquet", data_files={{{files}}})',
            'trainer = GRPOTrainer(model=..., reward_funcs=trl_reward, train_dataset=data["train"])',
            "```",
        ]
    if report.format == "hf":
        return ["```python", "from datasets import load_from_disk", "data = load_from_disk(FOLDER)", "```"]
    return [f"One JSON row a line: {', '.join(f'`{s}.jsonl`' for s in report.splits)}."]


def dataset_card(run: Run, report: ExportReport, splits: dict[str, list[Problem]]) -> str:
    """The card as Markdown with Hugging Face front matter."""
    kept = [p for problems in splits.values() for p in problems]
    policy, budget = target_and_budget(run, kept)
    method = run.metrics.get("method") or next((p.provenance.method for p in kept), "unknown")
    seed_ids = sorted({p.provenance.seed_id or p.id for p in kept})
    decon = (
        f"word {report.ngram}-grams against {', '.join(report.eval_sets) or 'no evaluation set'} and "
        f"{report.seeds_checked} seeds; {report.dropped} dropped, {report.flagged} flagged"
        if report.decontaminated
        else "not checked (--no-decontaminate)"
    )
    lines = [
        *_front_matter(report),
        f"# {report.run_name}: {len(kept)} calibrated RLVR problems",
        "",
        "Synthetic problems grown by finmbs (MagicBeanStalk) from verified seeds and "
        "kept only when the target policy solves them sometimes (Goldilocks) within the rollout budget.",
        "",
        f"- run: `{report.run_name}` (method {method}, domain {', '.join(sorted(report.by_domain)) or 'none'})",
        f"- seeds: {len(run.seeds)} in the run, {len(seed_ids)} with exported descendants"
        + (f" ({', '.join(seed_ids[:12])}{', ...' if len(seed_ids) > 12 else ''})" if seed_ids else ""),
        f"- target policy: {policy}",
        f"- budget: {budget}",
        f"- qualified problems in the run: {report.problems}; exported: {len(kept)}",
        f"- splits by seed lineage (all descendants of a seed stay in one split): {report.split_spec}",
        f"- decontamination: {decon}",
        "",
        "## Counts per band (target policy)",
        "",
        *band_table(splits),
        "",
        "## Use",
        "",
        *usage_lines(report),
        "",
        "Columns: `prompt` (chat messages), the ground-truth answer, `data_source` (routes `finmbs.reward`), "
        "and lineage: seed id, tree path, snippet and document hashes, band, pass rate.",
        "",
    ]
    return "\n".join(lines)
