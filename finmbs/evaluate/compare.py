"""`finmbs eval compare A.json B.json`: the two results side by side, with deltas (B - A).

Each delta also gets a paired bootstrap 95% CI over the questions both runs answered.
"""

from __future__ import annotations

from finmbs.evaluate import EvalError
from finmbs.evaluate.passk import bootstrap_ci, pass_at_k
from finmbs.evaluate.results import OVERALL, EvalResult, QuestionResult, percent
from finmbs.records import Record


class DeltaRow(Record):
    """One group and metric of the comparison."""

    group: str
    metric: str
    a: float | None
    b: float | None
    delta: float | None
    paired_questions: int = 0
    delta_ci_low: float | None = None
    delta_ci_high: float | None = None


def _in_group(result: EvalResult, group: str) -> dict[str, QuestionResult]:
    return {q.id: q for q in result.questions if group == OVERALL or q.question_type == group}


def compare_results(a: EvalResult, b: EvalResult) -> list[DeltaRow]:
    """Rows for every group and pass@k either result reports; paired CI where both have the questions."""
    if a.benchmark != b.benchmark:
        raise EvalError(f"cannot compare {a.benchmark} with {b.benchmark}: different benchmarks")
    groups = list(dict.fromkeys([*a.metrics, *b.metrics]))
    ks = sorted(set(a.k) | set(b.k))
    rows = []
    for group in groups:
        qa, qb = _in_group(a, group), _in_group(b, group)
        shared = sorted(set(qa) & set(qb))
        for k in ks:
            metric = f"pass@{k}"
            va = a.metrics[group].pass_at.get(metric) if group in a.metrics else None
            vb = b.metrics[group].pass_at.get(metric) if group in b.metrics else None
            row = DeltaRow(
                group=group,
                metric=metric,
                a=va and va.value,
                b=vb and vb.value,
                delta=vb.value - va.value if va and vb else None,
            )
            if va and vb and shared:
                diffs = [pass_at_k(qb[i].n, qb[i].correct, k) - pass_at_k(qa[i].n, qa[i].correct, k) for i in shared]
                low, high = bootstrap_ci(diffs)
                row = row.model_copy(update=dict(paired_questions=len(shared), delta_ci_low=low, delta_ci_high=high))
            rows.append(row)
    return rows


def _cell(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.1f}" if signed else percent(value)


def comparison_markdown(a: EvalResult, b: EvalResult, rows: list[DeltaRow], names: tuple[str, str]) -> str:
    """A Markdown table: group, metric, A, B, delta and its paired CI (percent points)."""
    lines = [
        f"### {a.benchmark}: {names[0]} vs {names[1]}",
        "",
        f"A: {a.model.get('name')} ({a.mode}, n={a.n}); B: {b.model.get('name')} ({b.mode}, n={b.n}). "
        "Values in %; delta = B - A with a paired 95% bootstrap CI over shared questions.",
        "",
        "| group | metric | A | B | delta | delta 95% CI | paired questions |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = f"[{_cell(r.delta_ci_low, True)}, {_cell(r.delta_ci_high, True)}]" if r.delta_ci_low is not None else "-"
        lines.append(
            f"| {r.group} | {r.metric} | {_cell(r.a)} | {_cell(r.b)} | {_cell(r.delta, True)} | {ci} "
            f"| {r.paired_questions} |"
        )
    return "\n".join(lines) + "\n"
