"""Bin-pack of many small local files read in one pass (spec/compaction.md COMPACT-38).

The one pass must read exactly what the file-by-file reader reads: the tests compact real
tables of tiny files and compare the rows before and after as multisets, check that the pass
was (or was not) taken, and that inputs whose columns would not match by name as by field id,
or whose types the pass would change, are read file by file.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakefmt.compaction import rewrite as rewrite_module
from lakefmt.compaction.runner import make_task, plan_table
from lakefmt.compaction.small_inputs import MIN_INPUTS, OnePassError, read_small_inputs
from tests.compaction.conftest import ALL_TYPES, all_types_rows, small_files_table
from tests.conftest import rows


@pytest.fixture
def per_file_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The inputs the rewrite reads file by file (the one pass reads none this way)."""
    seen: list[str] = []
    batches = rewrite_module._batches

    def spy(io, task, f, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(f.path)
        return batches(io, task, f, *args, **kwargs)

    monkeypatch.setattr(rewrite_module, "_batches", spy)
    return seen


def test_binpack_reads_tiny_files_in_one_pass(local_catalog, per_file_reads):
    """COMPACT-38: 12 tiny files per partition are read in one pass; the rows are the rows before,
    one output per partition, every input's rows counted (COMPACT-33)."""
    # spec: COMPACT-38, COMPACT-17, COMPACT-33
    t = small_files_table(local_catalog, appends=12, rows=90)
    before = t.scan().to_arrow()
    assert len(t.plan_files()) == 36
    result = t.compaction.run("binpack", min_age_seconds=0)
    assert result.groups_failed == 0 and result.groups_committed == result.groups_planned == 3, result.summary()
    assert per_file_reads == []  # nothing was read file by file
    assert result.files_rewritten == 36 and result.files_written == 3 and result.rows_rewritten == 12 * 90
    assert rows(t.scan().to_arrow()) == rows(before)
    out = t.scan().to_arrow()
    assert out.schema.field("ts").type == pa.timestamp("us", tz="UTC")


def test_one_pass_charges_every_input_before_reading(local_catalog):
    """COMPACT-25 with COMPACT-38: the read budget is charged with each input's size."""
    # spec: COMPACT-38, COMPACT-25
    t = small_files_table(local_catalog, appends=10, rows=60)
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="binpack")
    task = make_task(t, plan, plan.groups[0])
    charged: list[int] = []
    result = rewrite_module.rewrite_group(t.io, task, throttle=charged.append)
    assert sorted(charged) == sorted(f.file_size_bytes for f in task.files)
    assert result.rows == sum(f.record_count for f in task.files)
    t.io.delete_many(list(result.output_paths))


def test_one_pass_not_taken_when_names_and_field_ids_differ(local_catalog, per_file_reads):
    """COMPACT-38, COMPACT-12: after a rename, a widening and an added column, old files are
    read file by file (by field id); the rows are those of the core reader."""
    # spec: COMPACT-38, COMPACT-12
    schema = pa.schema([("id", pa.int64()), ("n", pa.int32()), ("tag", pa.string())])
    t = local_catalog.create_table("ns.renamed", schema=schema)
    for i in range(6):
        t.append(pa.table({"id": [i * 10 + k for k in range(10)], "n": [i] * 10, "tag": ["old"] * 10},
                          schema=schema))
    with t.update_schema() as u:
        u.rename_column("tag", "label").widen_column("n", pa.int64()).add_column("q", pa.float64())
    for i in range(6, 12):
        t.append(pa.table({"id": [i * 10 + k for k in range(10)], "n": [i] * 10, "label": ["new"] * 10,
                           "q": [float(i)] * 10}))
    before = t.scan().to_arrow()
    result = t.compaction.run("binpack", min_age_seconds=0)
    assert result.groups_failed == 0 and result.groups_committed == 1 and result.files_written == 1, \
        result.summary()
    assert len(per_file_reads) == 12
    after = t.scan().to_arrow()
    assert rows(after) == rows(before)
    assert sorted(after.column("label").to_pylist()) == ["new"] * 60 + ["old"] * 60


def test_one_pass_not_taken_for_types_it_would_change(local_catalog, per_file_reads):
    """COMPACT-38: decimals, times and the like are read file by file; the rows are unchanged."""
    # spec: COMPACT-38
    t = local_catalog.create_table("ns.types", schema=ALL_TYPES, partition_by=["p"])
    for seed in range(MIN_INPUTS + 1):
        t.append(all_types_rows(40, seed))
    before = t.scan().to_arrow()
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="binpack")
    task = make_task(t, plan, plan.groups[0])
    assert len(task.files) >= MIN_INPUTS
    assert read_small_inputs(t.io, task.location, task.schema, task.files, batch_rows=1024) is None
    result = t.compaction.run("binpack", min_age_seconds=0)
    assert result.groups_failed == 0 and result.groups_committed == 2, result.summary()
    assert len(per_file_reads) == result.files_rewritten
    assert rows(t.scan().to_arrow()) == rows(before)


def test_one_pass_rows_equal_file_by_file_rows(local_catalog):
    """COMPACT-38: the batches of the one pass hold, in order, the rows the file-by-file reader reads,
    with the table's Arrow schema (field ids included)."""
    # spec: COMPACT-38, COMPACT-12
    schema = pa.schema([("b", pa.bool_()), ("i", pa.int32()), ("l", pa.int64()), ("f", pa.float32()),
                        ("d", pa.float64()), ("s", pa.string()), ("bin", pa.binary()), ("day", pa.date32()),
                        ("ts", pa.timestamp("us")), ("tstz", pa.timestamp("us", tz="UTC"))])
    typed = all_types_rows(400, 7)
    t = local_catalog.create_table("ns.flat", schema=schema)
    for k in range(10):
        t.append(typed.select(schema.names).slice(k * 40, 40).cast(schema))
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="binpack")
    task = make_task(t, plan, plan.groups[0])
    batches = read_small_inputs(t.io, task.location, task.schema, task.files, batch_rows=64)
    assert batches is not None
    batches = list(batches)
    # Record batches of contiguous arrays: two 40-row inputs' rows combined, then cut at 64 rows.
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert [b.num_rows for b in batches] == [64, 16] * 5
    one_pass = pa.Table.from_batches(batches)
    per_file = pa.Table.from_batches([b for f in task.files for b in rewrite_module._batches(
        t.io, task, f, None, 64)])
    assert one_pass.schema.equals(task.schema.to_arrow(), check_metadata=True)
    assert one_pass.equals(per_file.cast(one_pass.schema))


def test_one_pass_with_read_back_hashing_between_batches(local_catalog, monkeypatch, per_file_reads):
    """COMPACT-38 with COMPACT-17 read-back: the input rows are hashed while the pass is still
    streaming (small batches, a small hash buffer)."""
    # spec: COMPACT-38, COMPACT-17
    t = small_files_table(local_catalog, appends=12, rows=90, partition_by=())
    before = t.scan().to_arrow()
    checksum_class = rewrite_module.RowChecksum
    monkeypatch.setattr(rewrite_module, "DEFAULT_BATCH_ROWS", 100)
    monkeypatch.setattr(rewrite_module, "RowChecksum", lambda **kw: checksum_class(buffer_rows=150, **kw))
    result = t.compaction.run("binpack", min_age_seconds=0, verify="read-back")
    assert result.groups_failed == 0 and result.groups_committed == 1 and result.files_written == 1, \
        result.summary()
    assert per_file_reads == []
    assert rows(t.scan().to_arrow()) == rows(before)


def test_one_pass_not_taken_for_inputs_with_deletion_vectors(local_catalog, per_file_reads):
    """COMPACT-38, COMPACT-32: a group with a deletion vector is read file by file, with the vectors
    applied; the rows after are the live rows before."""
    # spec: COMPACT-38, COMPACT-32
    t = small_files_table(local_catalog, appends=10, rows=90)
    t.delete("payload_id = 3")
    with_vectors = {f.path for f in t.plan_files() if f.deletion_vector is not None}
    assert with_vectors
    before = t.scan().to_arrow()
    result = t.compaction.run("binpack", min_age_seconds=0)
    assert result.groups_failed == 0 and result.groups_committed == 3, result.summary()
    assert with_vectors <= set(per_file_reads) and len(per_file_reads) == len(set(per_file_reads))
    assert result.deleted_rows_dropped > 0 and result.rows_rewritten == before.num_rows
    t.refresh()
    assert rows(t.scan().to_arrow()) == rows(before)


def test_group_the_pass_cannot_read_is_read_file_by_file(local_catalog, per_file_reads):
    """COMPACT-38: an input whose footer also stores an Arrow schema reads with other types than the
    Parquet schema every footer shares (``large_string`` here): the pass stops at it, and the group is
    rewritten file by file, which converts by field id (COMPACT-12), to the same rows."""
    # spec: COMPACT-38, COMPACT-12, COMPACT-19
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    t = local_catalog.create_table("ns.stored", schema=schema)
    for i in range(MIN_INPUTS + 2):
        t.append(pa.table({"id": [3 * i, 3 * i + 1, 3 * i + 2], "s": ["a", f"v{i}", "z"]}, schema=schema))
    before = t.scan().to_arrow()
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="binpack")
    task = make_task(t, plan, plan.groups[0])
    last = f"{t.location}/{task.files[-1].path}"
    stored = pq.read_table(last)
    large = stored.cast(pa.schema([stored.schema.field("id"), stored.schema.field("s").with_type(pa.large_string())]))
    os.remove(last)
    pq.write_table(large, last, store_schema=True)
    assert pq.read_table(last).schema.field("s").type == pa.large_string()
    batches = read_small_inputs(t.io, task.location, task.schema, task.files, batch_rows=4)
    assert batches is not None  # the footers match: the pass starts
    with pytest.raises(OnePassError, match="does not read as the footers said"):
        list(batches)
    result = t.compaction.run("binpack", min_age_seconds=0)
    assert result.groups_failed == 0 and result.groups_committed == 1 and result.files_written == 1, \
        result.summary()
    assert len(per_file_reads) == MIN_INPUTS + 2  # read again, file by file
    after = t.scan().to_arrow()
    assert rows(after) == rows(before)
    assert after.schema.field("s").type == pa.string()
    assert len(t.plan_files()) == 1
    assert [f for f in os.listdir(f"{t.location}/data") if f.startswith("compact-")] == \
        [t.plan_files()[0].path.rsplit("/", 1)[-1]]  # nothing else of the run is left


def test_a_run_makes_one_encodings_choice_from_the_first_rows_written(local_catalog, monkeypatch):
    """WRITE-11, COMPACT-16 with COMPACT-38: the run's choice of encodings is made once, from the first
    rows a group writes (all of a ~20,000-row group's rows); every output has the same codecs, and the
    rows are the rows before."""
    # spec: WRITE-11, COMPACT-16, COMPACT-38
    from lakefmt import encoding

    chosen: list[int] = []
    choose = encoding.choose_encodings

    def spy_choose(sample, *args, **kwargs):  # type: ignore[no-untyped-def]
        chosen.append(sample.num_rows)
        return choose(sample, *args, **kwargs)

    monkeypatch.setattr(encoding, "choose_encodings", spy_choose)
    t = small_files_table(local_catalog, appends=10, rows=6_000)  # 3 missions: 20,000 rows a group
    before = t.scan().to_arrow()
    result = t.compaction.run("binpack", min_age_seconds=0)
    assert result.groups_failed == 0 and result.groups_committed == 3, result.summary()
    assert len(chosen) == 1 and chosen[0] > 16_384  # one choice, from a whole group's rows
    codecs = {tuple(pq.ParquetFile(f"{t.location}/{f.path}").metadata.row_group(0).column(i).compression
                    for i in range(len(t.arrow_schema()))) for f in t.plan_files()}
    assert len(codecs) == 1
    assert rows(t.scan().to_arrow()) == rows(before)
