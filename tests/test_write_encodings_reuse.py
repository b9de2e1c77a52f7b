"""Small writes reuse the encodings chosen for an earlier file of the same table (WRITE-11)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt.encoding_reuse import REUSE_FILES
from tests.conftest import rows


def batch(n: int, *, distinct: int | None = None, start: int = 0) -> pa.Table:
    """``k`` takes ``distinct`` values (all distinct if None): near-unique columns lose their dictionary (WRITE-7)."""
    return pa.table({
        "k": pa.array([start + (i if distinct is None else i % distinct) for i in range(n)], pa.int64()),
        "kind": pa.array(["a", "b"] * (n // 2)),
    })


def encodings_of(table, f) -> dict[str, bool]:
    """``{column: has a dictionary page}`` of one data file, read from its footer."""
    footer = pq.ParquetFile(f"{table.location}/{f.path}").metadata
    return {footer.row_group(0).column(i).path_in_schema: footer.row_group(0).column(i).has_dictionary_page
            for i in range(footer.num_columns)}


def test_a_small_write_reuses_the_choice_of_the_last_one(local_catalog):
    # spec: WRITE-11, WRITE-7
    t = local_catalog.create_table("enc.reuse", batch(2).schema)
    (first,) = t.write_data_files(batch(2000))
    assert encodings_of(t, first) == {"k": False, "kind": True}
    # k now takes 3 values: chosen from its own rows it would keep a dictionary; the earlier choice is reused.
    (second,) = t.write_data_files(batch(2000, distinct=3))
    assert encodings_of(t, second) == {"k": False, "kind": True}
    snapshot = t.append(batch(2000, distinct=3, start=10_000))
    assert snapshot is not None
    (appended,) = [f for f in t.plan_files() if f.path not in (first.path, second.path)]
    assert encodings_of(t, appended) == {"k": False, "kind": True}
    assert sorted(rows(t.scan().to_arrow())) == sorted(rows(batch(2000, distinct=3, start=10_000)))


def test_a_full_sample_or_another_table_chooses_from_its_own_rows(local_catalog):
    # spec: WRITE-11
    t = local_catalog.create_table("enc.full", batch(2).schema)
    t.write_data_files(batch(2000))
    (large,) = t.write_data_files(batch(20_000, distinct=3))  # a whole WRITE-7 sample: its own choice
    assert encodings_of(t, large) == {"k": True, "kind": True}
    other = local_catalog.create_table("enc.other", batch(2).schema)
    (own,) = other.write_data_files(batch(2000, distinct=3))  # another table: nothing to reuse
    assert encodings_of(other, own) == {"k": True, "kind": True}
    (tiny,) = t.write_data_files(batch(100, distinct=3))  # too few rows to reuse or to tell: pyarrow's default
    assert encodings_of(t, tiny) == {"k": True, "kind": True}


def test_a_choice_serves_a_bounded_number_of_files(local_catalog):
    # spec: WRITE-11
    t = local_catalog.create_table("enc.bounded", batch(2).schema)
    t.write_data_files(batch(1024))
    reused = [t.write_data_files(batch(1024, distinct=3))[0] for _ in range(REUSE_FILES)]
    assert all(encodings_of(t, f) == {"k": False, "kind": True} for f in reused)
    (fresh,) = t.write_data_files(batch(1024, distinct=3))  # the choice is used up: this file chooses again
    assert encodings_of(t, fresh) == {"k": True, "kind": True}
    (next_one,) = t.write_data_files(batch(1024))  # ... and its choice is the one reused next
    assert encodings_of(t, next_one) == {"k": True, "kind": True}


def test_rows_of_one_partition_tuple_are_written_as_they_came(local_catalog):
    # spec: WRITE-4, PART-9
    schema = pa.schema([("p", pa.string()), ("d", pa.float64()), ("k", pa.int64())])
    t = local_catalog.create_table("enc.parts", schema, partition_by=["p", "d"])
    one = pa.table({"p": [None] * 4, "d": [1.5] * 4, "k": [3, 1, 2, 0]}, schema=schema)
    t.append(one)
    (f,) = t.plan_files()
    assert f.partition == (None, 1.5) and f.record_count == 4
    assert pq.read_table(f"{t.location}/{f.path}").column("k").to_pylist() == [3, 1, 2, 0]  # no sort, no copy
    mixed = pa.table({"p": [None, "a", None, "a"], "d": [1.5, 1.5, -0.0, 1.5], "k": [10, 11, 12, 13]}, schema=schema)
    t.append(mixed)
    files = sorted((f.partition[0] or "", f.partition[1], f.record_count) for f in t.plan_files())
    assert files == [("", 0.0, 1), ("", 1.5, 1), ("", 1.5, 4), ("a", 1.5, 2)]  # one file per tuple and append
    assert rows(t.scan().to_arrow()) == rows(pa.concat_tables([one, mixed]))
