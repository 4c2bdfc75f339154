"""What one seed yields (its trees, qualified problems, rejections and counts), and the steps every method
shares around synthesis: the seed's verified root, then the final gates of the synthetic trees in the
order a method's `grow_seed` names them: re-grounding (finance, stage 5), the novelty guard, quality
control (math) and final calibration.

What is kept (figure 1, section 3.4): the synthetic *roots*, the synthetic versions of the seed's root
(path "0"), as the paper counts them. With `stages.keep: all` every other synthetic node is calibrated
too and reported apart. Before calibration the novelty guard rejects a problem that restates its seed,
its source or a sibling (`novelty.py`), and quality control a math problem that is not well-posed
(`quality.py`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from finmbs.mbs import rebind
from finmbs.mbs.calibrate import STAGE as CALIBRATE
from finmbs.mbs.calibrate import annotate, calibrate
from finmbs.mbs.candidates import novel_problems
from finmbs.mbs.context import SECONDS, Context, Ledger, in_stage
from finmbs.mbs.engine_leaves import ENGINE, prose_tally
from finmbs.mbs.labels import program_to_answer
from finmbs.mbs.quality import STAGE as QUALITY
from finmbs.mbs.quality import well_posed
from finmbs.mbs.reground import reground_trees
from finmbs.mbs.stages import Stage
from finmbs.mbs.traces import teacher_trace
from finmbs.records import (
    ROOT_PATH,
    Decision,
    DecompositionTree,
    Problem,
    Rejection,
    SeedCounts,
    SeedTrees,
    SyntheticTree,
    Trace,
    TreeNode,
)


@dataclass
class SeedOutcome:
    """One seed's result; `tree_file()` is its trees/SEED.json record.

    `qualified` holds the qualified synthetic roots (the paper's yield); `qualified_nodes` the other
    qualified synthetic nodes, calibrated only with `stages.keep: all`. `tokens`: per-role tokens
    spent on this seed; `counts`: its counted decisions."""

    seed: Problem
    decomposition: DecompositionTree | None
    synthetic: list[SyntheticTree]
    dropped: str | None
    qualified: list[Problem]
    rejected: list[Rejection]
    qualified_nodes: list[Problem] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=dict)
    stages: dict[str, dict[str, float]] = field(default_factory=dict)  # requests, tokens, model seconds
    counts: SeedCounts = field(default_factory=SeedCounts)

    def tree_file(self) -> SeedTrees:
        return SeedTrees(
            seed=self.seed,
            decomposition=self.decomposition,
            synthetic=self.synthetic,
            dropped=self.dropped,
            tokens=self.tokens,
            counts=self.counts,
            stages={stage: {k: v for k, v in c.items() if k != SECONDS} for stage, c in self.stages.items()},
        )


def outcome(
    ctx: Context,
    seed: Problem,
    tree: DecompositionTree | None,
    synthetic: list[SyntheticTree],
    ledger: Ledger,
    *,
    dropped: str | None = None,
    roots: list[Problem] | None = None,
    others: list[Problem] | None = None,
) -> SeedOutcome:
    """Gather the seed's outcome once its last step is done (`dropped`: why it yielded no synthetic tree)."""
    ledger.count_decompositions(tree)
    return SeedOutcome(
        seed,
        tree,
        synthetic,
        dropped,
        roots or [],
        ledger.rejected,
        others or [],
        ctx.tokens(),
        ctx.stage_usage(),
        ledger.counts,
    )


async def seed_root(ctx: Context, seed: Problem, ledger: Ledger) -> TreeNode | None:
    """The root (seed, verified teacher trace); None (and a rejection) when no teacher verifies it."""
    with in_stage(Stage.TRACES):
        trace, why = await teacher_trace(ctx, seed)
        if trace is None and ctx.stages.program_roots and ctx.config.verify.programs:
            return await program_root(ctx, seed, ledger, why)
    if trace is None:
        ledger.reject(seed, Stage.TRACES, why)
        return None
    decision = Decision(stage=Stage.TRACES, outcome="accepted", reason=f"answer verified by {trace.model}")
    return TreeNode(problem=seed, trace=trace, path="0", decisions=[decision])


async def program_root(ctx: Context, seed: Problem, ledger: Ledger, missed: str) -> TreeNode | None:
    """`stages.program_roots`: a seed no prose trace verifies enters the tree when a program the teachers
    write for it without its answer (`labels.program_to_answer`) computes that answer; the program is its
    verified solution, recorded as such. None (and a rejection naming both) otherwise."""
    problem, why = await program_to_answer(ctx, seed)
    if why:
        ledger.reject(seed, Stage.TRACES, f"{missed}; and {why}")
        return None
    source = problem.meta["program"]
    writer = problem.meta.get("program_writer") or "its own program"
    trace = Trace(text=f"```python\n{source}\n```", answer=seed.answer, model=f"{writer} (program)", verified=True)
    reason = f"answer verified by a program {writer} wrote without seeing it (the prose traces missed: {missed})"
    decision = Decision(stage=Stage.TRACES, outcome="accepted", reason=reason, data={"verified_by": "program"})
    problem = problem.model_copy(update={"meta": {**problem.meta, "verified_by": "program"}})
    return TreeNode(problem=problem, trace=trace, path="0", decisions=[decision])


def synthetic_trees(seed_id: str, roots: list[TreeNode]) -> list[SyntheticTree]:
    return [SyntheticTree(seed_id=seed_id, index=i, root=root) for i, root in enumerate(roots)]


def candidates(trees: list[SyntheticTree]) -> list[TreeNode]:
    """Every synthetic node once (a node can sit in several trees), in tree order."""
    seen: dict[str, TreeNode] = {}
    for tree in trees:
        for node in tree.root.walk():
            seen.setdefault(node.problem.id, node)
    return list(seen.values())


def is_root(node: TreeNode) -> bool:
    """A synthetic root: a synthetic version of the seed's root (it parallels path "0")."""
    return node.path == ROOT_PATH


def problems_by_id(seed: Problem, tree: DecompositionTree | None, trees: list[SyntheticTree]) -> dict[str, Problem]:
    nodes = [*(tree.root.walk() if tree else []), *(n for t in trees for n in t.root.walk())]
    return {seed.id: seed, **{n.problem.id: n.problem for n in nodes}}


def sources(node: TreeNode, known: dict[str, Problem]) -> list[tuple[str, Problem]]:
    """The problems `node` was made from: the original it mirrors, its parents, what it was re-grounded from."""
    ids = [node.mirrors, node.problem.meta.get("regrounded_from"), *node.problem.provenance.parent_ids]
    return [("source", known[i]) for i in dict.fromkeys(ids) if i and i in known]


def novel(
    ctx: Context, nodes: list[TreeNode], seed: Problem, known: dict[str, Problem], ledger: Ledger
) -> list[TreeNode]:
    """The nodes that restate neither their seed, their sources nor an earlier kept sibling."""
    by_id = {n.problem.id: n for n in nodes}
    since = len(ledger.rejected)
    kept = novel_problems(
        ctx, [n.problem for n in nodes], lambda p: [("seed", seed), *sources(by_id[p.id], known)], ledger
    )
    ledger.mark_roots(since, {n.problem.id for n in nodes if is_root(n)})
    return [by_id[p.id] for p in kept]


def guarded(
    ctx: Context, seed: Problem, trees: list[SyntheticTree], known: dict[str, Problem], ledger: Ledger
) -> list[TreeNode]:
    """The synthetic nodes to calibrate (the roots; every node with keep: all) that pass the novelty guard."""
    nodes = [n for n in candidates(trees) if ctx.stages.keep == "all" or is_root(n)]
    return novel(ctx, nodes, seed, known, ledger)


def untallied(node: TreeNode) -> bool:
    """An engine-authored problem whose teacher prose traces were not drawn yet."""
    return node.problem.meta.get("authored_by") == ENGINE and "prose_traces" not in node.problem.meta


async def calibrate_nodes(ctx: Context, nodes: list[TreeNode], ledger: Ledger) -> tuple[list[Problem], list[Problem]]:
    """Final calibration: returns the qualified (roots, other nodes) and rejects the rest. An engine-authored
    problem that qualifies gets its teacher prose traces tallied here with `stages.prose_tally`
    (`engine_leaves.prose_tally`), not when it was built: they decide nothing, and half the variants built never
    qualify."""
    reports = await asyncio.gather(*(calibrate(ctx, node.problem) for node in nodes))
    if ctx.stages.prose_tally:
        await asyncio.gather(*(prose_tally(ctx, n) for n, r in zip(nodes, reports) if r.qualified and untallied(n)))
    roots: list[Problem] = []
    others: list[Problem] = []
    for node, report in zip(nodes, reports):
        node.target = report
        if report.qualified:
            kind = "root" if is_root(node) else "node"
            problem = annotate(node.problem, report)
            (roots if kind == "root" else others).append(
                problem.model_copy(update={"meta": {**problem.meta, "kind": kind}})
            )
            continue
        why = report.band if report.in_budget else f"{report.band}, not solvable in budget"
        score = f"{report.k}/{report.n} correct for {report.policy} at L={report.budget}"
        ledger.reject(node.problem, CALIBRATE, f"{why} ({score})", difficulty=report.model_dump(mode="json"))
    return roots, others


async def regrounded(
    ctx: Context, seed: Problem, synthetic: list[SyntheticTree], ledger: Ledger, *, on: bool = True
) -> list[SyntheticTree] | None:
    """Stage 5: a finance seed's synthetic trees re-grounded on unseen documents (only these go on to the
    final gates); None when the seed is not re-grounded (math, no synthetic tree, or `on` False)."""
    if seed.domain != "finance" or not synthetic or not on:
        return None
    with in_stage(Stage.REGROUND):
        return await reground_trees(ctx, seed, synthetic, ledger, rebind)


async def quality_checked(
    ctx: Context, seed: Problem, nodes: list[TreeNode], ledger: Ledger, direct: bool = False
) -> list[TreeNode]:
    """Quality control (math): the nodes the judge finds well-posed (`direct`: the direct baseline's)."""
    if seed.domain != "math":
        return nodes
    since = len(ledger.rejected)
    with in_stage(QUALITY):
        kept = await well_posed(ctx, nodes, ledger, direct)
    ledger.mark_roots(since, {n.problem.id for n in nodes if is_root(n)})
    return kept


async def calibrated(ctx: Context, nodes: list[TreeNode], ledger: Ledger) -> tuple[list[Problem], list[Problem]]:
    """Final calibration on the target policy: the qualified (roots, other nodes)."""
    with in_stage(CALIBRATE):
        return await calibrate_nodes(ctx, nodes, ledger)
