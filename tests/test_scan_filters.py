"""Scans of one filter share its bound form, its evaluators and their verdicts on metadata (READ-19).

What a repeated scan returns must not depend on what the scans before it kept: each scan of a
table is compared with the rows written (as multisets), across appends, deletes, a schema
change, a table loaded anew and scans in parallel threads.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

import lakefmt
from lakefmt import scan_filters
from lakefmt.errors import UnknownColumnError
from lakefmt.evaluators import MetricsEvaluator, PartitionEvaluator
from lakefmt.expressions import bind

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def rows(day: int, n: int, offset: int) -> pa.Table:
    return pa.table({
        "ts": pa.array([T0 + timedelta(days=day, seconds=i) for i in range(n)], pa.timestamp("us", tz="UTC")),
        "device": pa.array([(i + offset) % 40 for i in range(n)], pa.int64()),
        "kind": pa.array([f"k{(i // 7) % 5}" for i in range(n)], pa.string()),
    })


def as_rows(table: pa.Table) -> Counter:
    return Counter(zip(*(table.column(n).to_pylist() for n in ("ts", "device", "kind"))))


def expected(written: list[pa.Table], keep) -> Counter:
    return Counter(r for t in written for r in as_rows(t) if keep(*r))


FILTERS = {
    "device = 7": lambda ts, d, k: d == 7,
    "device = 7 AND kind = 'k2'": lambda ts, d, k: d == 7 and k == "k2",
    "ts >= '2026-01-02T00:00:00+00:00' AND ts < '2026-01-03T00:00:00+00:00' AND device IN (3, 30)":
        lambda ts, d, k: T0 + timedelta(days=1) <= ts < T0 + timedelta(days=2) and d in (3, 30),
    "device > 100": lambda ts, d, k: False,
}


@pytest.fixture
def table(local_catalog: lakefmt.Catalog) -> lakefmt.Table:
    t = local_catalog.create_table("db.repeat", rows(0, 1, 0).schema, partition_by=["day(ts)"])
    t.set_property("write.parquet.row-group-rows", 1_000)  # several row groups per file (READ-11)
    return t


def test_repeated_scans_follow_each_commit(table):
    # spec: READ-19, READ-5, READ-11, READ-13, READ-14
    written = []
    for step in range(4):
        written.append(rows(step % 3, 3_000, step))
        table.append(written[-1])
        for _ in range(2):  # the second scan reuses what the first kept
            for text, keep in FILTERS.items():
                assert as_rows(table.scan(filter=text).to_arrow()) == expected(written, keep), (step, text)
    table.delete("kind = 'k2'")
    for text, keep in FILTERS.items():
        got = as_rows(table.scan(filter=text).to_arrow())
        assert got == expected(written, lambda ts, d, k, keep=keep: keep(ts, d, k) and k != "k2"), text


def test_same_text_binds_once_per_schema(table):
    # spec: READ-19
    table.append(rows(0, 2_000, 0))
    text = "device = 7 AND kind = 'k2'"
    first = table.scan(filter=text).row_filter
    assert table.scan(filter=text).row_filter is first
    assert table.scan(filter=text)._metrics is table.scan(filter=text)._metrics
    table.update_schema().rename_column("kind", "sort").commit()
    renamed = table.scan(filter="device = 7 AND sort = 'k2'")
    assert renamed.row_filter is not first
    assert renamed.to_arrow().num_rows == sum(1 for ts, d, k in as_rows(rows(0, 2_000, 0)).elements()
                                              if d == 7 and k == "k2")
    with pytest.raises(UnknownColumnError, match="kind"):
        table.scan(filter=text)


def test_a_table_loaded_anew_gets_its_own_filter(local_catalog, table):
    # spec: READ-19
    table.append(rows(1, 2_000, 5))
    text = "device = 9"
    again = local_catalog.load_table("db.repeat")
    assert again.scan(filter=text).row_filter is not table.scan(filter=text).row_filter
    assert again.scan(filter=text).to_arrow().equals(table.scan(filter=text).to_arrow())


def test_scans_in_threads_agree(table):
    # spec: READ-19
    written = [rows(d, 3_000, d) for d in range(3)]
    for w in written:
        table.append(w)
    texts = list(FILTERS) * 8
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda text: as_rows(table.scan(filter=text).to_arrow()), texts))
    assert got == [expected(written, FILTERS[text]) for text in texts]


def test_verdicts_are_per_object(table):
    # spec: READ-19, EXPR-8
    table.append(rows(0, 100, 0))
    schema = table.schema()
    f = table.plan_files()[0]
    metrics = MetricsEvaluator("device = 7", schema)
    assert metrics.might_match(f) and metrics.might_match(f)
    # An equal-looking entry with other bounds is another object: evaluated, not taken from the memo.
    above = dataclasses.replace(f, lower_bounds={**f.lower_bounds, 2: (100).to_bytes(8, "little")},
                                upper_bounds={**f.upper_bounds, 2: (200).to_bytes(8, "little")})
    assert not metrics.might_match(above)
    assert metrics.might_match(f) and not metrics.might_match(above)
    assert metrics.residuals.of(f) is metrics.residuals.of(f)


def test_memos_start_over_when_full(table, monkeypatch):
    # spec: READ-19, READ-13
    table.append(rows(0, 100, 0))
    f = table.plan_files()[0]
    monkeypatch.setattr("lakefmt.identity_memo.IdentityMemo.LIMIT", 4)
    metrics = MetricsEvaluator("device = 7", table.schema())
    copies = [dataclasses.replace(f) for _ in range(10)]
    assert all(metrics.residuals.of(c) is metrics.residuals.of(copies[0]) for c in copies)
    assert len(metrics.residuals._of) <= 4
    partitions = PartitionEvaluator(bind("ts < '2026-01-01T12:00:00+00:00'", table.schema()), table.spec(),
                                    table.schema())
    assert [partitions.might_match((d,)) for d in range(20_450, 20_460)] == [d <= 20_454 for d in range(20_450, 20_460)]


def test_plans_kept_per_filter_and_manifest(table):
    # spec: READ-19, READ-5
    written = [rows(d, 1_000, d) for d in range(3)]
    for w in written:
        table.append(w)
    texts = [f"device = {d}" for d in range(20)]  # more filters than a manifest keeps plans for
    for _ in range(2):
        for text in texts:
            files = table.scan(filter=text).plan_files()
            assert sorted(f.path for f in files) == sorted(f.path for f in table.plan_files())
            d = int(text.split()[-1])
            assert table.scan(filter=text).to_arrow().num_rows == sum(
                1 for w in written for v in w.column("device").to_pylist() if v == d)
    day = "ts >= '2026-01-02T00:00:00+00:00' AND ts < '2026-01-03T00:00:00+00:00'"
    assert len(table.scan(filter=day).plan_files()) == 1 == len(table.scan(filter=day).plan_files())


def test_filter_memo_starts_over_when_full(table, monkeypatch):
    # spec: READ-19
    table.append(rows(0, 500, 0))
    monkeypatch.setattr(scan_filters, "LIMIT", 3)
    counts = [table.scan(filter=f"device = {d}").to_arrow().num_rows for d in range(10)]
    assert counts == [sum(1 for i in range(500) if i % 40 == d) for d in range(10)]
    assert len(scan_filters._by_source) <= 3 and len(scan_filters._by_bound) <= 3
