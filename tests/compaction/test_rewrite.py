"""Rewriting groups: rows preserved for every strategy and type, schema drift, clustering,
verification (spec/compaction.md COMPACT-12..COMPACT-17)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lakefmt import encoding_reuse
from lakefmt.compaction import checksum, rewrite_group
from lakefmt.compaction.reader import read_table
from lakefmt.compaction.runner import make_task, plan_table
from lakefmt.compaction.zorder import zorder_keys
from lakefmt.encoding import choose_encodings
from lakefmt.errors import ChecksumMismatchError
from lakefmt.expressions import ALWAYS_TRUE, bind
from lakefmt.scan import read_data_file
from tests.compaction.conftest import ALL_TYPES, all_types_rows, small_files_table
from tests.conftest import downlinks, rows

STRATEGIES = [("binpack", {}), ("sort", {"sort_by": ["s", "l"]}),
              ("zorder", {"columns": ["b", "d", "dec", "wide", "day", "s", "bin"]})]


@pytest.mark.parametrize("strategy,layout", STRATEGIES, ids=[s for s, _ in STRATEGIES])
def test_rows_identical_for_every_type(local_catalog, strategy, layout):
    """COMPACT-12/13/14/15: the rows after compaction are the rows before, as multisets."""
    t = local_catalog.create_table("ns.types", schema=ALL_TYPES, partition_by=["p"])
    for seed in range(6):
        t.append(all_types_rows(300, seed))
    before = t.scan().to_arrow()
    pinned = t.current_snapshot().snapshot_id
    result = t.compaction.run(strategy, min_age_seconds=0, **layout)
    assert result.groups_committed == 2 and result.groups_failed == 0, result.summary()
    assert result.files_after == 2 and result.rows_rewritten == 1800
    after = t.scan().to_arrow()
    assert rows(after) == rows(before)
    assert checksum(after) == checksum(before)
    assert rows(t.scan(snapshot_id=pinned).to_arrow()) == rows(before)  # the pinned reader is unaffected
    snap = t.current_snapshot()
    assert snap.operation == "replace"
    assert snap.summary["added-records"] == snap.summary["deleted-records"]
    for f in t.plan_files():
        assert f.path.split("/")[-1].startswith("compact-")  # COMPACT-16: names mark compaction output
        footer = pq.ParquetFile(f"{t.location}/{f.path}").metadata
        assert footer.row_group(0).column(0).compression == "ZSTD"


def test_sort_output_is_sorted_and_marked(local_catalog):
    """COMPACT-14: sort by the table order: outputs sorted, sort_order_id recorded; merge path used."""
    t = small_files_table(local_catalog)
    result = t.compaction.run("sort", min_age_seconds=0)
    assert {g.method for g in result.groups} == {"merge"}  # every input was written sorted
    for f in t.plan_files():
        assert f.sort_order_id == t.sort_order().order_id
        data = pq.read_table(f"{t.location}/{f.path}")
        keys = [("payload_id", "ascending"), ("sensor_kind", "ascending")]
        assert data.take(pc.sort_indices(data, sort_keys=keys)).equals(data)
    # Unsorted inputs (bin-packed) are sorted in memory.
    t2 = small_files_table(local_catalog, "artemis.other")
    t2.compaction.run("binpack", min_age_seconds=0)
    for i in range(5):
        t2.append(downlinks(300, seed=50 + i))
    again = t2.compaction.run("sort", min_age_seconds=0, min_input_files=2)
    assert {g.method for g in again.groups} == {"memory-sort"}


def test_schema_drift_inputs(local_catalog):
    """COMPACT-12: files written before add_column / widen are projected by field id."""
    schema = pa.schema([("id", pa.int64()), ("n", pa.int32()), ("x", pa.float32()), ("tag", pa.string())])
    t = local_catalog.create_table("ns.drift", schema=schema, sort_by=["id"])
    for i in range(3):
        t.append(pa.table({"id": range(i * 100, i * 100 + 100), "n": [i] * 100, "x": [0.5] * 100,
                           "tag": ["old"] * 100}, schema=schema))
    with t.update_schema() as u:
        u.add_column("quality", pa.float64()).widen_column("n", pa.int64()).widen_column("x", pa.float64())
        u.rename_column("tag", "label")
    for i in range(3, 6):
        t.append(pa.table({"id": range(i * 100, i * 100 + 100), "n": [2**40 + i] * 100, "x": [0.25] * 100,
                           "label": ["new"] * 100, "quality": [float(i)] * 100}))
    before = t.scan().to_arrow()
    # The batch reader projects exactly like the core reader.
    for f in t.plan_files():
        location = f"{t.location}/{f.path}"
        core = read_data_file(t.io, location, t.schema(), t.schema(), bind(ALWAYS_TRUE, t.schema()))
        assert rows(read_table(t.io, location, t.schema())) == rows(core)
    for strategy in ("binpack", "sort", "zorder"):
        layout = {"columns": ["id", "quality"]} if strategy == "zorder" else {}
        result = t.compaction.run(strategy, min_age_seconds=0, min_input_files=1, **layout)
        assert result.groups_failed == 0, result.summary()
        assert rows(t.scan().to_arrow()) == rows(before)
    out = pq.read_schema(f"{t.location}/{t.plan_files()[0].path}")
    assert out.names == ["id", "n", "x", "label", "quality"]
    assert out.field("n").type == pa.int64() and out.field("x").type == pa.float64()


def test_sort_and_zorder_tighten_clustering(local_catalog):
    """After sort (Z-order), a point query plans far fewer files than before."""
    props = {"compaction.target-file-size-bytes": "12000"}
    t = small_files_table(local_catalog, appends=12, rows=1500, properties=props)
    query = "payload_id = 3"
    before = len(t.plan_files(query))
    assert before == len(t.plan_files())  # every small file holds every payload
    t.compaction.run("sort", min_age_seconds=0)
    sorted_files = len(t.plan_files(query))
    assert len(t.plan_files()) >= 3 * 3  # several files per partition
    assert sorted_files * 4 <= before, (before, sorted_files)

    z = small_files_table(local_catalog, "artemis.z", appends=12, rows=1500, properties=props)
    both = "payload_id = 3 AND sensor_kind = 'imu'"
    before_z = len(z.plan_files(both))
    z.compaction.run("zorder", min_age_seconds=0, columns=["payload_id", "sensor_kind"])
    after_z = len(z.plan_files(both))
    assert after_z * 3 <= before_z, (before_z, after_z)
    assert len(z.plan_files("sensor_kind = 'imu'")) < len(z.plan_files())


def test_zorder_keys_interleave_bits():
    """COMPACT-15: the key interleaves rank bits, column 0 most significant."""
    table = pa.table({"x": [0, 1, 0, 1, 2, 3, 2, 3], "y": [0, 0, 1, 1, 0, 0, 1, 1]})
    keys = zorder_keys(table, ["x", "y"]).to_pylist()
    assert keys == sorted(keys)  # the rows were listed in Z order
    assert len(set(keys)) == 8
    nulls = zorder_keys(pa.table({"a": [None, 5, 1]}), ["a"]).to_pylist()
    assert nulls[1] < nulls[0] and nulls[2] < nulls[1]  # nulls rank last


def test_checksum_mismatch_aborts_group(local_catalog):
    """COMPACT-17: an output that lost a row is detected; the group is aborted, its outputs deleted."""
    t = small_files_table(local_catalog, appends=6)
    before = t.scan().to_arrow()
    seen: list[str] = []

    def corrupt(point, info):
        if point == "outputs-written" and not seen:
            path = info["paths"][0]
            seen.append(path)
            data = pq.read_table(path)
            os.remove(path)
            pq.write_table(data.slice(1), path)  # one row fewer

    result = t.compaction.run("binpack", min_age_seconds=0, hook=corrupt, max_concurrent_groups=1)
    failed = [g for g in result.groups if g.status == "failed"]
    assert len(failed) == 1 and "ChecksumMismatchError" in failed[0].error
    assert result.groups_committed == 2  # one bad group never blocks the others (COMPACT-19)
    assert not os.path.exists(seen[0])
    assert rows(t.scan().to_arrow()) == rows(before)


def test_checksum_detects_changed_value(local_catalog):
    """With compaction.verify=read-back the outputs are decoded from storage: a changed value is caught."""
    t = small_files_table(local_catalog, appends=5)
    plan = plan_table(t, t.compaction.options(min_age_seconds=0, verify="read-back"), strategy="binpack")
    group = plan.groups[0]

    def tamper(point, info):
        path = info["paths"][0]
        data = pq.read_table(path)
        values = data.column("value").to_pylist()
        values[0] = -1.0
        fixed = data.set_column(data.schema.get_field_index("value"), data.schema.field("value"),
                                pa.array(values, pa.float64()))
        os.remove(path)
        pq.write_table(fixed, path)

    task = make_task(t, plan, group)
    with pytest.raises(ChecksumMismatchError, match="outputs hold"):
        rewrite_group(t.io, task, hook=tamper)
    clean = rewrite_group(t.io, task)
    assert clean.input_checksum == clean.output_checksum and clean.rows == group.input_rows
    t.io.delete_many(list(clean.output_paths))


def test_written_checksum_catches_a_bad_reorder(local_catalog, monkeypatch):
    """COMPACT-17 by default: the rows handed to the writer are hashed, so a reordering that
    duplicates one row and loses another (same count) fails the group and leaves no file."""
    from lakefmt.compaction import rewrite as rewrite_module

    t = small_files_table(local_catalog, appends=5)
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="sort", sort_by=["value"])
    task = make_task(t, plan, plan.groups[0])
    assert not task.read_back and not task.inputs_sorted  # sorted in memory, verified without decoding
    good = rewrite_module.sort_indices

    def bad_sort(table, keys):
        order = good(table, keys).to_pylist()
        return pa.array([order[1], *order[1:]], pa.uint64())  # first row lost, second one twice

    monkeypatch.setattr(rewrite_module, "sort_indices", bad_sort)
    written: list[str] = []
    with pytest.raises(ChecksumMismatchError, match="as handed to the writer"):
        rewrite_group(t.io, task, hook=lambda point, info: written.extend(info["paths"]))
    assert written and not any(t.io.exists(p) for p in written)
    monkeypatch.setattr(rewrite_module, "sort_indices", good)
    clean = rewrite_group(t.io, task)
    assert clean.input_checksum == clean.output_checksum and clean.rows == plan.groups[0].input_rows
    t.io.delete_many(list(clean.output_paths))


def test_footer_read_back_catches_a_replaced_output(local_catalog):
    """COMPACT-17: an output whose footer in storage counts other rows than the writer wrote fails the group."""
    t = small_files_table(local_catalog, appends=5)
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="binpack")
    task = make_task(t, plan, plan.groups[0])

    def truncate(point, info):
        path = info["paths"][0]
        data = pq.read_table(path)
        os.remove(path)
        pq.write_table(data.slice(0, data.num_rows - 1), path)

    with pytest.raises(ChecksumMismatchError, match="footers in storage say"):
        rewrite_group(t.io, task, hook=truncate)

    def destroy(point, info):
        with open(info["paths"][0], "r+b") as f:
            f.truncate(10)

    with pytest.raises(ChecksumMismatchError, match="cannot be read back") as caught:
        rewrite_group(t.io, task, hook=destroy)
    assert caught.value.__cause__ is not None


def test_verify_option_is_validated(local_catalog):
    """COMPACT-1: compaction.verify takes 'written' or 'read-back'; anything else names the property."""
    from lakefmt.errors import ValidationError

    t = small_files_table(local_catalog, appends=1)
    assert t.compaction.options().verify == "written"
    assert t.compaction.options(verify="read-back").verify == "read-back"
    with pytest.raises(ValidationError, match="compaction.verify"):
        t.compaction.options(verify="never")


def test_rewrite_group_runs_in_another_process(local_catalog):
    """The same rewrite function runs where a Spark task would: a spawned process with pickled args."""
    import multiprocessing

    t = small_files_table(local_catalog, appends=5)
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="sort")
    task = make_task(t, plan, plan.groups[0])
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        result = pool.apply(rewrite_group, (t.io, task))
    assert result.method == "merge" and result.rows == plan.groups[0].input_rows
    assert result.input_checksum == result.output_checksum
    assert all(t.io.exists(p) for p in result.output_paths)
    t.io.delete_many(list(result.output_paths))


def test_parquet_checksum_equals_arrow_checksum_for_every_type(tmp_path):
    """COMPACT-17: DuckDB decoding an output file hashes every row as the Arrow path hashes it."""
    from lakefmt.compaction.verify import parquet_checksum

    table = pa.concat_tables([all_types_rows(400, seed) for seed in range(3)])
    specials = pa.table({"d": pa.array([float("nan"), -0.0, 0.0, float("inf"), float("-inf")], pa.float64()),
                         "f": pa.array([float("nan"), -0.0, 0.0, float("inf"), None], pa.float32()),
                         "s": pa.array(["", "é", None, "a\x00b", "x" * 300])})
    narrow = table.drop_columns(["wide"])
    for data in (narrow, specials):
        path = str(tmp_path / f"{len(data.columns)}.parquet")
        pq.write_table(data, path, compression="zstd", use_dictionary=["s"])
        assert parquet_checksum(path, data.schema) == checksum(data)
        changed = data.slice(1)
        pq.write_table(changed, path + ".2")
        assert parquet_checksum(path + ".2", data.schema) != checksum(data)
    wide_path = str(tmp_path / "wide.parquet")
    pq.write_table(table, wide_path)
    assert parquet_checksum(wide_path, table.schema) is None  # decimal(40,4): DuckDB would type it otherwise


def test_parquet_checksum_reads_columns_whose_names_need_quoting(tmp_path):
    """COMPACT-17: a column name with quotes, spaces, SQL or a NUL in it is quoted, never run."""
    from lakefmt.compaction.verify import parquet_checksum

    data = pa.table({'a "quoted" name': [1, 2, 3], "x); DROP TABLE t; --": ["p", "q", None], "sp ace": [1.5, None, 2.5]})
    path = str(tmp_path / "quoted.parquet")
    pq.write_table(data, path)
    assert parquet_checksum(path, data.schema) == checksum(data)
    assert parquet_checksum(path, data.schema) != checksum(data.slice(1))
    nul = pa.table({"a\x00b": [1, 2]})
    pq.write_table(nul, str(tmp_path / "nul.parquet"))
    assert parquet_checksum(str(tmp_path / "nul.parquet"), nul.schema) == checksum(nul)


def test_high_cardinality_columns_are_written_without_dictionary(local_catalog):
    """COMPACT-16: nearly-unique columns are plain-encoded; columns with few values keep the dictionary."""
    t = small_files_table(local_catalog, appends=4, rows=3000, partition_by=())
    t.compaction.run("binpack", min_age_seconds=0, min_input_files=2)
    (f,) = t.plan_files()
    footer = pq.ParquetFile(f"{t.location}/{f.path}").metadata
    by_name = {footer.row_group(0).column(i).path_in_schema: footer.row_group(0).column(i)
               for i in range(footer.num_columns)}
    assert not by_name["ts"].has_dictionary_page and not by_name["value"].has_dictionary_page
    assert by_name["sensor_kind"].has_dictionary_page and by_name["payload_id"].has_dictionary_page
    assert "DELTA_BINARY_PACKED" in by_name["ts"].encodings  # WRITE-7: a near-unique timestamp
    assert "DELTA_BINARY_PACKED" not in by_name["value"].encodings  # a double: plain


def test_outputs_of_one_run_share_the_first_outputs_encodings(local_catalog):
    """WRITE-11, COMPACT-16: the encodings are chosen once per run, from the first rows its first
    output gets, and every output of the run takes them: here a column near-unique in one
    partition and repetitive in the others is stored alike in all three outputs; rows unchanged."""
    schema = pa.schema([("p", pa.int32()), ("x", pa.int64())])
    t = local_catalog.create_table("db.shared", schema, partition_by=["p"])
    for i in range(3):
        for p in range(3):
            x = range(i * 2000, i * 2000 + 2000) if p == 0 else [j % 5 for j in range(2000)]
            t.append(pa.table({"p": pa.array([p] * 2000, pa.int32()), "x": pa.array(x, pa.int64())}))
    before = t.scan().to_arrow()
    result = t.compaction.run("binpack", min_age_seconds=0, min_input_files=2, max_concurrent_groups=1)
    assert result.groups_committed == 3 and result.files_written == 3
    stored = set()
    for f in t.plan_files():
        column = pq.ParquetFile(f"{t.location}/{f.path}").metadata.row_group(0).column(1)
        stored.add((column.has_dictionary_page, tuple(sorted(column.encodings))))
    assert len(stored) == 1  # one choice for the run, whichever partition came first
    assert rows(t.scan().to_arrow()) == rows(before)
    unique, repetitive = (choose_encodings(pa.table({"p": pa.array([0] * 6000, pa.int32()),
                                                     "x": pa.array(x, pa.int64())}))
                          for x in (range(6000), [j % 5 for j in range(6000)]))
    assert unique != repetitive  # chosen per output, the partitions' outputs would differ


def test_binpack_mixes_dictionary_and_plain_string_inputs(local_catalog, monkeypatch):
    """Bin-pack keeps dictionary-encoded strings as dictionaries; inputs that store the same column
    plain (near-unique values) are decoded alongside, and every row comes out unchanged."""
    monkeypatch.setattr(encoding_reuse, "REUSE_FILES", 0)  # each input chooses its own encodings (WRITE-11)
    schema = pa.schema([("k", pa.string()), ("n", pa.int64())])
    t = local_catalog.create_table("db.strings", schema)
    few = pa.table({"k": pa.array(["a", "b", None, "c"] * 600), "n": pa.array(range(2400), pa.int64())})
    many = pa.table({"k": pa.array([f"id-{i}" for i in range(3000)]), "n": pa.array(range(3000), pa.int64())})
    for data in (few, many, few, many, few):
        t.append(data)
    stored = set()
    for f in t.plan_files():
        column = pq.ParquetFile(f"{t.location}/{f.path}").metadata.row_group(0).column(0)
        stored.add(column.has_dictionary_page)
    assert stored == {True, False}  # both kinds of input are in the group
    before = t.scan().to_arrow()
    result = t.compaction.run("binpack", min_age_seconds=0, min_input_files=2)
    assert result.groups_committed == 1 and result.files_rewritten == 5
    assert rows(t.scan().to_arrow()) == rows(before)
    assert t.scan().to_arrow().schema.field("k").type == pa.string()  # never a dictionary to readers
    (f,) = t.plan_files()
    assert pq.read_schema(f"{t.location}/{f.path}").field("k").type == pa.string()  # nor in the file


def test_rank_sort_and_compact_zorder_match_the_definitions():
    """COMPACT-14/15: the packed-rank sort and the compact Z-order key give the reference permutations."""
    import random

    from lakefmt.compaction import ranks
    from lakefmt.compaction.zorder import zorder_indices
    from lakefmt.sorting import sort_indices

    rng = random.Random(5)
    n = 3000
    table = pa.table({
        "few": pa.array([rng.choice(["b", "a", "c", None]) for _ in range(n)]),
        "num": pa.array([rng.choice([1.5, float("nan"), -0.0, 0.0, None, 3.0]) for _ in range(n)], pa.float64()),
        "many": pa.array([rng.randrange(10**9) if rng.random() > 0.1 else None for _ in range(n)], pa.int64()),
    })
    for keys in ([("few", "ascending", "at_end"), ("many", "descending", "at_start")],
                 [("num", "descending", "at_end"), ("few", "descending", "at_start"), ("many", "ascending", "at_end")],
                 [("many", "ascending", "at_start")] * 6):  # 6 x 12 bits > 64: falls back to the multi-key sort
        assert ranks.sort_indices(table, keys).equals(sort_indices(table, keys))
    for columns in (["few"], ["few", "num"], ["many", "few", "num"]):
        assert zorder_indices(table, columns).equals(pc.sort_indices(zorder_keys(table, columns)))
    assert len(ranks.sort_indices(table.slice(0, 0), [("few", "ascending", "at_end")])) == 0


@pytest.mark.parametrize("strategy,layout", [("sort", {"sort_by": ["payload_id"]}),
                                             ("zorder", {"columns": ["payload_id", "sensor_kind"]})])
def test_clustered_outputs_use_small_row_groups(local_catalog, strategy, layout):
    """COMPACT-16: sort and Z-order outputs hold at most compaction.sorted-row-group-rows rows per
    row group (bin-pack keeps the table's); a selective scan returns the same rows as a filter."""
    t = small_files_table(local_catalog, properties={"compaction.sorted-row-group-rows": "1000"})
    before = t.scan().to_arrow()
    result = t.compaction.run(strategy, min_age_seconds=0, **layout)
    assert result.groups_committed == 3
    for task in t.scan().plan().tasks:
        footer = pq.read_metadata(task.location)
        assert footer.num_row_groups > 1
        assert all(footer.row_group(i).num_rows <= 1000 for i in range(footer.num_row_groups))
    expected = before.filter(pc.and_(pc.equal(before["payload_id"], 7), pc.equal(before["sensor_kind"], "imu")))
    assert rows(t.scan("payload_id = 7 AND sensor_kind = 'imu'").to_arrow()) == rows(expected)
    assert rows(t.scan().to_arrow()) == rows(before)


def test_binpack_outputs_keep_the_tables_row_group_size(local_catalog):
    """COMPACT-16: bin-pack outputs use write.parquet.row-group-rows, not the clustered size."""
    t = small_files_table(local_catalog, properties={"compaction.sorted-row-group-rows": "1000",
                                                     "write.parquet.row-group-rows": "2000"})
    t.compaction.run("binpack", min_age_seconds=0)
    sizes = [pq.read_metadata(task.location).row_group(0).num_rows for task in t.scan().plan().tasks]
    assert sizes and all(n == 2000 for n in sizes)


def test_a_run_of_small_groups_measures_compression_as_a_whole(local_catalog):
    """WRITE-7, COMPACT-16: three partitions of 12,000 rows, each below the rows that make a trial
    write, together pass them: every output stores the random doubles uncompressed, which a
    12,000-row append does not; the rows are unchanged."""
    # spec: WRITE-7, COMPACT-16
    import random

    rng = random.Random(11)
    schema = pa.schema([("p", pa.int32()), ("noise", pa.float64())])
    t = local_catalog.create_table("db.small_groups", schema, partition_by=["p"])
    for _ in range(3):
        for p in range(3):
            t.append(pa.table({"p": pa.array([p] * 4000, pa.int32()),
                               "noise": pa.array([rng.random() for _ in range(4000)], pa.float64())}))
    before = t.scan().to_arrow()

    def codecs() -> set[str]:
        return {pq.ParquetFile(f"{t.location}/{f.path}").metadata.row_group(0).column(1).compression
                for f in t.plan_files()}

    assert codecs() == {"ZSTD"}  # appends of 4,000 rows: no trial write
    result = t.compaction.run("binpack", min_age_seconds=0, min_input_files=2)
    assert result.groups_committed == 3 and result.files_written == 3 and result.rows_rewritten == 36_000
    assert codecs() == {"UNCOMPRESSED"}
    assert rows(t.scan().to_arrow()) == rows(before)
    single = local_catalog.create_table("db.one_group", schema)
    single.append(before.slice(0, 12_000))
    (f,) = single.plan_files()
    assert pq.ParquetFile(f"{single.location}/{f.path}").metadata.row_group(0).column(1).compression == "ZSTD"
