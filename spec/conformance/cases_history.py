"""Reader cases of a table's history: deletes, overwrites, compaction, expiry, time travel, manifests, versions."""

from __future__ import annotations

import pyarrow as pa
from _build import TableBuild, case, finish_reader, rng_for
from cases_reader import MIN_INPUT, tick
from kit_rows import EVENTS_SCHEMA, events


@case("reader", "r-delete-cow", "copy-on-write deletes: files removed whole or rewritten without the rows",
      "COMMIT-12 COMMIT-9 MAN-3 MAN-10 ML-5 READ-9 SNAP-4")
def delete_cow(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    b.create(EVENTS_SCHEMA, partition_by=["kind"], properties={"write.delete.mode": "copy-on-write"})
    b.append(events(30, rng))
    b.append(events(30, rng, first_id=30))
    b.delete(["=", "kind", "cam"])            # whole files, proved by the partition values (EXPR-9)
    b.delete(["<", "n", 10])                  # files rewritten
    b.read("deleted rows stay deleted", ["<", "n", 10])
    b.read("kind = 'imu'", ["=", "kind", "imu"])
    return finish_reader(b)


@case("reader", "r-delete-mor", "merge-on-read deletes: deletion vectors in both encodings, growing across snapshots",
      "DV-1 DV-2 DV-3 DV-5 DV-6 DV-9 DV-11 ROWDEL-2 READ-14 FMT-4 FMT-5")
def delete_mor(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    b.create(EVENTS_SCHEMA)
    b.append(events(100, rng))
    b.append(events(100, rng, first_id=100))
    before = b.delete(["=", "id", 7])                  # one position of 100 rows: positions encoding
    b.delete(["in", "id", [8, 9, 10, 11, 150]])        # the vector grows: bitmap encoding
    b.delete(["and", [">=", "id", 100], ["<", "id", 200]])  # a whole file goes
    b.delete([">", "v", 90])
    b.read("snapshot with one deleted row, by filter", ["<", "id", 20], snapshot_id=before)
    b.read("deleted rows never return", ["<", "id", 20])
    b.read("v > 50", [">", "v", 50])
    return finish_reader(b)


@case("reader", "r-overwrite", "overwrite with a filter (deletion vectors) and without (every file removed)",
      "COMMIT-12 ROWDEL-2 SNAP-4 SNAP-5")
def overwrite(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    b.create(EVENTS_SCHEMA, partition_by=["kind"])
    b.append(events(40, rng))
    fresh = events(6, rng, first_id=1000)
    fresh = fresh.set_column(1, "kind", pa.array(["rad"] * 6))
    b.overwrite(fresh, ["=", "kind", "rad"])
    second = b.overwrite(events(5, rng, first_id=2000).set_column(2, "n", pa.array([40, 41, 42, 45, 49], pa.int32())),
                         [">=", "n", 40])
    b.read("kind = 'rad'", ["=", "kind", "rad"], snapshot_id=second)
    full = b.overwrite(events(3, rng, first_id=3000), None)
    b.read("after a full overwrite", [">=", "id", 0], snapshot_id=full)
    return finish_reader(b)


@case("reader", "r-compaction", "bin-pack compaction replaces small files; rows are unchanged",
      "COMMIT-17 SNAP-4 COMPACT-17 MAN-3 ML-6 READ-5")
def compaction(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    t = b.create(EVENTS_SCHEMA, partition_by=["bucket(2, id)"])
    for k in range(5):
        b.append(events(8, rng, first_id=8 * k))
    t.compaction.run("binpack", **MIN_INPUT)
    b.same_rows()
    b.append(events(4, rng, first_id=100))
    b.read("id < 10", ["<", "id", 10])
    return finish_reader(b)


@case("reader", "r-compaction-deletes", "compaction drops the rows deletion vectors delete; older snapshots keep them deleted",
      "ROWDEL-11 COMMIT-17 READ-14 DV-6")
def compaction_deletes(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    t = b.create(EVENTS_SCHEMA)
    for k in range(3):
        b.append(events(20, rng, first_id=20 * k))
    b.delete(["<", "n", 20])
    t.compaction.run("binpack", **MIN_INPUT)
    b.same_rows()
    b.read("n < 30", ["<", "n", 30])
    return finish_reader(b)


@case("reader", "r-expiry", "expired snapshots are gone; the retained ones still read",
      "MAINT-3 MAINT-4 MAINT-5 READ-2 SNAP-7")
def expiry(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    t = b.create(EVENTS_SCHEMA, properties={"write.delete.mode": "copy-on-write"})
    old = [b.append(events(10, rng))]
    tick()
    old.append(b.append(events(10, rng, first_id=10)))
    tick()
    b.delete(["<", "id", 5])
    tick()
    b.append(events(10, rng, first_id=20))
    t.maintenance.expire_snapshots(snapshot_ids=old)
    b.read("id < 15", ["<", "id", 15])
    return finish_reader(b, as_of=True, missing=old)


@case("reader", "r-time-travel", "snapshots by id and by timestamp, after a rollback",
      "READ-2 READ-3 META-8 MAINT-13 SNAP-3")
def time_travel(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    t = b.create(EVENTS_SCHEMA)
    ids = []
    for k in range(4):
        ids.append(b.append(events(5, rng, first_id=5 * k)))
        tick()
    b.delete(["=", "kind", "imu"])
    tick()
    t.rollback_to(ids[1])
    b.model = b.models[ids[1]]
    b.read("third snapshot, filtered", [">=", "id", 8], snapshot_id=ids[2])
    return finish_reader(b, as_of=True)


@case("reader", "r-manifest-merge", "appends merge small manifests; merged entries are EXISTING with explicit ids",
      "COMMIT-8 MAN-5 MAN-10 ML-2 ML-6 READ-5")
def manifest_merge(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    b.create(EVENTS_SCHEMA, partition_by=["kind"], properties={"commit.manifest.min-count-to-merge": "2"})
    for k in range(6):
        b.append(events(6, rng, first_id=6 * k))
    b.read("kind = 'cam'", ["=", "kind", "cam"])
    b.read("id >= 30", [">=", "id", 30])
    return finish_reader(b)


@case("reader", "r-manifest-rewrite", "manifest compaction rewrites manifests; files and rows are unchanged",
      "COMPACT-29 MAN-10 ML-6 DV-11 READ-5")
def manifest_rewrite(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    t = b.create(EVENTS_SCHEMA, partition_by=["kind"])
    for k in range(5):
        b.append(events(8, rng, first_id=8 * k))
    b.delete(["=", "id", 3])
    t.compaction.rewrite_manifests()
    b.same_rows()
    b.read("kind = 'thermal'", ["=", "kind", "thermal"])
    return finish_reader(b)


@case("reader", "r-v2-created", "a table created at format version 2, with vectors from the start",
      "DV-1 FMT-1 FMT-4 MAN-9 ML-7 DV-5")
def v2_created(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    b.create(EVENTS_SCHEMA, partition_by=["bucket(3, id)"], format_version=2)
    b.append(events(30, rng))
    b.delete(["in", "kind", ["imu"]])
    b.append(events(10, rng, first_id=30))
    b.read("id > 25", [">", "id", 25])
    return finish_reader(b)


@case("reader", "r-v1-to-v2", "a version 1 table upgraded by its first deletion vector: version 1 and 2 manifests mixed",
      "DV-1 FMT-4 FMT-5 MAN-9 DV-5 DV-11")
def v1_to_v2(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    b.create(EVENTS_SCHEMA, partition_by=["kind"])
    first = b.append(events(20, rng))
    b.append(events(20, rng, first_id=20))
    b.delete(["=", "id", 21])
    b.read("version 1 snapshot", None, snapshot_id=first)
    b.read("id between 15 and 25", ["and", [">=", "id", 15], ["<=", "id", 25]])
    return finish_reader(b)


@case("reader", "r-snapshot-history", "older snapshots in history files: every snapshot, time travel by id and "
      "timestamp, after an expiry that rewrites one and a rollback into one",
      "META-13 META-14 META-15 META-16 META-17 META-18 LAYOUT-13 READ-2 MAINT-13")
def snapshot_history(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    t = b.create(EVENTS_SCHEMA, format_version=2, properties={"write.metadata.inline-snapshots-max": "4"})
    ids = []
    for k in range(10):
        ids.append(b.append(events(5, rng, first_id=5 * k)))  # from the 5th on, runs of 2 move to history files
        tick()
    t.maintenance.expire_snapshots(snapshot_ids=[ids[0]])  # the first history file is rewritten without it
    t.rollback_to(ids[4])  # a snapshot of a history file becomes current: it and the later ones move back
    b.model = b.models[ids[4]]
    tick()
    b.append(events(5, rng, first_id=100))
    assert len(t.metadata.snapshot_history) >= 2, t.metadata.snapshot_history
    b.read("second snapshot, in a history file, filtered", [">=", "id", 3], snapshot_id=ids[1])
    return finish_reader(b, as_of=True, missing=[ids[0]])
