"""Bad data on write and foreign data files on read (TYPE-10, WRITE-8, READ-12).

Every refusal is checked for its error type, a stable part of its message, and that
nothing was written: the files under the table location and the current snapshot are
unchanged.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt.errors import (
    CorruptDataFileError,
    CorruptMetadataError,
    SchemaMismatchError,
    ValueOutOfRangeError,
)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def catalog(tmp_path: Path) -> lakefmt.Catalog:
    """A new warehouse in a local folder."""
    return lakefmt.Catalog(str(tmp_path / "warehouse"), create=True)


def _files(table: lakefmt.Table) -> set[str]:
    return {os.path.join(root, name) for root, _, names in os.walk(table.location) for name in names}


def _state(table: lakefmt.Table) -> tuple[set[str], int | None]:
    fresh = table.refresh()
    return _files(fresh), fresh.metadata.current_snapshot_id


def _decimal_beyond_precision() -> pa.Array:
    """A decimal(4,2) array holding 123.45, which Arrow lets through when built from buffers."""
    wide = pa.array([Decimal("1.00"), Decimal("123.45")], pa.decimal128(5, 2))
    return pa.Array.from_buffers(pa.decimal128(4, 2), 2, wide.buffers())


# -- TYPE-10: values out of range --------------------------------------------------------------------

OUT_OF_RANGE = [  # (id, column array, partition_by, text expected in the message)
    ("date-max-int32", pa.array([0, 2**31 - 1], pa.date32()), [], "5881580-07-11"),
    ("date-min-int32", pa.array([-(2**31)], pa.date32()), [], "-2147483648 days"),
    ("date-year-10000", pa.array([2_932_897], pa.date32()), ["day(d)"], "10000-01-01"),
    ("date-year-0", pa.array([-719_163], pa.date32()), ["year(d)"], "0000-12-31"),
    ("date64-far", pa.array([2**30 * 86_400_000], pa.date64()), [], "1073741824 days"),
    ("timestamp-max-int64", pa.array([2**63 - 1], pa.timestamp("us")), [], "9223372036854775807 us"),
    ("timestamp-min-int64", pa.array([-(2**63)], pa.timestamp("us")), ["day(d)"], "-9223372036854775808 us"),
    ("timestamp-ms-far", pa.array([300_000_000_000_000], pa.timestamp("ms")), [], "300000000000000000 us"),
    ("timestamptz-max-int64", pa.array([2**63 - 1], pa.timestamp("us", tz="UTC")), ["hour(d)"],
     "294247-01-10T04:00:54.775807+00:00"),
    ("timestamptz-other-zone", pa.array([253_402_300_800_000_000], pa.timestamp("us", tz="Asia/Tokyo")),
     ["month(d)"], "10000-01-01T00:00:00+00:00"),
    ("time-past-midnight", pa.array([86_400_000_000], pa.time64("us")), [], "24:00:00"),
    ("time-negative", pa.array([-5], pa.time64("us")), ["bucket(4, d)"], "-5 us since midnight"),
    ("time32-seconds", pa.array([100_000], pa.time32("s")), ["d"], "27:46:40"),
    ("decimal-beyond-precision", _decimal_beyond_precision(), [], "123.45"),
]


@pytest.mark.parametrize("column, partition_by, shown", [c[1:] for c in OUT_OF_RANGE],
                         ids=[c[0] for c in OUT_OF_RANGE])
def test_out_of_range_values_are_refused_before_writing(catalog: lakefmt.Catalog, column: pa.Array,
                                                         partition_by: list[str], shown: str) -> None:
    # TYPE-10: the write fails with ValueOutOfRangeError naming column and value; nothing is written.
    data = pa.table({"id": pa.array(range(len(column)), pa.int64()), "d": column})
    t = catalog.create_table("ns.t", data.schema, partition_by=partition_by)
    t.append(data.slice(0, 0))
    before = _state(t)
    with pytest.raises(ValueOutOfRangeError, match="outside the range a table can store") as info:
        t.append(data)
    assert info.value.column == "d"
    assert "column 'd'" in str(info.value) and shown in str(info.value)
    assert isinstance(info.value, SchemaMismatchError)  # TYPE-4 names SchemaMismatchError for this
    with pytest.raises(ValueOutOfRangeError):
        t.overwrite(data)
    assert _state(t) == before


def test_range_limits_round_trip(catalog: lakefmt.Catalog) -> None:
    # TYPE-10: the first and last value of each range are stored, partitioned and read back exactly.
    lo, hi = dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999_999)
    data = pa.table({
        "d": pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31)], pa.date32()),
        "ts": pa.array([lo, hi], pa.timestamp("us")),
        "tz": pa.array([lo.replace(tzinfo=dt.timezone.utc), hi.replace(tzinfo=dt.timezone.utc)],
                       pa.timestamp("us", tz="UTC")),
        "t": pa.array([dt.time(0), dt.time(23, 59, 59, 999_999)], pa.time64("us")),
        "m": pa.array([Decimal("-99.99"), Decimal("99.99")], pa.decimal128(4, 2)),
    })
    t = catalog.create_table("ns.limits", data.schema, partition_by=["day(d)", "hour(ts)", "year(tz)"])
    t.append(data)
    assert t.scan().to_arrow().sort_by("d").to_pylist() == data.to_pylist()
    assert t.scan(filter="d >= DATE '9999-12-31'").to_arrow().column("m").to_pylist() == [Decimal("99.99")]


# -- WRITE-8: missing and extra columns --------------------------------------------------------------

def test_missing_optional_column_is_written_as_nulls(catalog: lakefmt.Catalog) -> None:
    # WRITE-8: an optional column missing from the data reads as nulls.
    t = catalog.create_table("ns.t", pa.schema([("id", pa.int64()), ("note", pa.string())]))
    t.append(pa.table({"id": [1, 2]}))
    assert sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "note": None}, {"id": 2, "note": None}]


def test_missing_required_column_is_refused(catalog: lakefmt.Catalog) -> None:
    # WRITE-8: a required column missing from the data fails the write, with the way out named.
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("note", pa.string())])
    t = catalog.create_table("ns.t", schema)
    before = _state(t)
    with pytest.raises(SchemaMismatchError, match=r"required column\(s\) \['id'\] are missing") as info:
        t.append(pa.table({"note": ["a"]}))
    assert "t.update_schema().make_optional(NAME).commit()" in str(info.value)
    assert _state(t) == before


def test_extra_column_advice_works_when_followed(catalog: lakefmt.Catalog) -> None:
    # WRITE-8: a column the table lacks fails the write; the Python line in the message adds it.
    t = catalog.create_table("ns.t", pa.schema([("id", pa.int64())]))
    data = pa.table({"id": pa.array([1], pa.int64()), "site": ["x"], "depth": pa.array([2.5], pa.float32())})
    before = _state(t)
    with pytest.raises(SchemaMismatchError, match=r"column\(s\) \['site', 'depth'\] that the table does not "
                                                  "have") as info:
        t.append(data)
    message = str(info.value)
    assert "the CLI has no command for this" in message
    assert _state(t) == before
    advice = message.split("in Python: ", 1)[1]
    exec(advice, {"t": t, "pa": pa})  # noqa: S102 - runs the exact line the error tells the user to run
    t.append(data)
    assert t.scan().to_arrow().to_pylist() == [{"id": 1, "site": "x", "depth": 2.5}]


# -- READ-12: data files that are not the table's -----------------------------------------------------

def _table_with_one_file(catalog: lakefmt.Catalog) -> tuple[lakefmt.Table, str]:
    t = catalog.create_table("ns.t", pa.schema([("a", pa.int64()), ("b", pa.string())]))
    t.append(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]}))
    (path,) = [p for p in _files(t) if p.endswith(".parquet") and "/data/" in p]
    return t, path


def _foreign(path: str) -> str:
    pq.write_table(pa.table({"a": [1, 2, 3], "b": ["q", "r", "s"]}), path)  # same names, no field ids
    return "has no column with a field id"


def _fewer_rows(path: str) -> str:
    pq.write_table(pq.read_table(path).slice(0, 2), path)  # keeps the field ids
    return "holds 2 rows but its manifest entry records 3"


def _truncated(path: str) -> str:
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])
    return "is not a readable Parquet file"


def _garbage(path: str) -> str:
    Path(path).write_bytes(b"PAR1" + bytes(range(256)) * 4)
    return "is not a readable Parquet file"


def _empty(path: str) -> str:
    Path(path).write_bytes(b"")
    return "is not a readable Parquet file"


def _duplicate_field_ids(path: str) -> str:
    rows = pq.read_table(path)
    field = rows.schema.field("b")
    rows = rows.append_column(pa.field("c", pa.string(), metadata=field.metadata), rows.column("b"))
    pq.write_table(rows, path)
    return "has two columns with field id 2"


def _wrong_type(path: str) -> str:
    rows = pq.read_table(path)
    field = rows.schema.field("a")
    rows = rows.set_column(0, field.with_type(pa.string()), rows.column("a").cast(pa.string()))
    pq.write_table(rows, path)
    return "which does not widen to long"


@pytest.mark.parametrize("damage", [_foreign, _fewer_rows, _truncated, _garbage, _empty, _duplicate_field_ids,
                                    _wrong_type],
                         ids=lambda f: f.__name__.strip("_"))
def test_foreign_or_damaged_data_file_raises_corrupt_data_file(catalog: lakefmt.Catalog,
                                                                damage: Callable[[str], str]) -> None:
    # READ-10, READ-12: every read path names the file and what is wrong; no wrong rows come back.
    t, path = _table_with_one_file(catalog)
    expected = damage(path)
    for read in (lambda: t.scan().to_arrow(), lambda: t.scan(filter="a > 1").to_arrow(),
                 lambda: list(t.scan().to_batches()), lambda: t.delete("a = 2")):
        with pytest.raises(CorruptDataFileError, match=expected) as info:
            read()
        assert path in str(info.value)
        assert isinstance(info.value, CorruptMetadataError)
        if "readable" in expected:
            assert isinstance(info.value.__cause__, (pa.ArrowInvalid, OSError))


def test_missing_data_file_raises_corrupt_data_file(catalog: lakefmt.Catalog) -> None:
    # READ-10: a referenced data file that is gone fails the read, cause chained.
    t, path = _table_with_one_file(catalog)
    os.remove(path)
    with pytest.raises(CorruptDataFileError, match="referenced by the table but missing") as info:
        t.scan().to_arrow()
    assert isinstance(info.value.__cause__, FileNotFoundError)


# -- pandas is an extra -------------------------------------------------------------------------------

def test_to_pandas_without_pandas_names_the_extra(tmp_path: Path) -> None:
    # `import lakefmt` never imports pandas; to_pandas() without it says which extra to install.
    script = textwrap.dedent(f"""
        import sys

        class NoPandas:  # as if pandas were not installed
            def find_spec(self, name, path=None, target=None):
                if name == "pandas" or name.startswith("pandas."):
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

        sys.meta_path.insert(0, NoPandas())
        import pyarrow as pa
        import lakefmt
        cat = lakefmt.Catalog({str(tmp_path / "wh")!r}, create=True)
        t = cat.create_table("ns.t", pa.schema([("id", pa.int64())]))
        t.append(pa.table({{"id": [1, 2]}}))
        try:
            t.scan().to_pandas()
        except lakefmt.MissingDependencyError as exc:
            assert isinstance(exc, ImportError) and isinstance(exc, lakefmt.LakefmtError)
            assert exc.__cause__ is not None
            print("ERROR", exc)
        else:
            print("NO ERROR")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "ERROR to_pandas() needs pandas" in done.stdout
    assert "pip install 'lakefmt[pandas]'" in done.stdout


def test_import_lakefmt_does_not_import_pandas() -> None:
    done = subprocess.run([sys.executable, "-c", "import sys, lakefmt; print('pandas' in sys.modules)"],
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
