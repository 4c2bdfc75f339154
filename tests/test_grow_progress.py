"""What a running grow shows (`finmbs.runs.progress`): a line per seed stage and per qualified problem, the
time left from the work done so far, and, end to end in the scripted world, the same lines in the run
folder's progress.log with the run's best problems and the report command at the end."""

from __future__ import annotations

from test_mbs_pipeline import grow_args
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.records import DifficultyReport, Problem, Provenance
from finmbs.runs.progress import PROGRESS_LOG, SEED, STARTED, GrowProgress, best, duration, short, why_qualified


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def qualified(pid: str, k: int, n: int = 8, question: str = "What is 2 + 3?") -> Problem:
    report = DifficultyReport(policy="target", budget=512, n=n, k=k, band="goldilocks", in_budget=True)
    return Problem(
        id=pid,
        question=question,
        answer="5",
        provenance=Provenance(seed_id="s1"),
        meta={"difficulty": report.model_dump()},
    )


def in_seed(progress: GrowProgress, seed: str, *stages: str) -> None:
    """Ticks as the engine sends them from inside `seed`'s task."""
    token = SEED.set(seed)
    try:
        for stage in stages:
            progress.tick(stage)
    finally:
        SEED.reset(token)


def test_stage_lines_once_per_stage_and_the_time_left_from_the_work_done():
    clock, lines = Clock(), []
    seeds = [Problem(id=f"s{i}", question="q", answer="1") for i in range(4)]
    progress = GrowProgress(seeds, "mbs", done_before=0, emit=lines.append, clock=clock)
    assert progress.eta_s() is None and "estimating" in progress.status()  # nothing done: no guess

    in_seed(progress, "s0", STARTED, "traces", "traces", "students")  # a repeated stage and a counter: no line
    assert lines == ["seed s0: started (0/4 seeds finished, 1 running, 0 qualified)", lines[1]]
    assert lines[1].startswith("seed s0: stage traces (1/8)")
    clock.now += 100  # 100 s for 1/8 of one seed: 4 seeds are 3200 s, 3100 s left
    assert progress.eta_s() == 3100
    in_seed(progress, "s0", "calibrate")  # the last stage counts 0.9 at most: a running seed is not done
    assert progress.work_done() == 0.9
    progress.finished(seeds[0], [qualified("s0.x", 4)])
    assert progress.work_done() == 1 and progress.eta_s() == 300  # 100 s per seed, 3 left
    assert lines[-2].startswith(
        "QUALIFIED s0.x (seed s0): What is 2 + 3? | answer: 5 | why: goldilocks: target solved 4/8"
    )
    assert lines[-1].startswith("seed s0: finished in 2 min, 1 qualified (1/4 seeds finished, 0 running, 1 qualified)")
    assert lines[-1].endswith("about 5 min left")


def test_a_stages_share_of_the_work_is_learned_from_the_seeds_that_finished():
    # read in quickstarts: a too-easy seed reaches "leaf" (3 of 8 stages) within a minute or two and spends
    # most of its time there, so a stage's place in the list says little about the work it stands for
    clock = Clock()
    seeds = [Problem(id=f"s{i}", question="q", answer="1") for i in range(3)]
    progress = GrowProgress(seeds, "mbs", emit=lambda line: None, clock=clock)
    in_seed(progress, "s0", STARTED, "traces")
    in_seed(progress, "s1", STARTED, "traces")
    clock.now += 10
    in_seed(progress, "s0", "leaf")
    in_seed(progress, "s1", "leaf")
    assert progress.work_done() == 2 * 3 / 8  # nothing finished yet: a stage's place in the list
    clock.now += 80
    in_seed(progress, "s0", "calibrate")
    clock.now += 10
    progress.finished(seeds[0], [])  # s0: traces 0-10 s, leaf 10-90 s, calibrate 90-100 s of 100 s
    assert progress.shares == {"traces": [0.05], "leaf": [0.5], "calibrate": [0.95]}
    assert progress.work_done() == 1 + 0.5  # s1, in its leaf stage, counts the middle of a leaf stretch
    assert progress.eta_s() == (3 - 1.5) * 100 / 1.5
    in_seed(progress, "s1", "calibrate")
    assert progress.work_done() == 1 + 0.9  # a learned share is capped as the list's is


def test_seeds_an_earlier_run_finished_are_neither_work_done_nor_left():
    clock = Clock()
    seeds = [Problem(id=f"s{i}", question="q", answer="1") for i in range(3)]
    progress = GrowProgress(seeds, "direct", done_before=2, emit=lambda line: None, clock=clock)
    in_seed(progress, "s2", "traces")  # 1 of direct's 6 stages
    clock.now += 60
    assert progress.eta_s() == 300  # (1 - 1/6) of one seed at 60 s per sixth
    in_seed(progress, "s2", "students", "students")  # counters: work moving within the stage
    assert progress.status().startswith("2/3 seeds finished, 1 running, 0 qualified (s2: traces, 3 results); 60 s")


def test_ticks_without_a_seed_and_unknown_stages_change_nothing():
    lines = []
    progress = GrowProgress([Problem(id="s", question="q", answer="1")], "mbs", emit=lines.append, clock=Clock())
    progress.tick("traces")  # no SEED (a Ray worker's ticks arrive in the driver without it)
    in_seed(progress, "s", "verify", "students")  # no stage of the method's and no seed started: nothing
    assert lines == [] and not progress.running
    in_seed(progress, "s", STARTED, "traces")
    progress.finished(Problem(id="s", question="q", answer="1"), [])
    in_seed(progress, "s", "seeds")  # the seeds counter, ticked in the seed's task as it is saved
    assert len(lines) == 3 and not progress.running


def test_the_words_and_the_best_problems():
    assert duration(42) == "42 s" and duration(600) == "10 min" and duration(2 * 3600 + 300) == "2 h 05 min"
    assert short("a\n b  c", 10) == "a b c" and short("x" * 20, 10) == "x" * 9 + "…"
    assert why_qualified(Problem(id="p", question="q", answer="1")) == "qualified (no calibration recorded)"
    half, edge, long_half = qualified("half", 4), qualified("edge", 1), qualified("long", 4, question="q" * 50)
    assert [p.id for p in best([edge, half, long_half], 2)] == ["long", "half"]


def test_a_grow_logs_its_stages_and_each_qualified_problem(tmp_path, openai_server):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, grow_args(openai_server, tmp_path))
    assert result.exit_code == 0, result.output
    log = (out / PROGRESS_LOG).read_text()
    assert f"this progress is also in {out / PROGRESS_LOG}" in log
    assert "seed a: started" in log and "seed a: stage traces (1/8)" in log and "seed a: stage calibrate (8/8)" in log
    assert "QUALIFIED a.s0 (seed a): " in log and " | why: goldilocks: target solved 4/8 (50%)" in log
    assert "seed bad: finished" in log and "0 qualified" in log
    assert "done: 2/2 seeds finished, 0 running, 1 qualified; " in log and log.endswith(" elapsed, nothing left\n")
    for line in log.splitlines():
        assert line[:10].count("-") == 2 and line[19:21] == "Z "  # each line with its time
    # the terminal (here not one) shows the same lines, then the summary, the best problems and the report
    assert "QUALIFIED a.s0" in result.output and "best of the 1 qualified problems" in result.output
    assert f"open the report: finmbs report {out} && python -m webbrowser -t file://" in result.output
