"""The stages, declared once: their names (as rejected.jsonl, the tree files' per-stage usage, metrics.json
and the progress bars write them) and the order each method runs them in."""

from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    """A stage of the paper's pipeline (section 3) or of finmbs's around it, in the order a seed meets
    them; model calls are accounted to one (`context.in_stage`) and every rejection names one."""

    TRACES = "traces"  # stage 1: rejection-sampled teacher traces (traces.py)
    DECOMPOSE = "decompose"  # stage 2: decomposition (decompose.py)
    EFFECTIVITY = "effectivity"  # stage 2: the children of an ineffective decomposition
    LEAF = "leaf"  # stage 3: harder leaf variants (leaves.py)
    COMPOSE = "compose"  # stage 4: composition (compose.py)
    DIRECT = "direct"  # the direct baseline's synthesis (appendix C, direct.py)
    REGROUND = "reground"  # stage 5: finance re-grounding on unseen documents (reground.py)
    NOVELTY = "novelty"  # finmbs's guard: a problem restating its seed, source or sibling (novelty.py)
    QUALITY = "quality"  # quality control: math problems that are not well-posed (quality.py)
    CALIBRATE = "calibrate"  # final calibration on the target policy (calibrate.py)
    VERIFY = "verify"  # `finmbs verify`: stated labels checked (labels.py)
    MINE = "mine"  # `finmbs mine`: questions written from a document's passages
    JUDGE = "judge"  # `finmbs mine`: the answerability judge
    OTHER = "other"  # model calls made outside every stage


class Progress(StrEnum):
    """Progress counters that are not stages."""

    SEEDS = "seeds"  # finished seeds
    STUDENTS = "students"  # student rollouts, in whichever stage asks for them
    PROBLEMS = "problems"  # `finmbs verify`: problems checked


class Check(StrEnum):
    """The named checks whose rejections metrics.json counts apart."""

    ANSWER_LEAK = "answer_leak"  # a subproblem revealing its parent's answer (decompose)
    PROGRAM = "program"  # verify.programs: the program failed or disagreed (programs.py)
    SLICE = "slice"  # a child of a decomposition from the program whose answer is not its slice's value
    STRUCTURE = "structure"  # novelty.structure: a leaf variant whose program has its source's skeleton (leaves.py)
    VERIFY = "verify"  # a re-grounded problem with no verified teacher trace
    SCREEN = "screen"  # a re-grounded problem its stage's weakest student solves
    OPERATOR = "operator"  # an engine operator that cannot apply to a leaf (engine_leaves.py)
    SLOTS = "slots"  # an engine-authored text that states another set of values than its givens
    ROUND_TRIP = "round_trip"  # an engine-authored text no teacher program solves to the engine's answer


# each method's stages in the order a seed passes them
METHOD_STAGES: dict[str, tuple[Stage, ...]] = {
    "mbs": (
        Stage.TRACES,
        Stage.DECOMPOSE,
        Stage.LEAF,
        Stage.COMPOSE,
        Stage.REGROUND,
        Stage.NOVELTY,
        Stage.QUALITY,
        Stage.CALIBRATE,
    ),
    "direct": (Stage.TRACES, Stage.DIRECT, Stage.REGROUND, Stage.NOVELTY, Stage.QUALITY, Stage.CALIBRATE),
}
UNTICKED = frozenset({Stage.NOVELTY})  # stages that make no model call of their own: no progress bar


def progress(method: str, reground: bool) -> list[str]:
    """The progress bars of a run of `method`, in order: seeds, then each stage that ticks (students
    after traces for MBS, whose decomposition and leaf screens sample them); re-grounding only when the
    run re-grounds."""
    stages = [s for s in METHOD_STAGES[method] if s not in UNTICKED and (reground or s != Stage.REGROUND)]
    if method == "mbs":
        stages.insert(1, Progress.STUDENTS)
    return [Progress.SEEDS, *stages]


def in_order(name: str) -> tuple[int, str]:
    """Sort key: the declared stages in their declaration order (a seed's way through them), any other
    name after them."""
    order = list(Stage)
    return (order.index(Stage(name)), "") if name in Stage._value2member_map_ else (len(order), name)
