"""A process that appends, plans, scans and compacts never imports pandas (issue 11: process start cost).

pyarrow imports pandas, when installed, the first time a Python value is converted to Arrow
(``pa.array``, ``pa.scalar``, ``from_pydict``, a compute function given a Python number, a
zoned timestamp's ``as_py``) or pyarrow.dataset is imported: 0.15-0.4 s per process. lakefmt's
common paths build such values from buffers (lakefmt.arrow_values) and load pyarrow.dataset
only for a scan of many files (lakefmt.fragment_scan.use_scanner).
"""

from __future__ import annotations

import decimal
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from lakefmt import arrow_values

REPO = Path(__file__).resolve().parents[1]

STEPS = textwrap.dedent('''
    import sys
    import traceback

    first = []

    class Finder:  # notes where pandas is first imported, for the failure message
        def find_spec(self, name, path=None, target=None):
            if name in ("pandas", "pyarrow.dataset") and not first:
                first.append("".join(traceback.format_stack(limit=12)))

    sys.meta_path.insert(0, Finder())

    def check(step):
        for module in ("pandas", "pyarrow.dataset"):
            if module in sys.modules:
                print(f"{module} imported by: {step}")
                print(first[0] if first else "")
                sys.exit(3)

    import pyarrow as pa
    import lakefmt
    from lakefmt import arrow_values
    check("import lakefmt")

    warehouse = sys.argv[1]
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("kind", pa.string()),
                        ("ts", pa.timestamp("us", tz="UTC")), ("x", pa.float64()), ("small", pa.int32())])
    cat = lakefmt.Catalog(warehouse, create=True)
    cat.create_table("db.t", schema=schema, partition_by=["day(ts)"])
    cat.create_table("db.b", schema=schema, partition_by=["bucket(4, id)", "truncate(10, small)", "kind"])
    check("create table")
    t = cat.load_table("db.t")
    check("load table")

    def rows(k):
        ids = list(range(10 * k, 10 * k + 10))
        return pa.Table.from_arrays([
            arrow_values.array(ids, pa.int64()),
            arrow_values.array([None if i % 4 == 0 else f"k{i % 3}" for i in ids], pa.string()),
            arrow_values.array([1_767_225_600_000_000 + i * 1_800_000_000 for i in ids], pa.timestamp("us", tz="UTC")),
            arrow_values.array([i / 4 for i in ids], pa.float64()),
            arrow_values.array([i % 37 for i in ids], pa.int32())], schema=schema)

    for k in range(10):
        t.append(rows(k))  # 10 rows a commit
    cat.load_table("db.b").append(rows(0))
    check("append 10 rows")
    files = t.scan().plan_files()
    assert len(files) > 8 and all(f.lower_bounds for f in files)
    check("plan with statistics")
    assert t.scan().to_arrow().num_rows == 100
    check("scan without filter")
    for text, expected in [("id > 42", 57), ("kind = 'k1'", 25), ("id IN (1, 2, 3, 77)", 4),
                           ("ts >= '2026-01-02T00:00:00+00:00'", 52), ("x < 3.0 AND kind IS NULL", 3),
                           ("kind IS NOT NULL OR id = 0", 76)]:
        got = t.scan(filter=text).to_arrow()
        assert got.num_rows == expected, (text, got.num_rows)
    check("scan with filters")
    result = t.compaction.run(min_age_seconds=0, min_input_files=2)
    assert result.files_after < result.files_before, result
    check("compaction run")
    assert sorted(cat.load_table("db.t").scan().to_arrow().column("id").to_pylist()) == list(range(100))
    check("scan after compaction")
    print("no pandas")
''')


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas is not installed: nothing to import")
def test_common_paths_do_not_import_pandas(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", STEPS, str(tmp_path / "wh")], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0 and "no pandas" in done.stdout, done.stdout + done.stderr[-3000:]


@pytest.mark.parametrize(("values", "arrow_type"), [
    ([1, None, -(2**63), 2**63 - 1], pa.int64()),
    ([0, 255, None], pa.uint8()),
    ([-(2**31), None, 7], pa.int32()),
    ([True, None, False, True, True, False, False, True, True], pa.bool_()),
    ([1.5, None, -0.0, 1e300], pa.float64()),
    ([0.25, None], pa.float32()),
    (["a", None, "héllo", ""], pa.string()),
    (["x", None], pa.large_string()),
    ([b"\x00\xff", None, b""], pa.binary()),
    ([19_000, None, -1], pa.date32()),
    ([1_767_225_600_000_000, None], pa.timestamp("us", tz="UTC")),
    ([5, None], pa.timestamp("us")),
    ([3_600_000_000, None], pa.time64("us")),
    ([[(1, 2), (3, None)], None, []], pa.map_(pa.int32(), pa.int64())),
    ([[(1, b"a")], [], None], pa.map_(pa.int32(), pa.binary())),
    ([{"a": 1, "b": "x"}, None, {"a": None}],
     pa.struct([pa.field("a", pa.int32(), nullable=False), ("b", pa.string())])),
    ([[{"n": True, "lo": b"1"}], [], None], pa.list_(pa.struct([("n", pa.bool_()), ("lo", pa.binary())]))),
    ([None, None], pa.null()),
    ([], pa.int64()),
    ([1.5, "not a number"], pa.float64()),  # not built here: pa.array raises its own error
    ([decimal.Decimal("1.25"), None], pa.decimal128(5, 2)),  # built by pa.array
])
def test_arrow_values_build_what_pa_array_builds(values: list, arrow_type: pa.DataType) -> None:
    try:
        expected = pa.array(values, arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as error:
        with pytest.raises(type(error)):
            arrow_values.array(values, arrow_type)
        return
    got = arrow_values.array(values, arrow_type)
    got.validate(full=True)
    assert got.type == expected.type and got.to_pylist() == expected.to_pylist()
    assert got.equals(expected) or arrow_type == pa.float64()  # NaN-free floats compare equal too
    if values:
        assert arrow_values.scalar(values[0], arrow_type) == expected[0]


def test_arrow_values_table_and_empty_table() -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("m", pa.map_(pa.int32(), pa.binary()))],
                       metadata={"k": "v"})
    columns = {"id": [1, 2], "m": [[(1, b"x")], None]}
    assert arrow_values.table(columns, schema).equals(pa.Table.from_pydict(columns, schema=schema))
    empty = arrow_values.empty_table(schema)
    assert empty.schema.equals(schema, check_metadata=True) and empty.equals(schema.empty_table())
