"""Storage accounting: live, historical, metadata and orphan bytes; per-partition file statistics."""

from __future__ import annotations

from datetime import timedelta

import pytest

import lakefmt
from lakefmt.commit import FileChange
from lakefmt.leases import Leases
from tests.maintenance.helpers import all_files, batch, make_table


def test_compaction_leaves_historical_bytes_until_expiry(catalog):
    t = make_table(catalog, **{"write.target-file-size-bytes": "1048576"})
    for i in range(4):
        t.append(batch(i * 30, 30))
    sources = [f for f in t.plan_files() if f.partition == ("a",)]
    assert len(sources) == 4
    compacted = t.write_data_files(t.scan(filter="part = 'a'").to_arrow(), kind="compact")
    t.commit_change(FileChange("replace", added=compacted, removed=sources))
    t.io.write_bytes(f"{t.location}/data/stray.bin", b"12345")

    s = t.stats()
    live = t.plan_files()
    assert (s.live_files, s.live_bytes, s.live_records) == (
        len(live), sum(f.file_size_bytes for f in live), 120)
    assert s.historical_files == 4 and s.historical_bytes == sum(f.file_size_bytes for f in sources)
    assert (s.orphan_files, s.orphan_bytes) == (1, 5)
    assert s.metadata_files > 0 and s.metadata_bytes > 0 and s.snapshots == 5
    by_part = {p.partition: p for p in s.partitions}
    assert set(by_part) == {"part=a", "part=b", "part=c"}
    a, b = by_part["part=a"], by_part["part=b"]
    assert (a.files, b.files) == (1, 4) and b.small_files == 4 and b.records == 40
    assert sum(n for _, n in b.size_histogram) == 4
    assert b.size_histogram[0] == (16384, 4)  # all four below 1/64 of the target size
    assert b.average_file_size == b.bytes / 4 and b.manifests == 4
    assert s.to_dict()["partitions"][0]["partition"] == "part=a"

    expired = t.maintenance.expire_snapshots(older_than=timedelta(0))
    assert expired.bytes_freed >= s.historical_bytes and set(expired.data_files) == {f.path for f in sources}
    after = t.stats()
    assert after.historical_bytes == 0 and after.live_bytes == s.live_bytes and after.snapshots == 1


def test_files_of_a_leased_writer_count_as_in_flight(local_catalog):
    t = make_table(local_catalog)
    t.append(batch(0, 10))
    Leases(local_catalog).acquire(t.metadata.table_uuid, "write", "0123456789abcdef", owner="x", ttl=600)
    name = "part-0123456789abcdef-aaaaaaaaaaaaaaaa-00000-00000.parquet"  # carries the leased token
    t.io.write_bytes(f"{t.location}/data/part=a/{name}", b"xyz")
    s = t.stats()
    assert (s.in_flight_files, s.in_flight_bytes, s.orphan_files) == (1, 3, 0)


def test_empty_table(local_catalog):
    s = make_table(local_catalog).stats()
    assert (s.snapshot_id, s.live_files, s.partitions, s.historical_bytes) == (None, 0, (), 0)


@pytest.fixture(scope="module")
def long_history(tmp_path_factory):
    """A table with 105 appends by one long-lived handle, whose write lease is still live (CAT-10)."""
    catalog = lakefmt.Catalog(str(tmp_path_factory.mktemp("history") / "warehouse"), create=True)
    t = make_table(catalog)
    for i in range(105):
        t.append(batch(i * 3, 3))
    assert Leases(catalog).live(t.metadata.table_uuid, "write")  # the handle's token is still leased
    return t


def superseded(t) -> set[str]:
    """Metadata files that are neither current nor in the metadata-log (META-7)."""
    logged = {str(e.value) for e in t.metadata.metadata_log}
    return {p for p in all_files(t) if p.endswith(".metadata.json") and p not in logged
            and p != t.metadata_location.split(f"{t.location}/", 1)[-1]}


def test_nothing_is_in_flight_when_nothing_runs_after_many_commits(long_history):
    t = long_history
    old = superseded(t)
    assert len(old) == 5  # v000001 … v000005: 105 commits, a log of 100 (write.metadata.previous-versions-max)
    s = t.stats()
    assert (s.in_flight_files, s.in_flight_bytes) == (0, 0)
    assert s.orphan_files == s.superseded_metadata_files == 5
    assert s.orphan_bytes == s.superseded_metadata_bytes > 0


def test_orphans_explains_superseded_metadata_files(long_history):
    t = long_history
    old = superseded(t)
    dry = t.maintenance.remove_orphan_files(older_than=timedelta(0))
    assert set(dry.orphan_files) == set(dry.superseded_metadata_files) == old
    assert dry.in_flight_files == 0
    first = min(old)
    assert first.startswith("metadata/v000001-") and first in dry.superseded_metadata_files
    # A metadata file of a version still to come, named with a live token, is a commit in flight.
    token = Leases(t.catalog).live(t.metadata.table_uuid, "write")[0].key
    pending = f"metadata/v{106 + 1:06d}-{token}-0123456789abcdef.metadata.json"
    t.io.write_bytes(f"{t.location}/{pending}", b"{}")
    done = t.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
    assert set(done.orphan_files) == old and done.in_flight_files == 1
    assert superseded(t) == {pending}  # the old ones are gone, the pending one is kept
    t.io.delete(f"{t.location}/{pending}")
    assert t.check().ok and t.scan().to_arrow().num_rows == 315
