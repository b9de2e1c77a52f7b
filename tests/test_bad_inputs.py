"""A catalogue of bad inputs: each raises a specific LakefmtError subclass, and nothing is written.

Inputs come in six groups: filters, names, schemas, data, options and files on storage. For
every case the warehouse's files (paths, sizes, modification times) and the catalog's state
(tables, namespaces, current metadata locations, commit log length) are recorded right before
the bad call and compared right after it.

Cases that change no state share one warehouse; cases that damage files on storage get a
fresh one each.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt import errors, manifest_cache
from lakefmt.errors import LakefmtError
from tests.conftest import downlinks

CATALOG_FILE = "catalog.duckdb"


@dataclass
class Warehouse:
    root: Path
    catalog: lakefmt.Catalog

    def table(self, name: str = "ns.t") -> Any:
        return self.catalog.load_table(name)

    def table_path(self, relative: str, name: str = "ns.t") -> Path:
        return Path(self.table(name).location.removeprefix("file://")) / relative


def storage_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under the warehouse but the catalog's own: path -> (size, mtime).

    The catalog file, its lock and DuckDB's WAL change with every session (write leases are
    rows there); the catalog's state is compared through its API instead.
    """
    state = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.startswith(CATALOG_FILE):
                path = Path(folder) / name
                st = path.stat()
                state[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return state


def catalog_state(catalog: lakefmt.Catalog) -> tuple[Any, ...]:
    tables = catalog.list_tables()
    return (tuple(catalog.list_namespaces()), tuple(tables),
            tuple(catalog.current_metadata_location(t) for t in tables), len(catalog.commit_log()))


def assert_raises_and_writes_nothing(wh: Warehouse, call: Callable[[Warehouse], Any],
                                     error: type[LakefmtError], match: str | None,
                                     *, catalog_readable: bool = True) -> None:
    assert error is not LakefmtError and issubclass(error, LakefmtError)
    files_before = storage_state(wh.root)
    catalog_before = catalog_state(wh.catalog) if catalog_readable else None
    with pytest.raises(error, match=match):
        call(wh)
    assert storage_state(wh.root) == files_before, "the bad call changed files on storage"
    if catalog_readable:
        assert catalog_state(wh.catalog) == catalog_before, "the bad call changed the catalog"


def case(call: Callable[[Warehouse], Any], error: type[LakefmtError], match: str | None = None,
         *, id: str) -> Any:
    return pytest.param(call, error, match, id=id)


# -- the shared warehouse --------------------------------------------------------------------------

REQ_SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("d", pa.date32()),
    pa.field("ts", pa.timestamp("us")),
    pa.field("tz", pa.timestamp("us", tz="UTC")),
])


def build_warehouse(root: Path) -> Warehouse:
    catalog = lakefmt.Catalog(str(root), create=True)
    table = catalog.create_table("ns.t", downlinks(1).schema, partition_by=["mission_id"])
    table.append(downlinks(40, seed=1))
    table.append(downlinks(40, seed=2))
    req = catalog.create_table("ns.req", REQ_SCHEMA)
    req.append(pa.table({"id": pa.array([1, 2], pa.int64()), "d": pa.array([0, 1], pa.date32()),
                         "ts": pa.array([0, 1], pa.timestamp("us")),
                         "tz": pa.array([0, 1], pa.timestamp("us", tz="UTC"))}, schema=REQ_SCHEMA))
    return Warehouse(root, catalog)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    return build_warehouse(tmp_path_factory.mktemp("bad-inputs") / "warehouse")


@pytest.fixture
def fresh(tmp_path: Path) -> Warehouse:
    return build_warehouse(tmp_path / "warehouse")


def scan(text: Any) -> Callable[[Warehouse], Any]:
    return lambda wh: wh.table().scan(text).to_arrow()


def delete(text: Any) -> Callable[[Warehouse], Any]:
    return lambda wh: wh.table().delete(text)


# -- filters -----------------------------------------------------------------------------------------

F, U = errors.FilterError, errors.UnknownColumnError
FILTERS = [
    case(scan("nope = 1"), U, "unknown column 'nope'", id="unknown-column"),
    case(scan('"Payload_Id" = 1'), U, "unknown column", id="column-case-differs"),
    case(scan("välue = 1"), U, "unknown column", id="unicode-column"),
    case(scan("NaN = 1"), U, "unknown column 'NaN'", id="nan-is-a-column-name"),
    case(scan("payload_id = 'abc'"), F, "type mismatch", id="string-for-long"),
    case(scan("sensor_kind = 5"), F, "type mismatch", id="int-for-string"),
    case(scan("value = 'x'"), F, "type mismatch", id="string-for-double"),
    case(scan("ts < 5"), F, "type mismatch", id="int-for-timestamptz"),
    case(scan("ts < '2026-13-01'"), F, "not an ISO", id="bad-iso-timestamp"),
    case(scan("ts = TIMESTAMP 'yesterday'"), F, "invalid TIMESTAMP literal", id="bad-timestamp-literal"),
    case(scan("mission_id = 3000000000"), F, "out of range for column 'mission_id'", id="int-out-of-range"),
    case(scan("payload_id = 9223372036854775808"), F, "out of range", id="long-out-of-range"),
    case(scan("payload_id = 1.5"), F, "not an integral value", id="fraction-for-long"),
    case(scan("payload_id IN (1, 'a')"), F, "type mismatch", id="mixed-in-list"),
    case(scan("payload_id LIKE 'a%'"), F, "applies to string and binary", id="like-on-long"),
    case(scan("isnan(payload_id)"), F, "applies to float and double", id="isnan-on-long"),
    case(scan("sensor_kind = 'abc"), F, "unterminated string", id="unterminated-string"),
    case(scan('"sensor_kind = 1'), F, "unterminated string", id="unterminated-identifier"),
    case(scan("(" * 330 + "payload_id = 1" + ")" * 330), F, "more than 100 levels", id="330-parentheses"),
    case(scan("NOT " * 1000 + "payload_id = 1"), F, "more than 100 levels", id="1000-nots"),
    case(scan("payload_id = " + "9" * 4301), F, r"\(4301 digits\) is out of range", id="4301-digit-integer"),
    case(scan("payload_id ? 1"), F, "unexpected character '\\?'", id="unknown-operator"),
    case(scan("payload_id === 1"), F, "expected a column or a literal", id="triple-equals"),
    case(scan("payload_id =< 1"), F, "expected a column or a literal", id="reversed-operator"),
    case(scan("payload_id ="), F, "expected a column or a literal", id="missing-literal"),
    case(scan(""), F, "empty filter", id="empty"),
    case(scan("   \n\t "), F, "empty filter", id="whitespace"),
    case(scan("AND"), F, "expected a column or a literal", id="bare-and"),
    case(scan("payload_id = 1 AND"), F, "expected a column or a literal", id="dangling-and"),
    case(scan("payload_id = 1 OR OR payload_id = 2"), F, "expected a column or a literal", id="double-or"),
    case(scan("payload_id = NULL"), F, "NULL is only allowed", id="equals-null"),
    case(scan("payload_id IS 1"), F, "expected NULL", id="is-one"),
    case(scan("payload_id IN ()"), F, "expected a column or a literal", id="empty-in"),
    case(scan("mission_id IN (1, 2"), F, "expected '\\)'", id="unclosed-in"),
    case(scan("sensor_kind LIKE '%x'"), F, "only prefix patterns", id="suffix-like"),
    case(scan("payload_id = payload_id"), F, "comparing two columns", id="two-columns"),
    case(scan("1 = 1"), F, "needs a column", id="two-literals"),
    case(scan("payload_id BETWEEN 1"), F, "expected AND in BETWEEN", id="half-between"),
    case(scan("payload_id = 1; DROP TABLE x"), F, "unexpected character ';'", id="sql-injection"),
    case(scan("payload_id = 1 -- comment"), F, "expected AND, OR or end of filter", id="sql-comment"),
    case(scan("payload_id = 1\x00"), F, "unexpected character", id="nul-byte"),
    case(scan("payload_id = 1)"), F, "expected AND, OR or end of filter", id="extra-parenthesis"),
    case(scan("((payload_id = 1)"), F, "expected '\\)'", id="missing-parenthesis"),
    case(scan("starts_with(sensor_kind, 1)"), F, "expected a string prefix", id="starts-with-int"),
    case(scan(b"payload_id = 1"), F, "expected a filter expression", id="bytes-filter"),
    case(scan(5), F, "expected a filter expression", id="int-filter"),
    case(scan(["payload_id = 1"]), F, "expected a filter expression", id="list-filter"),
    case(delete("nope = 1"), U, "unknown column", id="delete-unknown-column"),
    case(delete("payload_id = 'x'"), F, "type mismatch", id="delete-type-mismatch"),
    case(delete("(" * 330 + "payload_id = 1" + ")" * 330), F, "more than 100 levels", id="delete-deep"),
    case(delete(""), F, "empty filter", id="delete-empty-filter"),
    case(lambda wh: wh.table().overwrite(downlinks(3), "nope = 1"), U, "unknown column", id="overwrite-unknown"),
    case(lambda wh: wh.table().compaction.run("binpack", filter="payload_id = 'x'"), F, "type mismatch",
         id="compaction-filter-mismatch"),
]


# -- names ---------------------------------------------------------------------------------------------

N = errors.InvalidNameError
SMALL = pa.schema([pa.field("a", pa.int64())])


def create(name: Any) -> Callable[[Warehouse], Any]:
    return lambda wh: wh.catalog.create_table(name, SMALL)


NAMES = [case(create(name), N, id=f"create-{label}") for label, name in [
    ("trailing-newline", "ns.t\n"), ("newline-new-table", "ns.fresh\n"), ("dot-dot-slash", "../../etc"),
    ("dot-dot-slash-dotted", "../../etc.passwd"), ("sql", "a; DROP TABLE x"), ("ns-sql", "ns.a; DROP TABLE x"),
    ("unicode-letter", "ns.tä"), ("cjk", "ns.日本"), ("zero-width-space", "ns.t\u200b"), ("ligature", "ns.ﬁ"),
    ("empty", ""), ("empty-table", "ns."), ("empty-namespace", ".t"), ("129-chars", "ns." + "a" * 129),
    ("129-char-namespace", "a" * 129 + ".t"), ("digits", "123"), ("none", None), ("int", 123), ("float", 1.5),
    ("bytes", b"ns.t"), ("dict", {"ns": "t"}), ("one-part", ("ns",)), ("three-parts", ("ns", "t", "x")),
    ("three-dotted", "ns.t.x"), ("slash", "ns/t"), ("trailing-space", "ns.t "), ("leading-space", " ns.t"),
    ("nul", "ns.t\x00"), ("tab", "ns.\tt"), ("carriage-return", "ns.t\r"), ("leading-digit", "ns.1t"),
    ("dash", "ns.t-1"), ("dollar", "ns.t$"), ("none-part", ["ns", None]), ("int-part", ("ns", 1)),
]] + [
    case(lambda wh: wh.catalog.load_table("ns.t\n"), N, id="load-trailing-newline"),
    case(lambda wh: wh.catalog.load_table(None), N, id="load-none"),
    case(lambda wh: wh.catalog.load_table(123), N, id="load-int"),
    case(lambda wh: wh.catalog.rename_table("ns.t", "ns.t\n"), N, id="rename-to-newline"),
    case(lambda wh: wh.catalog.rename_table("ns.t", "../x.y"), N, id="rename-to-path"),
    case(lambda wh: wh.catalog.drop_table("ns.t\n"), N, id="drop-trailing-newline"),
    case(lambda wh: wh.catalog.create_namespace("a b"), N, id="namespace-with-space"),
    case(lambda wh: wh.catalog.create_namespace("ns\n"), N, id="namespace-newline"),
    case(lambda wh: wh.catalog.create_table("ns.t", SMALL), errors.TableExistsError, id="existing-table"),
    case(lambda wh: wh.catalog.create_namespace("ns"), errors.NamespaceExistsError, id="existing-namespace"),
    case(lambda wh: wh.catalog.load_table("ns.nope"), errors.NoSuchTableError, "ns.nope", id="missing-table"),
    case(lambda wh: wh.catalog.drop_namespace("ns"), errors.ValidationError, "not empty", id="drop-nonempty-ns"),
]


# -- schemas ---------------------------------------------------------------------------------------

S, SE = errors.SchemaError, errors.ValidationError


def create_with(schema: Any, **kwargs: Any) -> Callable[[Warehouse], Any]:
    return lambda wh: wh.catalog.create_table("ns.fresh", schema, **kwargs)


def one(dtype: pa.DataType, name: str = "a") -> pa.Schema:
    return pa.schema([pa.field(name, dtype)])


def evolve(change: Callable[[Any], Any]) -> Callable[[Warehouse], Any]:
    return lambda wh: change(wh.table().update_schema()).commit()


SCHEMAS = [
    case(create_with(one(pa.list_(pa.int64()))), S, "not supported", id="list"),
    case(create_with(one(pa.struct([("x", pa.int64())]))), S, "not supported", id="struct"),
    case(create_with(one(pa.map_(pa.string(), pa.int64()))), S, "not supported", id="map"),
    case(create_with(one(pa.uint64())), S, "not supported", id="uint64"),
    case(create_with(one(pa.duration("us"))), S, "not supported", id="duration"),
    case(create_with(one(pa.null())), S, "not supported", id="null-type"),
    case(create_with(pa.schema([pa.field("a", pa.int64()), pa.field("a", pa.string())])), S, "duplicate column",
         id="duplicate-names"),
    case(create_with(pa.schema([])), S, "at least one column", id="no-columns"),
    case(create_with(one(pa.int64(), "a.b")), S, "invalid column name", id="dotted-column"),
    case(create_with(one(pa.int64(), "")), S, "invalid column name", id="empty-column-name"),
    case(create_with(one(pa.int64(), "x" * 300)), S, "invalid column name", id="300-char-column"),
    case(create_with({"a": "long"}), S, "must be a pyarrow.Schema", id="dict-schema"),
    case(create_with("a long"), S, "must be a pyarrow.Schema", id="string-schema"),
    case(create_with(None), S, "must be a pyarrow.Schema", id="none-schema"),
    case(create_with(SMALL, partition_by=["nope"]), errors.UnknownColumnError, id="partition-unknown-column"),
    case(create_with(SMALL, partition_by=["bucket(0, a)"]), SE, "between 1 and", id="bucket-zero"),
    case(create_with(SMALL, partition_by="a"), SE, "lists of strings", id="partition-by-string"),
    case(create_with(SMALL, partition_by=["day(a)"]), S, "cannot be applied", id="day-of-long"),
    case(create_with(SMALL, sort_by=["nope"]), errors.UnknownColumnError, id="sort-unknown-column"),
    case(evolve(lambda u: u.add_column("payload_id", "long")), S, "already exists", id="add-existing-column"),
    case(evolve(lambda u: u.add_column("x", "uuid")), S, "unknown type 'uuid'", id="add-unknown-type"),
    case(evolve(lambda u: u.add_column("a.b", "long")), S, "invalid column name", id="add-dotted-column"),
    case(evolve(lambda u: u.widen_column("payload_id", "int")), S, "cannot change column", id="narrow-column"),
    case(evolve(lambda u: u.drop_column("mission_id")), S, "partition field", id="drop-partition-source"),
    case(evolve(lambda u: u.rename_column("value", "payload_id")), S, "a column of that name exists",
         id="rename-onto-existing"),
    case(evolve(lambda u: u.drop_column("nope")), errors.UnknownColumnError, id="drop-unknown-column"),
    case(evolve(lambda u: u.make_optional("nope")), errors.UnknownColumnError, id="optional-unknown-column"),
]


# -- data ------------------------------------------------------------------------------------------

M, R = errors.SchemaMismatchError, errors.ValueOutOfRangeError
ROWS = downlinks(5, seed=9)


def append(data: Any, name: str = "ns.t") -> Callable[[Warehouse], Any]:
    return lambda wh: wh.table(name).append(data)


def with_column(name: str, values: pa.Array) -> pa.Table:
    return ROWS.set_column(ROWS.schema.get_field_index(name), name, values)


def req_rows(**columns: pa.Array) -> pa.Table:
    return pa.table({"id": pa.array([1] * len(next(iter(columns.values()))), pa.int64()), **columns})


DATA = [
    case(append(with_column("payload_id", pa.array(["a"] * 5))), M, "payload_id", id="string-for-long"),
    case(append(with_column("payload_id", pa.array([1.5] * 5))), M, "payload_id", id="double-for-long"),
    case(append(with_column("mission_id", pa.array(["1"] * 5))), M, "mission_id", id="string-for-int"),
    case(append(with_column("mission_id", pa.array([2**40] * 5, pa.int64()))), M, "mission_id", id="long-for-int"),
    case(append(with_column("sensor_kind", pa.array([b"x"] * 5))), M, "sensor_kind", id="binary-for-string"),
    case(append(with_column("value", pa.array([True] * 5))), M, "value", id="bool-for-double"),
    case(append(with_column("ts", pa.array([0] * 5, pa.timestamp("us")))), M, "ts", id="naive-for-timestamptz"),
    case(append(ROWS.append_column("extra", pa.array([1] * 5))), M, "extra", id="extra-column"),
    case(append(pa.Table.from_arrays([ROWS.column(0), ROWS.column(0)], names=["ts", "ts"])), M, "duplicate",
         id="duplicate-columns"),
    case(append([1, 2, 3]), M, "cannot write list", id="list-data"),
    case(append(None), M, "cannot write NoneType", id="none-data"),
    case(append({"payload_id": [1]}), M, "cannot write dict", id="dict-data"),
    case(append("payload_id=1"), M, "cannot write str", id="string-data"),
    case(append(req_rows(d=pa.array([1], pa.date32())).drop_columns(["id"]), "ns.req"), M, "required column",
         id="missing-required-column"),
    case(append(pa.table({"id": pa.array([1, None], pa.int64())}), "ns.req"), M, "null", id="null-in-required"),
    case(append(req_rows(d=pa.array([2**31 - 1], pa.date32())), "ns.req"), R, "'d'", id="date32-max"),
    case(append(req_rows(d=pa.array([-2**31], pa.date32())), "ns.req"), R, "'d'", id="date32-min"),
    case(append(req_rows(ts=pa.array([2**63 - 1], pa.timestamp("us"))), "ns.req"), R, "'ts'", id="timestamp-max"),
    case(append(req_rows(ts=pa.array([-2**63 + 1], pa.timestamp("us"))), "ns.req"), R, "'ts'", id="timestamp-min"),
    case(append(req_rows(tz=pa.array([2**63 - 1], pa.timestamp("us", tz="UTC"))), "ns.req"), R, "'tz'",
         id="timestamptz-max"),
    case(lambda wh: wh.table().overwrite(downlinks(3, seed=4), "payload_id = 100"), SE, "do not match",
         id="overwrite-rows-outside-filter"),
    case(lambda wh: wh.table().overwrite(with_column("payload_id", pa.array(["a"] * 5))), M, "payload_id",
         id="overwrite-wrong-type"),
]


# -- options ---------------------------------------------------------------------------------------

def prop(name: str, value: Any) -> Callable[[Warehouse], Any]:
    return lambda wh: wh.table().set_property(name, value)


def maint(method: str, **kwargs: Any) -> Callable[[Warehouse], Any]:
    return lambda wh: getattr(wh.table().maintenance, method)(**kwargs)


TARGET, LEASE = "write.target-file-size-bytes", "write.lease-seconds"
OPTIONS = [
    case(prop(TARGET, 0), SE, ">= 1", id="target-size-0"),
    case(prop(TARGET, -1), SE, ">= 1", id="target-size-negative"),
    case(prop(TARGET, "abc"), SE, "must be a number", id="target-size-text"),
    case(prop(TARGET, "nan"), SE, "must be a number", id="target-size-nan"),
    case(prop(TARGET, "inf"), SE, "must be an integer", id="target-size-inf"),
    case(prop(TARGET, 1.5), SE, "must be an integer", id="target-size-fraction"),
    case(prop(LEASE, -5), SE, ">= 1", id="lease-negative"),
    case(prop(LEASE, 0), SE, ">= 1", id="lease-zero"),
    case(prop("write.parquet.compression-level", 23), SE, "<= 22", id="compression-level-23"),
    case(prop("commit.retry.num-retries", 1001), SE, "<= 1000", id="retries-1001"),
    case(prop("write.parquet.min-compression-saving", 2), SE, "<= 1", id="compression-saving-2"),
    case(prop("write.parquet.row-group-rows", 0), SE, ">= 1", id="row-group-rows-0"),
    case(lambda wh: wh.table().set_properties(**{TARGET: 0}), SE, ">= 1", id="set-properties-target-0"),
    case(create_with(SMALL, properties={TARGET: "0"}), SE, ">= 1", id="create-target-size-0"),
    case(create_with(SMALL, properties={LEASE: "-5"}), SE, ">= 1", id="create-lease-negative"),
    case(maint("remove_orphan_files", older_than=5), SE, "timedelta", id="orphans-older-than-int"),
    case(maint("remove_orphan_files", older_than="3d"), SE, "timedelta", id="orphans-older-than-text"),
    case(maint("remove_orphan_files", older_than=dt.timedelta(days=-1)), SE, "negative",
         id="orphans-older-than-negative"),
    case(maint("remove_orphan_files", dry_run="no"), SE, "dry_run must be a bool", id="orphans-dry-run-text"),
    case(maint("expire_snapshots", older_than=5), SE, "timedelta", id="expire-older-than-int"),
    case(maint("expire_snapshots", retain_last=0), SE, "at least 1", id="expire-retain-0"),
    case(maint("expire_snapshots", retain_last=-1), SE, "at least 1", id="expire-retain-negative"),
    case(maint("expire_snapshots", snapshot_ids=[123]), errors.NoSuchSnapshotError, "no snapshot 123",
         id="expire-unknown-snapshot"),
    case(lambda wh: wh.table().maintenance.expire_snapshots(
        snapshot_ids=[wh.table().current_snapshot().snapshot_id]), SE, "is current", id="expire-current"),
    case(lambda wh: wh.table().compaction.run("quick"), SE, "unknown compaction strategy", id="strategy-unknown"),
    case(lambda wh: wh.table().compaction.plan("quick"), SE, "unknown compaction strategy",
         id="plan-strategy-unknown"),
    case(lambda wh: wh.table().compaction.run("sort"), SE, "needs sort_by", id="sort-without-columns"),
    case(lambda wh: wh.table().compaction.run("sort", sort_by=["nope"]), errors.UnknownColumnError,
         id="sort-unknown-column"),
    case(lambda wh: wh.table().compaction.run("binpack", target_file_size=0), SE, ">= 1",
         id="compaction-target-size-0"),
    case(lambda wh: wh.table().compaction.run("binpack", bogus_option=1), SE, "bogus_option",
         id="compaction-unknown-option"),
    case(lambda wh: wh.table().scan(columns=["nope"]).to_arrow(), errors.UnknownColumnError,
         id="scan-unknown-column"),
    case(lambda wh: wh.table().scan(snapshot_id=123).to_arrow(), errors.NoSuchSnapshotError,
         id="scan-unknown-snapshot"),
    case(lambda wh: wh.table().scan(as_of=dt.datetime(2000, 1, 1)).to_arrow(), errors.NoSuchSnapshotError,
         "2000-01-01T00:00:00", id="scan-before-first-snapshot"),
    case(lambda wh: wh.table().rollback_to(123), errors.NoSuchSnapshotError, id="rollback-unknown-snapshot"),
    case(lambda wh: wh.table().delete(None), SE, "needs a filter", id="delete-without-filter"),
    case(lambda wh: wh.table().write_data_files(ROWS, target_file_size=0), SE, ">= 1", id="write-target-size-0"),
    case(lambda wh: lakefmt.Catalog(str(wh.root), catalog_path=str(wh.root)), errors.InvalidCatalogPathError,
         "is a folder", id="catalog-path-is-folder"),
    case(lambda wh: lakefmt.Catalog(str(wh.root / "nope"), create=False), errors.NoSuchWarehouseError,
         id="warehouse-missing"),
    case(lambda wh: lakefmt.Catalog("s3://bucket/x"), errors.InvalidCatalogPathError, "needs catalog_path",
         id="s3-without-catalog-path"),
]


def grouped(**groups: list[Any]) -> list[Any]:
    """The cases of every group, their ids prefixed with the group's name."""
    return [pytest.param(*p.values, id=f"{name}-{p.id}") for name, cases in groups.items() for p in cases]


@pytest.mark.parametrize("call, error, match", grouped(filter=FILTERS, name=NAMES, schema=SCHEMAS, data=DATA,
                                                       option=OPTIONS))
def test_bad_input(shared: Warehouse, call: Callable[[Warehouse], Any], error: type[LakefmtError],
                   match: str | None) -> None:
    assert_raises_and_writes_nothing(shared, call, error, match)


# -- files on storage --------------------------------------------------------------------------------

def current_metadata(wh: Warehouse) -> Path:
    return Path(wh.catalog.current_metadata_location("ns.t").removeprefix("file://"))


def manifest_list(wh: Warehouse) -> Path:
    return wh.table_path(wh.table().current_snapshot().manifest_list)


def a_manifest(wh: Warehouse) -> Path:
    return next(p for p in manifest_list(wh).parent.glob("m-*.manifest.parquet"))


def a_data_file(wh: Warehouse) -> Path:
    return wh.table_path(wh.table().plan_files()[0].path)


def overwrite(path_of: Callable[[Warehouse], Path], content: Callable[[bytes], bytes]) -> Callable[[Warehouse], None]:
    def damage(wh: Warehouse) -> None:
        path = path_of(wh)
        path.write_bytes(content(path.read_bytes()))
    return damage


def remove(path_of: Callable[[Warehouse], Path]) -> Callable[[Warehouse], None]:
    return lambda wh: path_of(wh).unlink()


def foreign_parquet(rows: int | None = None) -> Callable[[Warehouse], None]:
    """Replace a data file by a Parquet file another writer made (no field ids)."""
    def damage(wh: Warehouse) -> None:
        path = a_data_file(wh)
        count = rows if rows is not None else pq.ParquetFile(path).metadata.num_rows
        pq.write_table(pa.table({"x": pa.array(range(count), pa.int64())}), path)
    return damage


def same_columns_other_rows(wh: Warehouse) -> None:
    """Replace a data file by one with the table's field ids but other rows (another snapshot's file)."""
    path = a_data_file(wh)
    original = pq.read_table(path)
    pq.write_table(original.slice(0, max(1, original.num_rows // 2)), path)


def metadata_json(edit: Callable[[dict[str, Any]], Any]) -> Callable[[bytes], bytes]:
    def content(raw: bytes) -> bytes:
        doc = json.loads(raw)
        edited = edit(doc)
        return json.dumps(doc if edited is None else edited).encode()
    return content


def read_table(wh: Warehouse) -> Any:
    manifest_cache.clear()  # what a fresh process would see: nothing cached
    return wh.catalog.load_table("ns.t").scan().to_arrow()


def append_rows(wh: Warehouse) -> Any:
    manifest_cache.clear()
    return wh.catalog.load_table("ns.t").append(downlinks(5, seed=3))


def delete_rows(wh: Warehouse) -> Any:
    manifest_cache.clear()
    return wh.catalog.load_table("ns.t").delete("payload_id = 1")


C, D = errors.CorruptMetadataError, errors.CorruptDataFileError
STORAGE = [
    pytest.param(overwrite(current_metadata, lambda raw: b"\x00garbage{"), read_table, C, id="metadata-garbage"),
    pytest.param(overwrite(current_metadata, lambda raw: raw[: len(raw) // 2]), read_table, C,
                 id="metadata-truncated"),
    pytest.param(overwrite(current_metadata, lambda raw: b""), read_table, C, id="metadata-empty"),
    pytest.param(overwrite(current_metadata, lambda raw: b"[]"), read_table, C, id="metadata-json-array"),
    pytest.param(overwrite(current_metadata, metadata_json(lambda doc: {})), read_table, C,
                 id="metadata-empty-object"),
    pytest.param(overwrite(current_metadata, metadata_json(lambda doc: doc.pop("schemas"))), read_table, C,
                 id="metadata-without-schemas"),
    pytest.param(overwrite(current_metadata, metadata_json(lambda doc: doc.update({"format-version": 99}))),
                 read_table, C, id="metadata-format-version-99"),
    pytest.param(remove(current_metadata), read_table, C, id="metadata-deleted"),
    pytest.param(overwrite(manifest_list, lambda raw: raw[: len(raw) // 2]), read_table, C,
                 id="manifest-list-truncated"),
    pytest.param(overwrite(manifest_list, lambda raw: b"PAR1garbage"), read_table, C, id="manifest-list-garbage"),
    pytest.param(remove(manifest_list), read_table, errors.MissingFileError, id="manifest-list-deleted"),
    pytest.param(overwrite(a_manifest, lambda raw: raw[: len(raw) // 2]), read_table, C, id="manifest-truncated"),
    pytest.param(overwrite(a_manifest, lambda raw: b""), read_table, C, id="manifest-empty"),
    pytest.param(remove(a_manifest), read_table, errors.MissingFileError, id="manifest-deleted"),
    pytest.param(overwrite(a_manifest, lambda raw: raw[: len(raw) // 2]), delete_rows, C,
                 id="delete-over-truncated-manifest"),
    pytest.param(overwrite(manifest_list, lambda raw: raw[: len(raw) // 2]), append_rows, C,
                 id="append-onto-truncated-manifest-list"),
    pytest.param(foreign_parquet(), read_table, D, id="data-foreign-parquet"),
    pytest.param(foreign_parquet(rows=3), read_table, D, id="data-foreign-parquet-other-rows"),
    pytest.param(same_columns_other_rows, read_table, D, id="data-other-rows"),
    pytest.param(overwrite(a_data_file, lambda raw: raw[: len(raw) // 2]), read_table, D, id="data-truncated"),
    pytest.param(overwrite(a_data_file, lambda raw: b"not parquet at all"), read_table, D, id="data-garbage"),
    pytest.param(remove(a_data_file), read_table, D, id="data-deleted"),
    pytest.param(foreign_parquet(), lambda wh: wh.table().delete("payload_id = 1"), D,
                 id="delete-over-foreign-parquet"),
]


@pytest.mark.parametrize("damage, call, error", STORAGE)
def test_damaged_files_on_storage(fresh: Warehouse, damage: Callable[[Warehouse], None],
                                  call: Callable[[Warehouse], Any], error: type[LakefmtError]) -> None:
    damage(fresh)
    assert_raises_and_writes_nothing(fresh, call, error, None)


def catalog_file(wh: Warehouse) -> Path:
    return wh.root / CATALOG_FILE


@pytest.mark.parametrize("damage, error", [
    pytest.param(lambda p: p.write_bytes(b"garbage" * 100), errors.CorruptCatalogError, id="catalog-garbage"),
    pytest.param(lambda p: p.write_bytes(b""), errors.CorruptCatalogError, id="catalog-empty"),
    pytest.param(lambda p: p.write_bytes(p.read_bytes()[:4096]), errors.CorruptCatalogError, id="catalog-truncated"),
    pytest.param(lambda p: p.unlink(), errors.CatalogMissingError, id="catalog-deleted"),
])
def test_damaged_catalog_file(fresh: Warehouse, damage: Callable[[Path], None], error: type[LakefmtError]) -> None:
    path = catalog_file(fresh)
    damage(path)
    damaged = path.read_bytes() if path.exists() else None
    assert_raises_and_writes_nothing(fresh, lambda wh: lakefmt.Catalog(str(wh.root)).list_tables(), error, None,
                                     catalog_readable=False)
    assert (path.read_bytes() if path.exists() else None) == damaged  # neither repaired nor recreated
