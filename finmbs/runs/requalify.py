"""`finmbs requalify` (finmbs's, not the paper's): a pool re-screened against a new policy, with each problem's
pass-rate history kept, and the training set refreshed.

The paper calibrates every problem once, for one target policy pi and one budget L (section 2: usefulness is
relative to pi and L). An RL run changes its policy at every checkpoint, so a Goldilocks pool goes stale and hard
problems move into the band. `requalify` runs the final filter again on every problem of a pool, the same
Goldilocks + in-budget screen as final calibration (`mbs.calibrate.calibrate_work`: fresh rollouts, the training
prompt), against the policy it is given, and writes beside the pool:

    OUT/history.jsonl          PassRate entries, appended and never rewritten: per problem and policy, N, k,
                               in-budget, L, date (the pool's own calibration is entered first, source calibrate, dated
                               when it was measured: in a run folder, when its seed finished)
    OUT/pool.jsonl             the pool's problems as last read (the report groups the history by them)
    OUT/seeds.jsonl            the seeds they descend from, where the pool names them
    OUT/POLICY/qualified.jsonl the refreshed pool: problems in the band for the policy (Goldilocks and in-budget)
    OUT/POLICY/hard.jsonl      the problems held back for a later policy (hard)
    OUT/POLICY/stale_seeds.jsonl  seeds whose every descendant went stale, a seeds file for `finmbs grow`
    OUT/POLICY/summary.json    a RequalifySummary

A rerun of the same command resumes: problems with an entry for the same policy, N and L are not asked again.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from finmbs.config import Endpoint, RunConfig, check_endpoints
from finmbs.errors import FinmbsError
from finmbs.executors import Executor, Tick, make_executor, no_tick
from finmbs.llm import Gateway
from finmbs.mbs.calibrate import annotate, calibrate_work
from finmbs.mbs.solve import CALIBRATE_PURPOSE
from finmbs.records import DifficultyReport, PassRate, Problem
from finmbs.runs.folder import SEEDS, JsonlLog, RunDir, atomic_write_json, atomic_write_text, safe_name
from finmbs.runs.pool import Pool, is_run_folder

HISTORY = "history.jsonl"
POOL = "pool.jsonl"
QUALIFIED = "qualified.jsonl"
HARD = "hard.jsonl"
STALE_SEEDS = "stale_seeds.jsonl"
SUMMARY = "summary.json"
FOLDER = "requalify"  # inside a run folder
BANDS = ("hard", "goldilocks", "stale")
PROBE_TIMEOUT_S = 10.0


class RequalifyError(FinmbsError, ValueError):
    """Requalify cannot start or read its history; one line naming the endpoint, or the file and line."""


# the policy ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Policy:
    """Who is screened: the endpoint's name and model, and the SHA-256 of its weights where they are local."""

    endpoint: Endpoint
    weights_sha256: str | None

    @property
    def name(self) -> str:
        return self.endpoint.name

    @property
    def purpose(self) -> str:
        """The gateway's sampling namespace: a calibration purpose (the training prompt), apart from final
        calibration's draws and, by the weights' hash, from another checkpoint served under the same name."""
        suffix = f"/{self.weights_sha256[:16]}" if self.weights_sha256 else ""
        return f"{CALIBRATE_PURPOSE}/requalify{suffix}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_sha256(endpoint: Endpoint, weights: Path | None = None) -> str | None:
    """The weights' SHA-256: of `weights` when given (a server's checkpoint file), of an embedded model (its
    pinned, verified digest), of a `vllm-offline/PATH` file or folder (its weight files); else None."""
    from finmbs.llm.vllm_offline import PREFIX as VLLM_OFFLINE

    if weights is not None:
        if not weights.is_file():
            raise RequalifyError(f"weights file not found: {weights}")
        return sha256_file(weights)
    if endpoint.is_embedded:
        from finmbs.llm.embedded import lookup

        return lookup(endpoint.model).sha256
    if endpoint.model.startswith(VLLM_OFFLINE):
        path = Path(endpoint.model.removeprefix(VLLM_OFFLINE))
        if path.is_file():
            return sha256_file(path)
        files = sorted(f for ext in ("*.safetensors", "*.bin", "*.gguf", "*.pt") for f in path.glob(ext))
        if files:
            return hashlib.sha256("".join(f"{f.name}:{sha256_file(f)}\n" for f in files).encode()).hexdigest()
    return None


def check_reachable(endpoint: Endpoint, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail before the first problem when the policy cannot answer, naming the endpoint: a missing key or
    `${VAR}`, an embedded model whose weights cannot be assembled, a server (api_base) that does not answer
    GET /models. A hosted model without api_base is checked for its key only."""
    check_endpoints([("target", endpoint)])
    if endpoint.is_embedded:
        from finmbs.llm.embedded import model_path

        try:
            model_path(endpoint.model)
        except FinmbsError as exc:
            raise RequalifyError(f"target endpoint '{endpoint.name}' ({endpoint.model}) cannot run: {exc}") from None
        return
    base = endpoint.base_url()
    if not base:
        return
    request = urllib.request.Request(base.rstrip("/") + "/models")
    if key := endpoint.api_key():
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return
    except urllib.error.HTTPError as exc:
        if exc.code < 500:  # it answered (a server without /models, or one that wants another key for it)
            return
        why = f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        why = str(getattr(exc, "reason", exc))
    raise RequalifyError(
        f"target endpoint '{endpoint.name}' at {base} is not answering ({why}); nothing was asked. "
        "Start the server or fix --api-base / roles.target.api_base"
    )


# the history ------------------------------------------------------------------------------------------
def session_key(entry: PassRate | dict[str, Any]) -> str:
    """What makes two measurements the same one: policy, weights, N, L and source."""
    data = entry.model_dump() if isinstance(entry, PassRate) else entry
    sha = data.get("weights_sha256") or "-"
    return f"{data.get('policy')}|{sha}|{data.get('n')}|{data.get('budget')}|{data.get('source')}"


def session_label(entry: PassRate) -> str:
    """A session as the report and the summary name it."""
    sha = f"@{entry.weights_sha256[:8]}" if entry.weights_sha256 else ""
    return f"{entry.policy}{sha} N={entry.n} L={entry.budget}"


class HistoryLog(JsonlLog):
    """history.jsonl: append-only, one entry per problem and session (a resumed run never writes one twice)."""

    def _key_of(self, row: dict[str, Any]) -> str:
        return f"{row.get('problem_id')}|{session_key(row)}"


def read_history(path: Path) -> list[PassRate]:
    """Every entry of a history file, in the order written; a torn last line (a killed writer) is skipped. A bad
    entry, or one a newer finmbs wrote (a higher schema_version), is refused in one line naming file and line."""
    from finmbs.runs.load import read_records

    return read_records(path, PassRate)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def entry(
    problem_id: str, report: DifficultyReport, date: str, policy: Policy | None = None, source: str = "requalify"
) -> PassRate:
    """A history entry: `report` on `problem_id`, measured with `policy` (None: the pool's own calibration)."""
    return PassRate(
        problem_id=problem_id,
        model=policy.endpoint.model if policy else "",
        weights_sha256=policy.weights_sha256 if policy else None,
        date=date,
        source=source,
        **report.model_dump(),
    )


def calibration_entries(
    problems: Iterable[Problem],
    history: list[PassRate],
    date: str,
    dated: Callable[[Problem], str | None] | None = None,
) -> list[PassRate]:
    """The pool's own calibration (meta["difficulty"]) as history entries (source calibrate), for the problems
    not yet entered with it: the first point every drift is measured from. Each is dated when it was measured,
    `dated(problem)` (a run folder: when its seed finished, `calibration_dates`), else `date` (when entered)."""
    entered = {(e.problem_id, session_key(e)) for e in history}
    found = []
    for problem in problems:
        try:
            report = DifficultyReport.model_validate(problem.meta.get("difficulty"))
        except ValidationError:
            continue  # never calibrated (a seed), or a report this pool does not hold whole
        row = entry(problem.id, report, (dated(problem) if dated else None) or date, source="calibrate")
        if (problem.id, session_key(row)) not in entered:
            found.append(row)
    return found


def calibration_dates(pool: Pool) -> Callable[[Problem], str | None] | None:
    """When each problem of a run folder's pool was calibrated: its seed's finish time (done/SEED, written
    right after the seed's final calibration); None for a pool that is no run folder (no record of when)."""
    if pool.kind != "run":
        return None
    run = RunDir(pool.source)
    return lambda problem: run.done_at(seed_of(problem))


# the refresh ------------------------------------------------------------------------------------------
class Moves(BaseModel):
    """How a group of problems moved from their previous band to the session's: into each band, and unchanged."""

    into: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(BANDS, 0))
    unchanged: int = 0
    first: int = 0  # no earlier measurement to move from


class RequalifySummary(BaseModel):
    """What one requalify wrote: the bands for the policy, what moved, and what this run screened and how fast."""

    pool: str
    out: str
    policy: str
    model: str
    weights_sha256: str | None
    n: int
    budget: int
    problems: int
    bad_lines: list[str] = Field(default_factory=list)
    screened: int = 0  # asked in this run
    resumed: int = 0  # already in the history for this policy, N and L: not asked again
    bands: dict[str, int] = Field(default_factory=dict)
    qualified: int = 0
    goldilocks_out_of_budget: int = 0
    moved: dict[str, dict[str, int]] = Field(default_factory=dict)  # previous band -> band now -> problems
    by_domain: dict[str, Moves] = Field(default_factory=dict)
    by_seed: dict[str, Moves] = Field(default_factory=dict)
    stale_seeds: list[str] = Field(default_factory=list)
    stale_seeds_unknown: list[str] = Field(default_factory=list)  # went stale, but the pool holds no seed record
    rollouts: int = 0
    wall_s: float = 0.0
    rollouts_per_s: float = 0.0


def seed_of(problem: Problem) -> str:
    return problem.provenance.seed_id or problem.id


def latest(history: list[PassRate], key: str) -> tuple[dict[str, PassRate], dict[str, PassRate]]:
    """Per problem: its entry of session `key` (the last one), and the last entry of another session written
    before it (what it moved from)."""
    now_, before = {}, {}
    for item in history:
        if session_key(item) == key:
            now_[item.problem_id] = item
        elif item.problem_id not in now_:
            before[item.problem_id] = item
    return now_, before


def moves(
    problems: list[Problem], now_: dict[str, PassRate], before: dict[str, PassRate], group: Callable[[Problem], str]
) -> dict[str, Moves]:
    """Moves per group (`group(problem)`: its domain, its seed) of the problems measured in the session."""
    found: dict[str, Moves] = defaultdict(Moves)
    for problem in problems:
        if problem.id not in now_:
            continue
        moved = found[group(problem)]
        was = before.get(problem.id)
        if was is None:
            moved.first += 1
        elif was.band == now_[problem.id].band:
            moved.unchanged += 1
        else:
            moved.into[now_[problem.id].band] += 1
    return dict(sorted(found.items()))


def refresh(pool: Pool, history: list[PassRate], key: str, summary: RequalifySummary, folder: Path) -> None:
    """Write the refreshed pool, the hard problems and the stale seeds of session `key`; fill the summary."""
    now_, before = latest(history, key)
    measured = [p for p in pool.problems if p.id in now_]
    bands = Counter(now_[p.id].band for p in measured)
    summary.bands = {band: bands[band] for band in BANDS}
    qualified = [annotate(p, now_[p.id].report) for p in measured if now_[p.id].report.qualified]
    hard = [annotate(p, now_[p.id].report) for p in measured if now_[p.id].band == "hard"]
    summary.qualified = len(qualified)
    summary.goldilocks_out_of_budget = bands["goldilocks"] - len(qualified)
    moved: dict[str, Counter[str]] = defaultdict(Counter)
    for p in measured:
        moved[before[p.id].band if p.id in before else "none"][now_[p.id].band] += 1
    summary.moved = {was: dict(counts) for was, counts in sorted(moved.items())}
    summary.by_domain = moves(pool.problems, now_, before, lambda p: p.domain)
    summary.by_seed = moves(pool.problems, now_, before, seed_of)
    lineage: dict[str, list[Problem]] = defaultdict(list)
    for p in pool.problems:
        lineage[seed_of(p)].append(p)
    seeds = {s.id: s for s in pool.seeds} | {p.id: p for p in pool.problems if p.provenance.method == "seed"}
    stale = [
        seed for seed, problems in lineage.items() if all(p.id in now_ and now_[p.id].band == "stale" for p in problems)
    ]
    summary.stale_seeds = [s for s in stale if s in seeds]
    summary.stale_seeds_unknown = [s for s in stale if s not in seeds]
    write_jsonl(folder / QUALIFIED, qualified)
    write_jsonl(folder / HARD, hard)
    write_jsonl(folder / STALE_SEEDS, [seeds[s] for s in summary.stale_seeds])


def write_jsonl(path: Path, problems: Iterable[Problem]) -> None:
    atomic_write_text(path, "".join(p.model_dump_json() + "\n" for p in problems))


def default_out(pool: Path) -> Path:
    """Where requalify keeps a pool's history: RUN/requalify for a run folder, else beside the pool."""
    if is_run_folder(pool):
        return pool / FOLDER
    return pool.parent / f"{pool.stem if pool.is_file() else pool.name}.requalify"


def policy_folder(out: Path, policy: str) -> Path:
    return out / safe_name(policy)


def requalify_folder(path: Path) -> Path:
    """The requalify folder of a run folder (RUN/requalify), or `path` itself when it holds a history."""
    return path if (path / HISTORY).is_file() else path / FOLDER


# the screen -------------------------------------------------------------------------------------------
async def requalify(
    config: RunConfig,
    pool: Pool,
    policy: Policy,
    out: Path,
    *,
    n: int | None = None,
    budget: int | None = None,
    gateway: Gateway | None = None,
    executor: Executor | None = None,
    tick: Tick = no_tick,
) -> RequalifySummary:
    """Re-screen every problem of `pool` not yet measured for `policy` at N and L, appending each result to
    the history as it comes; then write the refreshed pool, the hard problems and the stale seeds. The
    endpoint is checked before the first problem. A SIGTERM stops it like Ctrl-C once the calls in flight
    have returned; what finished is in the history and a rerun resumes."""
    from finmbs.runs.grow import sigterm_as_interrupt

    n, budget = n or config.stages.N, budget or config.stages.L
    check_reachable(policy.endpoint)
    started = time.monotonic()
    with RunDir(out) as folder:
        history_path = folder.path(HISTORY)
        history = read_history(history_path)
        log = HistoryLog(history_path)
        log.append(calibration_entries(pool.problems, history, date=now(), dated=calibration_dates(pool)))
        write_jsonl(folder.path(POOL), pool.problems)
        write_jsonl(folder.path(SEEDS), pool.seeds)
        key = session_key(
            {
                "policy": policy.name,
                "weights_sha256": policy.weights_sha256,
                "n": n,
                "budget": budget,
                "source": "requalify",
            }
        )
        done = {e.problem_id for e in read_history(history_path) if session_key(e) == key}
        todo = [p for p in pool.problems if p.id not in done]
        summary = RequalifySummary(
            pool=str(pool.source),
            out=str(out),
            policy=policy.name,
            model=policy.endpoint.model,
            weights_sha256=policy.weights_sha256,
            n=n,
            budget=budget,
            problems=len(pool.problems),
            bad_lines=pool.errors,
            resumed=len(pool.problems) - len(todo),
        )
        own = executor is None
        executor = executor or make_executor("local", config, gateway=gateway)

        def on_result(problem: Problem, result: Problem) -> None:
            report = DifficultyReport.model_validate(result.meta["difficulty"])
            summary.screened += log.append([entry(problem.id, report, now(), policy)])

        work = partial(
            calibrate_work, config=config, target=policy.endpoint, n=n, budget=budget, purpose=policy.purpose
        )
        try:
            if todo:
                with sigterm_as_interrupt(getattr(executor, "gateway", None)):
                    await executor.map(
                        work, todo, concurrency=policy.endpoint.max_concurrency, on_result=on_result, tick=tick
                    )
        finally:
            if own:
                executor.close()
        summary.wall_s = round(time.monotonic() - started, 3)
        summary.rollouts = summary.screened * n
        summary.rollouts_per_s = round(summary.rollouts / summary.wall_s, 3) if summary.wall_s else 0.0
        target = policy_folder(out, policy.name)
        refresh(pool, read_history(history_path), key, summary, target)
        atomic_write_json(target / SUMMARY, summary)
    return summary


def run_requalify(config: RunConfig, pool: Pool, policy: Policy, out: Path, **kwargs: Any) -> RequalifySummary:
    return asyncio.run(requalify(config, pool, policy, out, **kwargs))


# export -----------------------------------------------------------------------------------------------
def latest_band(folder: Path, policy: str) -> list[Problem]:
    """The problems in the band for `policy` by their latest entry for it (any N, L, weights): the pool's
    problems (pool.jsonl) with meta["difficulty"] set to that entry."""
    history = read_history(folder / HISTORY)
    last = {e.problem_id: e for e in history if e.policy == policy}
    if not last:
        known = ", ".join(dict.fromkeys(e.policy for e in history)) or "none"
        raise RequalifyError(f"{folder / HISTORY}: no entry for policy '{policy}' (policies in it: {known})")
    from finmbs.runs.load import read_records

    problems = read_records(folder / POOL, Problem)
    return [annotate(p, last[p.id].report) for p in problems if p.id in last and last[p.id].report.qualified]
