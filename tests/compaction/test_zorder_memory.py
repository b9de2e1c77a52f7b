"""Sort and Z-order of groups larger than memory, in key ranges spilled to local disk
(spec/compaction.md COMPACT-36; the orders of COMPACT-14 and COMPACT-15 for the whole group)."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lakefmt import encoding_reuse
from lakefmt.compaction import checksum, ranks, rewrite_group, spill
from lakefmt.compaction.group_keys import sort_group_key, zorder_group_key
from lakefmt.compaction.runner import make_task, plan_table
from lakefmt.compaction.zorder import zorder_indices
from lakefmt.sorting import sort_indices
from tests.compaction.conftest import ALL_TYPES, all_types_rows, run_python, small_files_table
from tests.conftest import rows

WIDE = pa.schema([("id", pa.int64()), ("payload_id", pa.int64()), ("kind", pa.string()),
                  ("value", pa.float64()), ("payload", pa.string())])


def wide_rows(n: int, seed: int) -> pa.Table:
    """Rows with few-valued keys (payload_id, kind), a float with NaN and -0.0, and a wide string."""
    rng = random.Random(seed)
    return pa.table({
        "id": pa.array(range(seed * n, seed * n + n), pa.int64()),
        "payload_id": pa.array([rng.randrange(300) if rng.random() > 0.05 else None for _ in range(n)], pa.int64()),
        "kind": pa.array([rng.choice(["imu", "gps", "cam", "mag", None]) for _ in range(n)]),
        "value": pa.array([rng.choice([1.5, float("nan"), -0.0, 0.0, None, rng.random()]) for _ in range(n)]),
        "payload": pa.array([f"{rng.getrandbits(64):016x}" * 8 for _ in range(n)]),
    }, schema=WIDE)


def wide_table(catalog, name: str = "db.wide", *, files: int = 8, n: int = 2000):
    t = catalog.create_table(name, schema=WIDE)
    for i in range(files):
        t.append(wide_rows(n, i))
    return t


def _run(t, strategy: str, budget: int, **layout):
    """Rewrite the table's one group with ``budget``; the output rows in write order, and the result."""
    plan = plan_table(t, t.compaction.options(min_age_seconds=0, sort_memory_bytes=budget), strategy=strategy,
                      **layout)
    (group,) = plan.groups
    result = rewrite_group(t.io, make_task(t, plan, group))
    out = pa.concat_tables(pq.read_table(p) for p in result.output_paths)
    t.io.delete_many(list(result.output_paths))
    return out, result


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Same rows in the same order (ids are unique; NaN equals NaN, which ``Table.equals`` denies)."""
    return a.column("id").equals(b.column("id")) and checksum(a) == checksum(b)


def _in_order(t, order) -> pa.Table:
    """The group's rows in input order (files in plan order), taken by ``order``."""
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="binpack")
    group = pa.concat_tables(pq.read_table(f"{t.location}/{f.path}") for f in plan.groups[0].files)
    return group.take(order(group))


@pytest.mark.parametrize("strategy,layout", [
    ("zorder", {"columns": ["payload_id", "kind"]}),
    ("zorder", {"columns": ["value", "kind", "id"]}),  # a float, and a column of unique values
    ("sort", {"sort_by": ["kind", "payload_id"]}),
    ("sort", {"sort_by": ["kind DESC NULLS FIRST", "value", "id"]}),
])
def test_spilled_order_is_the_in_memory_order(local_catalog, strategy, layout):
    """COMPACT-36: with a budget far below the group, the outputs hold the rows in exactly the order
    of the in-memory rewrite of the whole group (COMPACT-14, COMPACT-15), across every output."""
    t = wide_table(local_catalog)
    in_memory, mem_result = _run(t, strategy, 1 << 40, **layout)
    spilled, spill_result = _run(t, strategy, 200_000, **layout)
    assert mem_result.method in ("zorder", "memory-sort")
    assert spill_result.method == f"spill-{strategy}"
    assert _same(spilled, in_memory)
    assert spill_result.input_checksum == spill_result.output_checksum == mem_result.output_checksum
    if strategy == "zorder":
        expected = _in_order(t, lambda g: zorder_indices(g, layout["columns"]))
        assert _same(spilled, expected)


def test_spilled_order_with_key_prefix_and_histogram_bins(local_catalog, monkeypatch):
    """COMPACT-36: a sort whose ranks need more than 64 bits (the key packs a prefix of the sort
    columns, ranges are then sorted by the full order) and ranges from key-prefix bins (too many key
    combinations to count exactly) still give the in-memory order."""
    rng = random.Random(3)
    names = [f"x{i}" for i in range(6)]
    schema = pa.schema([("id", pa.int64()), *[(n, pa.int64()) for n in names], ("g", pa.string())])
    t = local_catalog.create_table("db.prefix", schema=schema)
    for f in range(6):
        x = [rng.randrange(4096) for _ in range(1500)]
        t.append(pa.table({"id": range(f * 1500, f * 1500 + 1500), **{n: x for n in names},
                           "g": [rng.choice(["a", "b", None]) for _ in x]}, schema=schema))
    keys = [*names, "g DESC"]  # 6 x 12 bits > 64: the key packs x0..x4, ties are broken by x5 and g
    in_memory, _ = _run(t, "sort", 1 << 40, sort_by=keys)
    monkeypatch.setattr(spill, "TUPLE_LIMIT", 100)
    monkeypatch.setattr(spill, "HISTOGRAM_BITS", 6)
    spilled, result = _run(t, "sort", 100_000, sort_by=keys)
    assert result.method == "spill-sort"
    assert _same(spilled, in_memory)
    assert in_memory.select(["x0", "g"]).to_pylist() != sorted(in_memory.select(["x0", "g"]).to_pylist(),
                                                                key=lambda r: (r["x0"], r["g"] or ""))
    z_memory, _ = _run(t, "zorder", 1 << 40, columns=["g", "id"])
    z_spilled, result = _run(t, "zorder", 100_000, columns=["g", "id"])
    assert result.method == "spill-zorder" and _same(z_spilled, z_memory)


def test_spilled_rewrite_of_every_type(local_catalog):
    """COMPACT-36 with COMPACT-12/17: every column type, nulls everywhere; rows equal as multisets
    after a spilled Z-order and sort through the runner, and the same order as in memory."""
    def table(name: str):
        t = local_catalog.create_table(name, schema=ALL_TYPES, partition_by=["p"],
                                       properties={"compaction.sort-memory-bytes": "20000"})
        for seed in range(6):
            t.append(all_types_rows(300, seed))
        return t

    t = table("ns.types")
    before = t.scan().to_arrow()
    columns = ["b", "d", "dec", "wide", "day", "s", "bin"]
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="zorder", columns=columns)
    for group in plan.groups:
        task = make_task(t, plan, group)
        result = rewrite_group(t.io, task)
        assert result.method == "spill-zorder"
        got = pa.concat_tables(pq.read_table(p) for p in result.output_paths)
        t.io.delete_many(list(result.output_paths))
        inputs = pa.concat_tables(pq.read_table(f"{t.location}/{f.path}") for f in group.files)
        assert got.equals(inputs.take(zorder_indices(inputs, columns)).cast(got.schema))
    for strategy, layout in (("zorder", {"columns": columns}), ("sort", {"sort_by": ["s", "l"]})):
        t = table(f"ns.{strategy}")
        result = t.compaction.run(strategy, min_age_seconds=0, **layout)
        assert result.groups_committed == 2 and result.groups_failed == 0, result.summary()
        assert {g.method for g in result.groups} == {f"spill-{strategy}"}
        assert rows(t.scan().to_arrow()) == rows(before)


def test_spilled_rewrite_mixes_dictionary_and_plain_string_inputs(local_catalog, monkeypatch):
    """COMPACT-36: a string column stored with a dictionary in some inputs and plain in others is
    routed as one type; the order is the in-memory order and readers see plain strings."""
    monkeypatch.setattr(encoding_reuse, "REUSE_FILES", 0)  # each input chooses its own encodings (WRITE-11)
    schema = pa.schema([("id", pa.int64()), ("k", pa.string())])
    t = local_catalog.create_table("db.strings", schema)
    few = [["a", "b", None, "c"] * 600, [f"id-{i}" for i in range(3000)]]
    start = 0
    for i in range(5):
        keys = few[i % 2]
        t.append(pa.table({"id": pa.array(range(start, start + len(keys)), pa.int64()), "k": keys}, schema=schema))
        start += len(keys)
    stored = {pq.ParquetFile(f"{t.location}/{f.path}").metadata.row_group(0).column(1).has_dictionary_page
              for f in t.plan_files()}
    assert stored == {True, False}
    for strategy, layout in (("zorder", {"columns": ["k", "id"]}), ("sort", {"sort_by": ["k DESC", "id"]})):
        in_memory, _ = _run(t, strategy, 1 << 40, **layout)
        spilled, result = _run(t, strategy, 30_000, **layout)
        assert result.method == f"spill-{strategy}"
        assert spilled.equals(in_memory)
        assert spilled.schema.field("k").type == pa.string()


@pytest.mark.parametrize("strategy,layout", [("zorder", {"columns": ["payload_id", "sensor_kind"]}),
                                             ("sort", {"sort_by": ["value"]})])
def test_spilled_rewrite_drops_deleted_rows(local_catalog, strategy, layout):
    """COMPACT-36 with COMPACT-32/33: both passes read the inputs with their deletion vectors; the
    outputs hold exactly the live rows and no deleted row."""
    from tests.compaction.test_compaction_deletes import delete_some, stored_rows

    t = small_files_table(local_catalog, appends=6, rows=600)
    delete_some(t)
    before = t.scan().to_arrow()
    deleted = sum(f.deleted_record_count for f in t.plan_files())
    result = t.compaction.run(strategy, min_age_seconds=0, sort_memory_bytes=20_000, **layout)
    assert (result.groups_committed, result.groups_failed) == (3, 0), result.summary()
    assert {g.method for g in result.groups} == {f"spill-{strategy}"}
    assert result.rows_rewritten == before.num_rows and result.deleted_rows_dropped == deleted
    t.refresh()
    assert rows(t.scan().to_arrow()) == rows(before)
    assert rows(stored_rows(t)) == rows(before)
    assert all(f.deletion_vector is None for f in t.plan_files())


def test_group_keys_match_the_in_memory_ranks():
    """COMPACT-36: keys computed from a group's distinct values order rows as the in-memory ranks do."""
    table = wide_rows(3000, 1)
    pieces = {c: pa.concat_arrays([pc.unique(table.column(c).combine_chunks().slice(i, 700))
                                   for i in range(0, 3000, 700)]) for c in table.column_names}
    for columns in (["kind"], ["kind", "value"], ["id", "kind", "value"]):
        key = zorder_group_key(pieces, columns)
        assert pc.sort_indices(key.of(table)).equals(zorder_indices(table, columns))
    for keys in ([("kind", "ascending", "at_end"), ("payload_id", "descending", "at_start")],
                 [("value", "descending", "at_end"), ("kind", "descending", "at_start")]):
        key = sort_group_key(pieces, keys)
        assert key.complete
        assert pc.sort_indices(key.of(table)).equals(sort_indices(table, keys))
        assert ranks.sort_indices(table, keys).equals(sort_indices(table, keys))
    with pytest.raises(ValueError, match="not among the group"):
        zorder_group_key({"kind": pa.array(["imu"])}, ["kind"]).of(pa.table({"kind": ["gps"]}))


def test_spill_files_are_removed_on_success_and_failure(local_catalog, tmp_path, monkeypatch):
    """COMPACT-36: scratch files live in the temporary folder, never in the table, and are gone when
    the rewrite ends -- also when it fails while rows are being routed (its outputs are deleted too)."""
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    t = wide_table(local_catalog, files=6, n=1000)
    before = checksum(t.scan().to_arrow())
    data_before = {p for p in _files(t.location)}
    plan = plan_table(t, t.compaction.options(min_age_seconds=0, sort_memory_bytes=50_000), strategy="zorder",
                      columns=["payload_id", "kind"])
    task = make_task(t, plan, plan.groups[0])
    seen: list[str] = []

    def throttle(nbytes: int) -> None:  # called before each input is read: fail in the routing pass
        seen.append(str(sorted(p.name for p in scratch.iterdir())))
        if len(seen) == len(task.files) + 4:
            raise RuntimeError("read failed")

    with pytest.raises(RuntimeError, match="read failed"):
        rewrite_group(t.io, task, throttle=throttle)
    assert any("lakefmt-spill-" in s for s in seen)  # the scratch folder existed during the rewrite
    assert list(scratch.iterdir()) == []
    assert {p for p in _files(t.location)} == data_before  # no output left behind
    result = rewrite_group(t.io, task)
    assert result.method == "spill-zorder" and list(scratch.iterdir()) == []
    assert not any("lakefmt-spill" in p for p in _files(t.location))
    t.io.delete_many(list(result.output_paths))
    assert checksum(t.scan().to_arrow()) == before == result.output_checksum


def _files(location: str) -> list[str]:
    import os

    return [os.path.join(d, n) for d, _, names in os.walk(location) for n in names]


def test_plan_ranges_bounds_rows_and_isolates_heavy_keys():
    """COMPACT-36: ranges are consecutive, hold at most the budget of rows unless one key alone holds more."""
    histogram = spill.Histogram(0, [0, 1, 2, 5, 6, 9], [3, 3, 10, 1, 1, 2], [1, 1, 1, 1, 1, 1])
    r = spill.plan_ranges(histogram, 4, complete=True)
    assert r.rows == (3, 3, 10, 4) and r.single == (True, True, True, False)
    assert r.of(pa.array([0, 1, 2, 3, 4, 5, 6, 9], pa.uint64())).to_pylist() == [0, 1, 2, 2, 2, 3, 3, 3]
    assert spill.plan_ranges(histogram, 100, complete=False).rows == (20,)


MEMORY_SCRIPT = """
import json
import lakefmt
t = lakefmt.Catalog(WAREHOUSE).load_table(NAME)
def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
before = peak()
result = t.compaction.run("zorder", columns=["payload_id", "kind"], min_age_seconds=0,
                          sort_memory_bytes=BUDGET)
assert result.groups_committed == 1 and result.groups_failed == 0, result.summary()
print(json.dumps({"grew": peak() - before, "method": result.groups[0].method}))
"""


def narrow_rows(n: int, seed: int) -> pa.Table:
    """``n`` rows of about 100 bytes in Arrow, generated without a Python loop."""
    import numpy as np

    rng = np.random.default_rng(seed)
    hexes = np.frombuffer(b"0123456789abcdef", np.uint8)[rng.integers(0, 16, size=(n, 64), dtype=np.uint8)]
    kinds = pa.array(["imu", "gps", "cam", "mag", "sun"]).take(pa.array(rng.integers(0, 5, n)))
    return pa.table({
        "id": pa.array(np.arange(seed * n, seed * n + n)), "payload_id": pa.array(rng.integers(0, 300, n)),
        "kind": kinds, "value": pa.array(rng.normal(size=n)),
        "payload": pa.StringArray.from_buffers(n, pa.py_buffer(np.arange(0, (n + 1) * 64, 64, dtype=np.int32)),
                                               pa.py_buffer(hexes.tobytes())),
    }, schema=WIDE)


def test_zorder_memory_does_not_grow_with_the_group(local_catalog, tmp_path):
    """COMPACT-36: in a fresh process, a Z-order of a group of ~120 MB of rows with an 8 MB budget grows
    the process by less than half what the in-memory Z-order of the same group (which holds it and
    its reordered copy) does; the rows are unchanged."""
    tables = {}
    for name in ("db.spilled", "db.in_memory"):
        t = local_catalog.create_table(name, schema=WIDE)
        for i in range(12):
            t.append(narrow_rows(100_000, i))
        tables[name] = t
    expected = rows(tables["db.spilled"].scan("payload_id = 7").to_arrow())
    grew = {}
    for name, budget in (("db.spilled", 8 << 20), ("db.in_memory", 1 << 40)):
        code = f"WAREHOUSE, NAME, BUDGET = {str(tmp_path / 'warehouse')!r}, {name!r}, {budget}\n" + MEMORY_SCRIPT
        proc = run_python(code, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        grew[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        tables[name].refresh()
        assert rows(tables[name].scan("payload_id = 7").to_arrow()) == expected
        assert tables[name].scan().to_arrow().num_rows == 1_200_000
    assert grew["db.spilled"]["method"] == "spill-zorder" and grew["db.in_memory"]["method"] == "zorder"
    assert grew["db.in_memory"]["grew"] > 200e6, grew  # the group held at once
    # What the spilled rewrite adds is its buffers (rows hashed, handed to the writer, a routed batch),
    # not the group: measured 140 MB against 331 MB for the in-memory rewrite.
    assert grew["db.spilled"]["grew"] < grew["db.in_memory"]["grew"] / 2, grew


def test_sort_memory_option_is_validated(local_catalog):
    """COMPACT-1: compaction.sort-memory-bytes is a positive integer; a bad value names the property."""
    from lakefmt.errors import ValidationError

    t = local_catalog.create_table("db.opts", schema=WIDE, properties={"compaction.sort-memory-bytes": "1000"})
    assert t.compaction.options().sort_memory_bytes == 1000
    assert t.compaction.options(sort_memory_bytes=5).sort_memory_bytes == 5
    with pytest.raises(ValidationError, match="compaction.sort-memory-bytes"):
        t.compaction.options(sort_memory_bytes=0)
    bad = local_catalog.create_table("db.bad", schema=WIDE, properties={"compaction.sort-memory-bytes": "lots"})
    with pytest.raises(ValidationError, match="compaction.sort-memory-bytes"):
        bad.compaction.options()


def _chunked_with_dictionaries(seed: int) -> pa.Table:
    """Wide rows in chunks of uneven sizes; ``kind`` is a dictionary with a different dictionary
    (in a different order, with an unused entry) in every chunk."""
    parts = []
    for i, n in enumerate((700, 1, 1300, 0, 999)):
        part = wide_rows(n, seed + i)
        kinds = ["zz-unused", "mag", "imu", "gps", "cam"][::-1 if i % 2 else 1]
        codes = pa.array([None if k is None else kinds.index(k) for k in part.column("kind").to_pylist()], pa.int32())
        kind = pa.DictionaryArray.from_arrays(codes, pa.array(kinds))
        parts.append(part.set_column(2, pa.field("kind", kind.type), kind))
    return pa.concat_tables(parts)


def test_dense_ranks_of_dictionary_columns_are_the_decoded_columns_ranks():
    """COMPACT-14/15: a key column held as dictionaries (each chunk its own) ranks as its values do,
    so the group's order does not depend on how its strings were read."""
    table = _chunked_with_dictionaries(3)
    plain = table.set_column(2, "kind", table.column("kind").cast(pa.string()))
    for order, placement in (("ascending", "at_end"), ("descending", "at_start")):
        got, count = ranks.dense_rank(table.column("kind"), order, placement)
        want, want_count = ranks.dense_rank(plain.column("kind"), order, placement)
        assert got.equals(want) and count == want_count == 5  # four values and null: the unused entry has no rank
    for columns in (["kind", "payload_id"], ["value", "kind"]):
        assert zorder_indices(table, columns).equals(zorder_indices(plain, columns))
    for keys in ([("kind", "descending", "at_start"), ("payload_id", "ascending", "at_end")],
                 [("payload", "ascending", "at_end"), ("kind", "ascending", "at_end"), ("id", "descending", "at_end")]):
        assert ranks.sort_indices(table, keys).equals(sort_indices(plain, keys))  # the second: over 64 bits


@pytest.mark.parametrize("piece_bytes", [1, 40_000, 1 << 30])
def test_gathered_slices_are_the_rows_of_one_take(monkeypatch, piece_bytes):
    """COMPACT-36: the group held in pieces and reordered a slice at a time gives exactly
    ``table.take(order)`` -- every row once, in order -- however the pieces and slices fall."""
    monkeypatch.setattr(spill, "PIECE_BYTES", piece_bytes)
    tables = [_chunked_with_dictionaries(7).slice(0, 1500), _chunked_with_dictionaries(8)]
    plain = pa.concat_tables([t.set_column(2, "kind", t.column("kind").cast(pa.string())) for t in tables])
    group = spill.gathered(tables, WIDE)
    assert tables == [] and group.num_rows == plain.num_rows
    assert pa.types.is_dictionary(group.schema.field("kind").type)  # a dictionary in every input: kept
    first = group.column("kind").chunk(0).dictionary
    assert all(c.dictionary.equals(first) for c in group.column("kind").chunks)  # one shared dictionary
    if piece_bytes == 1:
        assert group.column("payload").num_chunks == len(group.to_batches()) > 1  # never one concatenated copy
    order = pc.sort_indices(plain, [("kind", "descending"), ("value", "ascending"), ("id", "descending")])
    for rows_at_once in (1, 333, 4096, 1 << 20):
        parts = list(spill.take_slices(group, order, rows_at_once))
        assert all(p.num_rows <= rows_at_once for p in parts)
        out = pa.concat_tables(parts)
        out = out.set_column(2, "kind", out.column("kind").cast(pa.string()))
        assert _same(out, plain.take(order))


def test_gathered_decodes_a_column_that_is_a_dictionary_in_some_inputs_only():
    """COMPACT-36: inputs that store a string column with and without a dictionary are held as
    plain strings, values unchanged."""
    dictionary = _chunked_with_dictionaries(4)
    plain = wide_rows(500, 9)
    group = spill.gathered([dictionary, plain], WIDE)
    assert group.schema.equals(WIDE)
    want = pa.concat_tables([dictionary.set_column(2, "kind", dictionary.column("kind").cast(pa.string())), plain])
    assert _same(group, want)
    assert spill.gathered([], WIDE).num_rows == 0


def test_group_within_the_budget_is_ordered_in_memory(local_catalog):
    """COMPACT-36: a group whose rows, permutation and one row group of reordered rows fit the
    budget is ordered in memory, though it takes more than half the budget; a little less budget
    and it is ordered in key ranges. Both give the same outputs."""
    t = wide_table(local_catalog, files=6, n=3000)
    plan = plan_table(t, t.compaction.options(min_age_seconds=0), strategy="zorder",
                      columns=["payload_id", "kind"])
    (group,) = plan.groups
    task = make_task(t, plan, group)
    sample = pq.read_table(f"{t.location}/{group.files[0].path}", read_dictionary=["kind"]).slice(0, 8192)
    row_bytes = sample.nbytes / sample.num_rows
    count = sum(f.record_count for f in group.files)
    need = row_bytes * count + 8 * count + row_bytes * task.write_options.row_group_rows
    in_memory, result = _run(t, "zorder", int(need * 1.02), columns=["payload_id", "kind"])
    assert result.method == "zorder" and row_bytes * count > need * 1.02 / 2
    spilled, spill_result = _run(t, "zorder", int(need * 0.9), columns=["payload_id", "kind"])
    assert spill_result.method == "spill-zorder"
    assert _same(in_memory, spilled)
    assert checksum(in_memory) == checksum(t.scan().to_arrow())  # every row once (NaN included)
