"""Small run folders built from records (a math run and a finance run with snippets) for export/report tests."""

from __future__ import annotations

from pathlib import Path

from finmbs.records import (
    Decision,
    DecompositionTree,
    DifficultyReport,
    Problem,
    Provenance,
    Rejection,
    RoleUsage,
    RunMetrics,
    Snippet,
    SyntheticTree,
    Trace,
    TreeNode,
)
from finmbs.runs import JsonlLog, RunDir, atomic_write_json, atomic_write_text


def report(k: int, n: int = 8, in_budget: bool | None = None) -> DifficultyReport:
    band = "hard" if k == 0 else "stale" if k == n else "goldilocks"
    return DifficultyReport(
        policy="target", budget=4096, n=n, k=k, band=band, in_budget=k > 0 if in_budget is None else in_budget
    )


def problem(
    pid: str,
    question: str,
    answer: str,
    seed: str,
    path: str,
    method="mbs",
    stage="calibrate",
    snippet: Snippet | None = None,
    entity: str | None = None,
    k: int | None = None,
) -> Problem:
    meta = {"difficulty": report(k).model_dump()} if k is not None else {}
    return Problem(
        id=pid,
        question=question,
        answer=answer,
        domain="finance" if snippet else "math",
        snippet=snippet,
        entity=entity,
        meta=meta,
        provenance=Provenance(seed_id=seed, method=method, stage=stage, tree_path=path),
    )


def node(
    p: Problem,
    path: str,
    children=(),
    k: int | None = None,
    weakest: float | None = None,
    decisions=(),
    mirrors: str | None = None,
) -> TreeNode:
    return TreeNode(
        problem=p,
        path=path,
        children=list(children),
        mirrors=mirrors,
        trace=Trace(
            text=f"Work it out step by step. \\boxed{{{p.answer}}}", answer=p.answer, model="teacher-a", verified=True
        ),
        student_accuracy={"student-weak": weakest} if weakest is not None else {},
        conditioned_accuracy={"student-weak": 0.5} if children else {},
        target=report(k) if k is not None else None,
        decisions=list(decisions),
    )


def write_run(
    root: Path,
    seeds: list[Problem],
    trees: list[dict],
    qualified: list[Problem],
    rejected: list[Rejection],
    metrics: RunMetrics,
    domain: str,
) -> Path:
    run = RunDir(root)
    atomic_write_text(run.path("config.yaml"), f"domain: {domain}\nstages:\n  N: 8\n")
    JsonlLog(run.path("seeds.jsonl")).append(seeds)
    for tree in trees:
        atomic_write_json(
            run.tree_path(tree["seed"].id),
            {
                "seed": tree["seed"].model_dump(mode="json"),
                "decomposition": tree["decomposition"].model_dump(mode="json") if tree["decomposition"] else None,
                "synthetic": [t.model_dump(mode="json") for t in tree["synthetic"]],
                "dropped": tree.get("dropped"),
            },
        )
        run.mark_done(tree["seed"].id)
    JsonlLog(run.path("qualified.jsonl")).append(qualified)
    JsonlLog(run.path("rejected.jsonl"), key="problem.id").append(rejected)
    atomic_write_json(run.path("metrics.json"), metrics.summary())
    return root


USAGE = {
    "teacher": RoleUsage(
        calls=40, samples=52, prompt_tokens=61000, completion_tokens=23000, cost_usd=0.4123, cache_hits=3
    ),
    "student": RoleUsage(calls=24, samples=192, prompt_tokens=30000, completion_tokens=90000, cost_usd=0.05),
    "target": RoleUsage(calls=9, samples=72, prompt_tokens=9000, completion_tokens=40000, cost_usd=0.0),
}


def math_run(root: Path, extra_qualified: list[Problem] = ()) -> Path:
    """Three seeds: s1 grown into two synthetic trees, s2 grown into one, s3 dropped (no verified trace)."""
    s1 = problem(
        "s1",
        "Let f(x) = x^3 - 6x^2 + 11x - 6. Find the sum of the squares of the roots of f, "
        "then multiply it by the product of the roots.",
        "84",
        "s1",
        "0",
        "seed",
        "seed",
        k=0,
    )
    s2 = problem(
        "s2",
        "How many positive integers n below 1000 make n^2 + 3n + 5 divisible by 121 "
        "when n is also odd and not a multiple of seven?",
        "0",
        "s2",
        "0",
        "seed",
        "seed",
        k=0,
    )
    s3 = problem(
        "s3",
        "Find the number of ordered triples of primes (p, q, r) with p + q + r = 100 and p < q < r.",
        "11",
        "s3",
        "0",
        "seed",
        "seed",
    )
    d1 = node(
        s1,
        "0",
        k=0,
        decisions=[Decision(stage="decompose", outcome="accepted", reason="effective: 0.00 -> 0.50")],
        children=[
            node(
                problem(
                    "s1/d0.0", "Find the sum of the roots of x^3 - 6x^2 + 11x - 6.", "6", "s1", "0.0", stage="decompose"
                ),
                "0.0",
                weakest=0.75,
            ),
            node(
                problem(
                    "s1/d0.1",
                    "Find the product of the roots of x^3 - 6x^2 + 11x - 6.",
                    "6",
                    "s1",
                    "0.1",
                    stage="decompose",
                ),
                "0.1",
                weakest=0.625,
            ),
        ],
    )
    q1 = problem(
        "s1/t0/0",
        "A cubic g(x) = x^3 - 9x^2 + 26x - 24 has three real roots. Compute the sum of their "
        "squares multiplied by their product, then subtract the sum of the roots.",
        "687",
        "s1",
        "t0/0",
        k=3,
    )
    q1a = problem(
        "s1/t0/0.0",
        "Compute the sum of the roots of x^3 - 9x^2 + 26x - 24 times the middle coefficient "
        "magnitude, minus the constant term magnitude.",
        "210",
        "s1",
        "t0/0.0",
        k=5,
    )
    r1b = problem("s1/t0/0.1", "What is the product of the roots of x^3 - 9x^2 + 26x - 24?", "24", "s1", "t0/0.1")
    t0 = SyntheticTree(
        seed_id="s1",
        index=0,
        root=node(
            q1,
            "0",
            k=3,
            weakest=0.25,
            mirrors="0",
            children=[
                node(q1a, "0.0", k=5, weakest=0.5, mirrors="0.0"),
                node(
                    r1b,
                    "0.1",
                    weakest=1.0,
                    mirrors="0.1",
                    decisions=[
                        Decision(
                            stage="leaf", outcome="rejected", reason="weakest-student accuracy 1.00 > alpha_leaf 0.80"
                        )
                    ],
                ),
            ],
        ),
    )
    r2 = problem(
        "s1/t1/0",
        "A cubic h(x) = x^3 - 12x^2 + 44x - 48 has three roots; find the sum of their squares.",
        "56",
        "s1",
        "t1/0",
        k=8,
    )
    t1 = SyntheticTree(
        seed_id="s1",
        index=1,
        root=node(
            r2,
            "0",
            k=8,
            weakest=0.5,
            mirrors="0",
            decisions=[Decision(stage="calibrate", outcome="rejected", reason="stale for target: 8/8")],
        ),
    )
    q2 = problem(
        "s2/t0/0",
        "How many odd positive integers n below 2000 make n^2 + 3n + 5 divisible by 121 and "
        "leave remainder 2 when divided by seven?",
        "0",
        "s2",
        "t0/0",
        k=1,
    )
    d2 = node(s2, "0", k=0)
    t2 = SyntheticTree(seed_id="s2", index=0, root=node(q2, "0", k=1, weakest=0.0, mirrors="0"))
    qualified = [q1, q1a, q2, *extra_qualified]
    rejected = [
        Rejection(problem=r1b, stage="leaf", reason="weakest-student accuracy 1.00 > alpha_leaf 0.80"),
        Rejection(
            problem=r2, stage="calibrate", reason="stale for target: 8/8", data={"difficulty": report(8).model_dump()}
        ),
    ]
    metrics = RunMetrics(
        seeds_in=3,
        seeds_done=3,
        seeds_with_trace=2,
        decompositions_effective=1,
        decompositions_attempted=2,
        descendants=5,
        goldilocks=3,
        qualified=3,
        seeds_converted=2,
        usage=USAGE,
        wall_time_s=93.5,
    )
    return write_run(
        root,
        [s1, s2, s3],
        [
            {"seed": s1, "decomposition": DecompositionTree(seed_id="s1", root=d1), "synthetic": [t0, t1]},
            {"seed": s2, "decomposition": DecompositionTree(seed_id="s2", root=d2), "synthetic": [t2]},
            {"seed": s3, "decomposition": None, "synthetic": [], "dropped": "no verified trace after 2 x 4 tries"},
        ],
        qualified,
        rejected,
        metrics,
        "math",
    )


SEED_SNIPPET = Snippet(
    text='"Applicable Rate" means, for any day, with respect to any Term SOFR Loan, 1.75% per annum, and with '
    "respect to any ABR Loan, 0.75% per annum; provided that if the Consolidated Leverage Ratio exceeds "
    "3.50:1.00, each rate increases by 0.25%.",
    doc_id="acme-credit-2023",
    source_path="acme_credit.html",
    section_path="Article I > 1.01 Defined Terms",
)
NEW_SNIPPET = Snippet(
    text='"Applicable Margin" means (a) 2.10% per annum for Eurodollar Rate Loans and (b) 1.10% per annum for '
    "Base Rate Loans; if the Total Net Leverage Ratio is greater than 4.00 to 1.00, each margin is "
    "increased by 0.50% per annum.",
    doc_id="globex-term-loan-2024",
    source_path="globex_term_loan.txt",
    section_path="Section 1.1 Definitions",
)


def finance_run(root: Path, extra_qualified: list[Problem] = (), document: Path | None = None) -> Path:
    """One finance seed with a re-grounded synthetic tree on an unseen document (optionally a real file)."""
    grounding = NEW_SNIPPET.model_copy(update={"source_path": str(document)}) if document else NEW_SNIPPET
    seed = problem(
        "f1",
        "What is the Applicable Rate for a Term SOFR Loan when the Consolidated Leverage Ratio is 3.75:1.00?",
        "2.00%",
        "f1",
        "0",
        "seed",
        "seed",
        snippet=SEED_SNIPPET,
        entity="Acme Corp",
        k=0,
    )
    q = problem(
        "f1/t0/0",
        "For Globex, what is the Applicable Margin on a Eurodollar Rate Loan when the Total Net "
        "Leverage Ratio is 4.25 to 1.00, expressed in basis points?",
        "260 bps",
        "f1",
        "t0/0",
        snippet=grounding,
        entity="Globex Inc.",
        k=4,
    )
    rq = problem(
        "f1/t0/0.0",
        "For Globex, what is the Applicable Margin on Base Rate Loans?",
        "1.10%",
        "f1",
        "t0/0.0",
        snippet=grounding,
        entity="Globex Inc.",
        k=8,
    )
    decomposition = DecompositionTree(
        seed_id="f1",
        root=node(
            seed,
            "0",
            k=0,
            children=[
                node(
                    problem(
                        "f1/d0.0",
                        "What is the base Applicable Rate for a Term SOFR Loan?",
                        "1.75%",
                        "f1",
                        "0.0",
                        stage="decompose",
                        snippet=SEED_SNIPPET,
                        entity="Acme Corp",
                    ),
                    "0.0",
                    weakest=0.875,
                )
            ],
        ),
    )
    synthetic = SyntheticTree(
        seed_id="f1",
        index=0,
        grounding=grounding,
        entity="Globex Inc.",
        root=node(
            q,
            "0",
            k=4,
            weakest=0.25,
            mirrors="0",
            children=[
                node(
                    rq,
                    "0.0",
                    k=8,
                    weakest=1.0,
                    mirrors="0.0",
                    decisions=[Decision(stage="calibrate", outcome="rejected", reason="stale for target: 8/8")],
                )
            ],
        ),
    )
    metrics = RunMetrics(
        seeds_in=1,
        seeds_done=1,
        seeds_with_trace=1,
        decompositions_effective=1,
        decompositions_attempted=1,
        descendants=2,
        goldilocks=1,
        qualified=1,
        seeds_converted=1,
        usage={"teacher": USAGE["teacher"], "judge": RoleUsage(calls=5, samples=5, cost_usd=0.01)},
    )
    return write_run(
        root,
        [seed],
        [{"seed": seed, "decomposition": decomposition, "synthetic": [synthetic]}],
        [q, *extra_qualified],
        [Rejection(problem=rq, stage="calibrate", reason="stale for target: 8/8")],
        metrics,
        "finance",
    )
