"""Run-folder plumbing: collision-free file names for seed ids, the one-writer lock (a dead holder's lock
is taken over), leftover temporary files, the usage ledger, config drift, and seeds-file errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from finmbs.config import ConfigError, load_config
from finmbs.records import RoleUsage
from finmbs.runs import CONFIG_CHANGES, RunDir, RunFolderBusy, UsageLedger, atomic_write_text, file_name
from finmbs.runs.grow import record_config
from finmbs.seeds import SeedsError, load_seeds


def test_seed_ids_map_to_distinct_safe_file_names():
    ids = [".", "..", "a/b", "a_b", "A_b", "x" * 180 + "1", "x" * 180 + "2", "../../etc/passwd", "fb-0042", "", " "]
    names = [file_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    for name in names:
        assert name not in (".", "..", "") and "/" not in name and len(name) <= 100
    assert file_name("fb-0042") == "fb-0042"  # plain ids stay readable
    assert file_name("a/b").startswith("a_b~")


def test_dot_ids_do_not_crash_or_count_as_done(tmp_path):
    run = RunDir(tmp_path / "run")
    for seed_id in (".", ".."):
        assert not run.is_done(seed_id)
        run.mark_done(seed_id)
        assert run.is_done(seed_id)
    assert run.tree_path("..").parent == run.root / "trees"


HOLD = "import sys, time; from finmbs.runs import RunDir; RunDir(sys.argv[1]).lock(); print('locked', flush=True); time.sleep(60)"


def test_second_writer_fails_at_once_naming_the_holder_and_a_dead_holders_lock_is_taken_over(tmp_path):
    folder = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        start = time.monotonic()
        with pytest.raises(RunFolderBusy, match=f"pid {holder.pid} on "):
            RunDir(folder).lock()
        assert time.monotonic() - start < 1
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    with RunDir(folder) as run:  # the killed holder's lock is stale: taken over
        assert f"pid {os.getpid()}" in (run.root / ".lock").read_text()


def test_leftover_tmp_files_of_a_killed_write_are_removed_on_the_next_run(tmp_path):
    run = RunDir(tmp_path / "run")
    leftovers = [run.root / ".metrics.json.abc123.tmp", run.root / "trees" / ".q1.json.x9.tmp"]
    for path in leftovers:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("half")
    atomic_write_text(run.root / "keep.tmp", "not ours")  # only our hidden temporaries go
    with run:
        assert not any(p.exists() for p in leftovers)
        assert (run.root / "keep.tmp").exists()


def test_usage_ledger_keeps_every_process_last_snapshot(tmp_path):
    path = tmp_path / "usage.jsonl"
    first = UsageLedger(path)
    first.write({"teacher": RoleUsage(calls=1, prompt_tokens=10)})
    first.write({"teacher": RoleUsage(calls=3, prompt_tokens=30)})
    with path.open("a") as handle:
        handle.write('{"session": "torn", "usa')  # a killed writer's torn line
    second = UsageLedger(path)
    assert list(second.before.values()) == [{"teacher": RoleUsage(calls=3, prompt_tokens=30).model_dump(mode="json")}]
    assert len(path.read_text().splitlines()) == 1  # compacted


def test_a_changed_config_is_refused_unless_allowed_and_the_change_is_recorded(tmp_path):
    run = RunDir(tmp_path / "run")
    record_config(run, load_config(), allow_change=False)
    record_config(run, load_config(overrides=["budget.max_tokens=10", "seed_concurrency=1"]), allow_change=False)
    changed = load_config(overrides=["stages.N=6", "roles.target.temperature=0.5"])
    with pytest.raises(
        ConfigError, match=r"roles.target.temperature: 1.0 -> 0.5; stages.N: 4 -> 6.*--allow-config-change"
    ):
        record_config(run, changed, allow_change=False)
    record_config(run, changed, allow_change=True)
    assert yaml.safe_load((run.root / "config.yaml").read_text())["stages"]["N"] == 6
    [row] = [json.loads(line) for line in (run.root / CONFIG_CHANGES).read_text().splitlines()]
    assert row["changes"] == ["roles.target.temperature: 1.0 -> 0.5", "stages.N: 4 -> 6"]


def test_run_folder_that_is_a_file_is_one_clear_error(tmp_path):
    path = tmp_path / "out"
    path.write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        RunDir(path)


def test_seeds_file_bom_non_utf8_and_ids_that_cannot_be_told_apart(tmp_path):
    row = {"id": "q1", "question": "Compute 1 + 1.", "answer": "2"}
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(row).encode() + b"\n")
    assert [s.id for s in load_seeds(bom)] == ["q1"]
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(
        json.dumps(row).encode() + b"\n" + '{"id": "q2", "question": "Caf\xe9", "answer": "1"}\n'.encode("latin-1")
    )
    with pytest.raises(SeedsError, match=r"latin.jsonl line 2: not UTF-8 \(byte 0xe9\)"):
        load_seeds(latin)
    lookalikes = tmp_path / "ids.jsonl"
    lookalikes.write_text("".join(json.dumps(dict(row, id=i)) + "\n" for i in ("Q1", "q1", "ｑ1", " q3")))
    with pytest.raises(SeedsError) as caught:
        load_seeds(lookalikes)
    message = str(caught.value)
    assert "line 2: duplicate id 'q1' (cannot be told apart from line 1)" in message
    assert "line 3: duplicate id" in message and "line 4: id ' q3' has surrounding spaces" in message


def test_a_folder_of_other_rules_is_read_recomputed_and_never_resumed(tmp_path):
    from export_fixtures import math_run

    from finmbs.records import RULES_VERSION
    from finmbs.runs.grow import check_rules
    from finmbs.runs.load import RunReadError, load_run

    root = math_run(tmp_path / "run")
    metrics_path = root / "metrics.json"
    current = json.loads(metrics_path.read_text())
    assert current["rules_version"] == RULES_VERSION == 2
    check_rules(RunDir(root))  # the same rules: it may be continued
    # written before versions (rules 1): seed conversion then divided by the seeds in; read, it is recomputed
    # over the finished seeds from the folder's own counts, and the folder is not grown into
    old = {k: v for k, v in current.items() if k != "rules_version"}
    metrics_path.write_text(
        json.dumps({**old, "seeds_in": 4, "seeds_done": 2, "seeds_converted": 1, "seed_conversion": 0.25})
    )
    assert load_run(root).metrics["seed_conversion"] == 0.5
    with pytest.raises(RunReadError) as err:
        check_rules(RunDir(root))
    assert str(err.value).count("\n") == 0 and "rules version 1" in str(err.value) and "version 2" in str(err.value)
    # one a newer finmbs wrote is refused in one line naming the file
    metrics_path.write_text(json.dumps({**current, "rules_version": 3}))
    with pytest.raises(
        RunReadError, match=r"metrics.json: written under finmbs rules version 3; this finmbs reads up to 2"
    ):
        load_run(root)
