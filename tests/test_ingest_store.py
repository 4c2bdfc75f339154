"""Both Qdrant engines behind the one Store interface behave the same (filters, exclusion, deletes)."""

from __future__ import annotations

import pytest

from finmbs.ingest.query import company_key, doc_type_key, periods
from finmbs.ingest.store import ClientStore, EdgeStore, Where, point_id


@pytest.fixture(params=["edge", "client-local"])
def store(request, tmp_path):
    opened = EdgeStore(tmp_path / "edge") if request.param == "edge" else ClientStore(path=str(tmp_path / "local"))
    yield opened
    opened.close()


def vec(i: int) -> list[float]:
    return [1.0 if j == i % 4 else 0.1 for j in range(4)]


def test_store_filters_exclusion_scroll_delete(store):
    assert store.query("c", vec(0), 3, None) == [] and store.scroll("c", Where()) == []
    store.ensure("c", 4)
    store.upsert(
        "c",
        [
            (
                point_id(str(i)),
                vec(i),
                None,
                {"doc_id": f"d{i % 3}", "source_path": f"s{i % 3}", "periods": ["2023"], "text": "x" * i},
            )
            for i in range(12)
        ],
    )
    top = store.query("c", vec(0), 3, None)
    assert len(top) == 3 and top[0][0] >= top[-1][0]
    kept = store.query("c", vec(0), 12, Where(must_not={"doc_id": ["d0", "d1"]}))
    assert {p["doc_id"] for _, p in kept} == {"d2"} and len(kept) == 4
    assert len(store.query("c", vec(0), 12, Where(must={"doc_id": ["d0", "d1"], "periods": "2023"}))) == 8
    rows = store.scroll("c", Where(must={"doc_id": "d1"}), exclude=("text",))
    assert len(rows) == 4 and all("text" not in r for r in rows)
    store.delete("c", Where(must={"source_path": "s1"}))
    assert len(store.scroll("c", Where())) == 8


def test_normalized_filter_keys():
    assert company_key("Amazon.com, Inc.") == company_key("AMAZON") == "amazon"
    assert company_key("Foot Locker, Inc.") == company_key("FOOTLOCKER") == "footlocker"
    assert doc_type_key("10-K") == doc_type_key("10k") == "10k"
    assert periods("2023-01-03") == ["2023", "2023-01-03"] and periods(None) == []


def test_shared_index_one_store_per_settings_closed_by_its_last_user(tmp_path):
    """Users of the same index settings (the seeds of a run) share one open index; the last one to let go
    closes it: the shard is flushed and the folder's lock let go, so the next opener reads what was written."""
    from finmbs.config import IndexSettings
    from finmbs.ingest import open_index, shared_index

    settings = IndexSettings(path=str(tmp_path / "index"), lock_timeout_s=5)
    with shared_index(settings) as first:
        closes = []
        real_close = first.store.close
        first.store.close = lambda: (closes.append(1), real_close())[-1]
        first.store.ensure("c", 4)
        with shared_index(settings.model_copy()) as second:
            assert second is first and second.store is first.store
            second.store.upsert("c", [(point_id("a"), vec(0), None, {"doc_id": "a"})])
        assert closes == []  # the outer user still holds it
        with shared_index(settings.model_copy(update={"path": str(tmp_path / "other")})) as other:
            assert other is not first
        assert [row["doc_id"] for row in first.store.scroll("c", Where())] == ["a"]
    assert closes == [1]
    with open_index(settings) as again:
        assert again is not first
        assert [row["doc_id"] for row in again.store.scroll("c", Where())] == ["a"]
    with shared_index(settings) as fresh:
        assert fresh is not first


def test_this_process_probing_for_waiters_twice_at_once_sees_no_waiter(tmp_path):
    # the idle watcher's probe and an operation's release used to meet on the want file, each reading the
    # other as another process waiting: the index was given up mid-work and a held shard closed under it
    import threading

    store = EdgeStore(tmp_path / "edge")
    store.ensure("c", 4)  # takes the index, starts the watcher
    seen: list[bool] = []

    def probe() -> None:
        seen.extend(store.wanted() for _ in range(3000))

    threads = [threading.Thread(target=probe) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 9000 and not any(seen)
    assert store.shards  # still held: nobody else asked
    store.close()
