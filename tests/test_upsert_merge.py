"""Upsert and MERGE (spec/deletes.md ROWDEL-5..ROWDEL-9) against pure-Python models, on real catalogs."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import lakefmt
from lakefmt.errors import DuplicateKeyError, FilterError, SchemaMismatchError, ValidationError
from lakefmt.expressions import col
from tests.conftest import rows

REPO = Path(__file__).resolve().parents[1]
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("region", pa.string()),
                    pa.field("value", pa.float64()), pa.field("note", pa.string())])
MODES = ["merge-on-read", "copy-on-write"]


def batch(records: list[tuple], schema: pa.Schema = SCHEMA) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(schema.names, r)) for r in records], schema=schema)


def make_table(catalog: lakefmt.Catalog, mode: str, *, partition_by: tuple[str, ...] = (), name: str = "ns.t",
               schema: pa.Schema = SCHEMA) -> lakefmt.Table:
    return catalog.create_table(name, schema, partition_by=list(partition_by),
                                properties={"write.delete.mode": mode})


def files_on_disk(table: lakefmt.Table) -> set[str]:
    root = Path(table.location)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def upsert_model(model: list[tuple], source: list[tuple], key: tuple[int, ...]) -> list[tuple]:
    """ROWDEL-6 in Python: every target row whose key equals a source key is replaced by that row."""
    by_key = {tuple(r[i] for i in key): r for r in source}
    out = [by_key.get(tuple(r[i] for i in key), r) for r in model]
    matched = {tuple(r[i] for i in key) for r in model}
    return out + [r for k, r in by_key.items() if k not in matched]


def sort(records: list[tuple]) -> list[tuple]:
    return sorted(records, key=repr)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("partition_by", [(), ("region",), ("bucket(3, id)",)])
def test_upsert_updates_matching_rows_and_inserts_the_rest_in_one_snapshot(local_catalog, mode, partition_by):
    t = make_table(local_catalog, mode, partition_by=partition_by)
    model: list[tuple] = []
    for part in range(3):  # keys spread over several files
        records = [(part * 10 + i, ["eu", "us", "ap"][i % 3], float(i), f"v0-{part}-{i}") for i in range(10)]
        t.append(batch(records))
        model += records
    before = t.current_snapshot().snapshot_id
    # Updates of keys in every file (some moving to another region), and new keys.
    source = [(k, "us" if k % 2 else "eu", 100.0 + k, f"v1-{k}") for k in (0, 5, 13, 21, 29)]
    source += [(k, "ap", -1.0, f"new-{k}") for k in (100, 101)]
    snap = t.upsert(batch(source), on=["id"])

    model = upsert_model(model, source, (0,))
    assert rows(t.scan().to_arrow()) == sort(model)
    assert snap.parent_snapshot_id == before and snap.operation == "overwrite"
    assert snap.summary["lakefmt.row-operation"] == "upsert"
    assert (snap.summary["lakefmt.rows-updated"], snap.summary["lakefmt.rows-inserted"]) == ("5", "2")
    assert t.scan().count() == len(model) == 32
    vectors = [f.deletion_vector for f in t.plan_files() if f.deletion_vector is not None]
    if mode == "merge-on-read":
        assert t.metadata.format_version == 2 and vectors
    else:
        assert t.metadata.format_version == 2 and not vectors  # created at version 2 (META-11)
    # Time travel to the snapshot before the upsert returns the old rows (READ-14).
    assert len(t.scan(snapshot_id=before).to_arrow()) == 30
    assert rows(t.scan(snapshot_id=before, filter="id = 5").to_arrow()) == [(5, "ap", 5.0, "v0-0-5")]


@pytest.mark.parametrize("mode", MODES)
def test_repeated_upserts_match_the_model(catalog, mode):
    t = make_table(catalog, mode, partition_by=("region",))
    rng = random.Random(7)
    model: list[tuple] = []
    for round_ in range(8):
        keys = rng.sample(range(60), 15)
        source = [(k, rng.choice(["eu", "us"]), float(round_), f"r{round_}-{k}") for k in keys]
        t.upsert(batch(source), on="id")
        model = upsert_model(model, source, (0,))
        assert rows(t.scan().to_arrow()) == sort(model), f"round {round_}"
    assert len({r[0] for r in model}) == len(model)  # one row per key


def test_multi_column_keys_match_exactly_not_per_column(local_catalog):
    schema = pa.schema([pa.field("sensor", pa.string()), pa.field("ts", pa.timestamp("us", tz="UTC")),
                        pa.field("reading", pa.int32())])
    t = make_table(local_catalog, "merge-on-read", name="ns.readings", schema=schema)
    t0 = 1_767_225_600_000_000
    target = [("a", t0, 1), ("a", t0 + 1, 2), ("b", t0, 3)]
    t.append(pa.table({"sensor": [r[0] for r in target], "ts": pa.array([r[1] for r in target], schema[1].type),
                       "reading": pa.array([r[2] for r in target], pa.int32())}))
    # ("b", t0 + 1): each column's value occurs in the table, the pair does not.
    source = [("b", t0 + 1, 10), ("a", t0 + 1, 20)]
    snap = t.upsert(pa.table({"sensor": [r[0] for r in source], "ts": pa.array([r[1] for r in source], schema[1].type),
                              "reading": pa.array([r[2] for r in source], pa.int32())}), on=["sensor", "ts"])
    assert (snap.summary["lakefmt.rows-updated"], snap.summary["lakefmt.rows-inserted"]) == ("1", "1")
    got = [(r["sensor"], r["reading"]) for r in t.scan().to_arrow().to_pylist()]
    assert sorted(got) == [("a", 1), ("a", 20), ("b", 3), ("b", 10)]


def test_null_keys_in_the_source_are_refused_and_target_null_keys_never_match(local_catalog):
    """ROWDEL-8: a source row with a null key is refused with ValidationError; nothing is written."""
    t = make_table(local_catalog, "merge-on-read")
    t.append(batch([(None, "eu", 1.0, "null key"), (1, "eu", 2.0, "one")]))
    snapshots, files = len(t.snapshots()), files_on_disk(t)
    with pytest.raises(ValidationError, match=r"NULL in key column 'id'.*Nothing was written"):
        t.upsert(batch([(None, "us", 9.0, "x"), (2, "us", 3.0, "two")]), on=["id"])
    assert len(t.refresh().snapshots()) == snapshots and files_on_disk(t) == files
    # A target row with a NULL key stays whatever the source holds.
    t.upsert(batch([(1, "us", 5.0, "one'")]), on=["id"])
    assert rows(t.scan().to_arrow()) == sort([(None, "eu", 1.0, "null key"), (1, "us", 5.0, "one'")])


def test_duplicate_source_keys_are_refused_and_nothing_is_written(local_catalog):
    """ROWDEL-8: duplicate source keys raise DuplicateKeyError (a ValidationError) naming the keys and
    their row counts; nothing is written or committed."""
    t = make_table(local_catalog, "merge-on-read")
    t.append(batch([(1, "eu", 1.0, "a"), (2, "eu", 2.0, "b")]))
    snapshots, files = len(t.snapshots()), files_on_disk(t)
    source = batch([(1, "eu", 1.5, "x"), (3, "us", 3.0, "y"), (1, "us", 9.0, "z"), (3, "eu", 0.0, "w"),
                    (3, "ap", 0.0, "v")])
    with pytest.raises(DuplicateKeyError) as exc:
        t.upsert(source, on=["id"])
    assert "2 key(s) occur in more than one source row" in str(exc.value)
    assert "id=1 (2 rows)" in str(exc.value) and "id=3 (3 rows)" in str(exc.value)
    assert exc.value.count == 2 and sorted(exc.value.keys) == [(1,), (3,)]
    assert isinstance(exc.value, ValidationError)
    assert len(t.refresh().snapshots()) == snapshots and files_on_disk(t) == files
    assert rows(t.scan().to_arrow()) == sort([(1, "eu", 1.0, "a"), (2, "eu", 2.0, "b")])


@pytest.mark.parametrize("on, data, error, message", [
    (["nope"], batch([(1, "eu", 1.0, "a")]), ValidationError, "key column 'nope' is not a column of table ns.t"),
    (["id"], pa.table({"region": ["eu"]}), ValidationError, "key column 'id' is missing from the source data"),
    ([], batch([(1, "eu", 1.0, "a")]), ValidationError, "needs on="),
    (["id", "id"], batch([(1, "eu", 1.0, "a")]), ValidationError, "name a column twice"),
    (["id"], pa.table({"id": [1], "extra": [2]}), SchemaMismatchError, "'extra'"),
    (["id"], pa.table({"id": ["one"]}), SchemaMismatchError, "column 'id'"),
])
def test_bad_upsert_input_is_refused_before_anything_is_written(local_catalog, on, data, error, message):
    """ROWDEL-8: empty or unknown key columns, a key missing from the source, an extra or mistyped
    column: ValidationError naming the column, before any file is written."""
    t = make_table(local_catalog, "merge-on-read")
    t.append(batch([(1, "eu", 1.0, "a")]))
    snapshots, files = len(t.snapshots()), files_on_disk(t)
    with pytest.raises(error, match=message):
        t.upsert(data, on=on)
    assert len(t.refresh().snapshots()) == snapshots and files_on_disk(t) == files


def test_upsert_keeps_columns_the_source_lacks_and_empty_source_commits_nothing(local_catalog):
    t = make_table(local_catalog, "copy-on-write")
    t.append(batch([(1, "eu", 1.0, "keep me"), (2, "us", 2.0, "b")]))
    t.upsert(pa.table({"id": [1, 3], "value": [10.0, 30.0]}), on=["id"])
    assert rows(t.scan().to_arrow()) == sort([(1, "eu", 10.0, "keep me"), (2, "us", 2.0, "b"),
                                             (3, None, 30.0, None)])
    before = t.current_snapshot().snapshot_id
    assert t.upsert(SCHEMA.empty_table(), on=["id"]) is None
    assert t.refresh().current_snapshot().snapshot_id == before


def merge_model(target: list[dict], source: list[dict], matched: list, not_matched: list, by_source: list
                ) -> tuple[list[dict], tuple[int, int, int]]:
    """delta-rs MERGE semantics (ROWDEL-7) over dict rows keyed on ``id``: clauses are
    ``(kind, condition(src, tgt) -> bool, set)``; the first clause whose condition holds acts."""
    by_key = {s["id"]: s for s in source}
    out, updated, deleted, inserted = [], 0, 0, 0
    keys = {r["id"] for r in target}
    for row in target:
        src = by_key.get(row["id"])
        clauses = [(k, lambda s, t, c=c: c(t), u) for k, c, u in by_source] if src is None else matched
        action = next(((kind, assign) for kind, cond, assign in clauses if cond(src, row)), None)
        if action is None:
            out.append(row)
        elif action[0] == "delete":
            deleted += 1
        else:
            updated += 1
            out.append({**row, **({n: src[n] for n in src} if action[1] is None else
                                  {n: src[s] for n, s in action[1].items()})})
    for src in source:
        if src["id"] not in keys and any(cond(src) for cond in not_matched):
            out.append({n: src.get(n) for n in SCHEMA.names})
            inserted += 1
    return out, (updated, deleted, inserted)


@pytest.mark.parametrize("mode", MODES)
def test_merge_clauses_follow_delta_semantics(local_catalog, mode):
    t = make_table(local_catalog, mode, partition_by=("region",))
    rng = random.Random(3)
    target = [{"id": i, "region": rng.choice(["eu", "us"]), "value": float(rng.randrange(100)),
               "note": rng.choice(["ok", "stale"])} for i in range(40)]
    for part in (target[:20], target[20:]):
        t.append(pa.Table.from_pylist(part, schema=SCHEMA))
    source = [{"id": i, "region": rng.choice(["eu", "us", "ap"]), "value": float(rng.randrange(100)),
               "note": rng.choice(["gone", "full", "fix"])} for i in rng.sample(range(60), 30)]
    builder = (t.merge(pa.Table.from_pylist(source, schema=SCHEMA), on=["id"])
               .when_matched_delete(predicate="source.note = 'gone'")
               .when_matched_update(set={"value": "source.value"}, predicate="target.value < 50")
               .when_matched_update_all(predicate="source.note = 'full' AND target.region = 'eu'")
               .when_not_matched_insert_all(predicate="source.value >= 30")
               .when_not_matched_by_source_delete(predicate="target.note = 'stale' AND target.value > 60"))
    result = builder.execute()

    expected, counts = merge_model(
        target, source,
        matched=[("delete", lambda s, r: s["note"] == "gone", None),
                 ("update", lambda s, r: r["value"] < 50, {"value": "value"}),
                 ("update", lambda s, r: s["note"] == "full" and r["region"] == "eu", None)],
        not_matched=[lambda s: s["value"] >= 30],
        by_source=[("delete", lambda r: r["note"] == "stale" and r["value"] > 60, None)])
    got = t.scan().to_arrow()
    assert rows(got) == rows(pa.Table.from_pylist(expected, schema=SCHEMA))
    assert (result.rows_updated, result.rows_deleted, result.rows_inserted) == counts
    assert all(counts), "the random data must exercise every clause kind"
    snap = result.snapshot
    assert snap.operation == "overwrite" and snap.summary["lakefmt.row-operation"] == "merge"
    assert snap.summary["lakefmt.rows-deleted"] == str(counts[1])


def test_merge_with_only_not_matched_insert_is_insert_if_absent(local_catalog):
    t = make_table(local_catalog, "merge-on-read")
    t.append(batch([(1, "eu", 1.0, "a")]))
    result = t.merge(batch([(1, "us", 9.0, "dup"), (2, "us", 2.0, "b")]), on="id").when_not_matched_insert_all()\
        .execute()
    assert (result.rows_updated, result.rows_deleted, result.rows_inserted) == (0, 0, 1)
    assert rows(t.scan().to_arrow()) == sort([(1, "eu", 1.0, "a"), (2, "us", 2.0, "b")])
    before = t.current_snapshot().snapshot_id
    nothing = t.merge(batch([(1, "us", 9.0, "x")]), on="id").when_matched_delete("source.value < 0").execute()
    assert nothing.snapshot is None and t.refresh().current_snapshot().snapshot_id == before


def test_predicates_may_be_expressions_and_unqualified_names_mean_the_clause_side(local_catalog):
    t = make_table(local_catalog, "merge-on-read")
    t.append(batch([(1, "eu", 1.0, "a"), (2, "eu", 2.0, "stale"), (3, "us", 3.0, "c")]))
    result = (t.merge(batch([(1, "us", 10.0, "gone"), (3, "us", 30.0, "keep"), (4, "ap", 1.0, "d"),
                             (5, "ap", 5.0, "e")]), on=["id"])
              .when_matched_delete(col("source.note") == "gone")
              .when_matched_update_all(col("target.region") == "us")
              .when_not_matched_insert_all("value > 2")  # source.value
              .when_not_matched_by_source_delete("note = 'stale'")  # target.note
              .execute())
    assert (result.rows_updated, result.rows_deleted, result.rows_inserted) == (1, 2, 1)
    assert rows(t.scan().to_arrow()) == sort([(3, "us", 30.0, "keep"), (5, "ap", 5.0, "e")])


def test_two_source_rows_for_one_target_row_are_refused(local_catalog):
    """ROWDEL-8: a merge whose source has one key twice fails with DuplicateKeyError; nothing is written."""
    t = make_table(local_catalog, "merge-on-read")
    t.append(batch([(1, "eu", 1.0, "a")]))
    snapshots, files = len(t.snapshots()), files_on_disk(t)
    with pytest.raises(DuplicateKeyError, match=r"id=1 \(2 rows\)"):
        t.merge(batch([(1, "us", 2.0, "x"), (1, "ap", 3.0, "y")]), on=["id"]).when_matched_update_all().execute()
    assert len(t.refresh().snapshots()) == snapshots and files_on_disk(t) == files


@pytest.mark.parametrize("build, error, message", [
    (lambda m: m.when_matched_delete("source.missing = 1"), FilterError, "unknown column 'source.missing'"),
    (lambda m: m.when_matched_delete("value > 1"), FilterError, "qualify column 'value'"),
    (lambda m: m.when_not_matched_insert_all("target.value > 1"), FilterError, "unknown column 'target.value'"),
    (lambda m: m.when_matched_update(set={"nope": "value"}), ValidationError, "'nope' is not a column of the table"),
    (lambda m: m.when_matched_update(set={"value": "source.nope"}), ValidationError, "not a column of the source"),
    (lambda m: m.when_matched_update(set={"value": "region"}), ValidationError, "column 'value' stores double"),
    (lambda m: m, ValidationError, "needs at least one"),
])
def test_bad_merge_is_refused_before_anything_is_written(local_catalog, build, error, message):
    """ROWDEL-8: a merge with no clause or a clause naming an unknown column fails before any file is written."""
    t = make_table(local_catalog, "merge-on-read")
    t.append(batch([(1, "eu", 1.0, "a")]))
    snapshots, files = len(t.snapshots()), files_on_disk(t)
    with pytest.raises(error, match=message):
        build(t.merge(batch([(1, "us", 2.0, "x"), (5, "us", 2.0, "y")]), on=["id"])).execute()
    with pytest.raises(ValidationError, match="key column 'missing' is not a column"):
        t.merge(batch([(1, "us", 2.0, "x")]), on=["missing"]).when_matched_delete().execute()
    assert len(t.refresh().snapshots()) == snapshots and files_on_disk(t) == files


# -- racing real processes (ROWDEL-5, ROWDEL-9) ------------------------------------------------------
WORKER = """
import json, sys
import pyarrow as pa
import lakefmt
warehouse, operation, records = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
t = lakefmt.Catalog(warehouse).load_table("ns.t")
data = pa.Table.from_pylist(records)  # only the columns the records name
if operation == "upsert":
    snap = t.upsert(data, on=["id"])
    print(json.dumps(snap.summary))
else:
    result = t.merge(data, on=["id"]).when_matched_update(set={"note": "note"}).execute()
    print(json.dumps([result.rows_updated, result.snapshot is not None]))
"""


def paused_worker(tmp_path: Path, warehouse: str, operation: str, records: list[dict]) -> tuple[subprocess.Popen, Path]:
    """A process running the operation that stops after writing its data files, before its commit."""
    paused, resume = tmp_path / "paused", tmp_path / "resume"
    env = {**os.environ, "LAKEFMT_PAUSE_AT": "after-data-files", "LAKEFMT_PAUSE_FILE": str(paused),
           "LAKEFMT_RESUME_FILE": str(resume), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", WORKER, warehouse, operation, json.dumps(records)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not paused.exists():  # the worker's own event: it reached the checkpoint
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "worker never reached its checkpoint"
        time.sleep(0.02)
    return proc, resume


def finish(proc: subprocess.Popen, resume: Path) -> str:
    resume.write_text("go")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out


@pytest.mark.multiprocess
@pytest.mark.parametrize("mode", MODES)
def test_two_upserts_of_one_key_never_leave_two_rows(tmp_path, local_catalog, mode):
    t = make_table(local_catalog, mode)
    t.append(batch([(1, "eu", 1.0, "base"), (2, "eu", 2.0, "other")]))
    proc, resume = paused_worker(tmp_path, local_catalog.warehouse, "upsert",
                                 [{"id": 1, "note": "process"}, {"id": 7, "note": "process"}])
    t.upsert(pa.table({"id": [1, 7], "note": ["parent", "parent"]}), on=["id"])
    summary = json.loads(finish(proc, resume))
    # The process lost the race, planned again and updated the parent's rows (ROWDEL-9).
    assert (summary["lakefmt.rows-updated"], summary["lakefmt.rows-inserted"]) == ("2", "0")
    got = {r["id"]: r for r in t.refresh().scan().to_arrow().to_pylist()}
    assert len(t.scan().to_arrow()) == 3
    assert (got[1]["note"], got[1]["value"], got[7]["note"]) == ("process", 1.0, "process")


@pytest.mark.multiprocess
def test_a_merge_never_brings_back_a_row_deleted_while_it_ran(tmp_path, local_catalog):
    t = make_table(local_catalog, "merge-on-read")
    t.append(batch([(1, "eu", 1.0, "base"), (2, "eu", 2.0, "base"), (3, "eu", 3.0, "base")]))
    proc, resume = paused_worker(tmp_path, local_catalog.warehouse, "merge",
                                 [{"id": 1, "note": "updated"}, {"id": 2, "note": "updated"}])
    t.delete("id = 1")  # a vector on the file whose rows 1 and 2 the paused merge updates
    updated, committed = json.loads(finish(proc, resume))
    assert (updated, committed) == (1, True)  # replanned: row 1 no longer matches
    assert rows(t.refresh().scan().to_arrow()) == sort([(2, "eu", 2.0, "updated"), (3, "eu", 3.0, "base")])


@pytest.mark.multiprocess
def test_a_conflict_past_the_retry_limit_fails_and_leaves_no_file(tmp_path, local_catalog):
    t = make_table(local_catalog, "merge-on-read")
    t.set_property("commit.retry.num-retries", 0)
    t.append(batch([(1, "eu", 1.0, "a")]))
    proc, resume = paused_worker(tmp_path, local_catalog.warehouse, "upsert", [{"id": 1, "note": "process"}])
    t.upsert(batch([(1, "ap", 3.0, "parent")]), on=["id"])
    resume.write_text("go")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "CommitConflictError" in err
    assert rows(t.refresh().scan().to_arrow()) == [(1, "ap", 3.0, "parent")]
    referenced = {f.path for s in t.snapshots() for f in t.plan_files(snapshot_id=s.snapshot_id)}
    assert {p for p in files_on_disk(t) if p.endswith(".parquet") and p.startswith("data/")} == referenced
