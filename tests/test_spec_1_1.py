"""Spec 1.1: the gaps an independent implementer met, each decided in spec/ and checked here.

Every test names the requirement it checks. Where the spec states a table of values
(TYPE-1's Arrow types, MAN-11's and WRITE-9's Parquet schemas), the test reads the table
from the spec document itself, so spec and code cannot drift apart.
"""

from __future__ import annotations

import datetime as dt
import decimal
import fcntl
import json
import math
import random
import re
import struct
from dataclasses import replace
from pathlib import Path

import duckdb
import jsonschema
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakefmt
from lakefmt import manifest_cache
from lakefmt.catalog_lock import lock_path
from lakefmt.conversions import float_text
from lakefmt.errors import CatalogLockTimeoutError, FilterError, InvalidCatalogPathError
from lakefmt.expression_parser import parse_filter
from lakefmt.expressions import Not, bind, col
from lakefmt.manifest_io import read_manifest_list
from lakefmt.metadata import TableMetadata
from lakefmt.partitioning import Transform, year_str
from lakefmt.schema import Field, Schema
from lakefmt.types import (
    BINARY,
    DATE,
    DOUBLE,
    FLOAT,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMPTZ,
    parse_type,
)
from lakefmt.types import (
    decimal as decimal_type,
)

SPEC = Path(__file__).resolve().parent.parent / "spec"
UTC = dt.timezone.utc


def spec_text(name: str) -> str:
    return (SPEC / name).read_text(encoding="utf-8")


def values(table: lakefmt.Table, column: str, flt: str | None = None) -> list:
    return sorted(table.scan(flt).to_arrow().column(column).to_pylist(), key=repr)


def manifests_of(table: lakefmt.Table) -> list[str]:
    snap = table.current_snapshot()
    return [f"{table.location}/{m.path}" for m in read_manifest_list(table.io, f"{table.location}/{snap.manifest_list}")]


def data_files(table: lakefmt.Table) -> list[str]:
    return [f"{table.location}/{f.path}" for f in table.plan_files()]


def parquet_schema_tokens(text: str) -> list[str]:
    """A printed Parquet schema as tokens: no ``field_id=-1``, annotations upper-case, ``;`` dropped."""
    text = re.sub(r"^<pyarrow.*>\n", "", text)
    text = re.sub(r"field_id=-1\s*", "", text)
    text = re.sub(r"\((String|Map|List)\)", lambda m: f"({m.group(1).upper()})", text)
    return re.findall(r"[{}()]|[^\s{}();]+", text)


def code_blocks(document: str, rule: str) -> list[str]:
    """The fenced code blocks of the paragraph of ``rule`` (up to the next rule or heading)."""
    start = document.index(f"**{rule}**")
    end = re.search(r"\n(- \*\*[A-Z]+-\d+\*\*|#+ )", document[start + 1:])
    body = document[start:start + 1 + end.start()] if end else document[start:]
    return re.findall(r"```\n(.*?)```", body, re.DOTALL)


# -- gap 1: TYPE-1 / READ-7, readers return string and binary ----------------------------------

def test_type1_arrow_column_is_what_lakefmt_returns():
    """TYPE-1: the spec's *Arrow type* column is exactly the code's mapping, string/binary included."""
    section = spec_text("types.md").split("## Type list", 1)[1].split("**TYPE-2**", 1)[0]
    rows = re.findall(r"^\| `([a-z()P,S]+)` \| [^|]+ \| ([^|]+) \|", section, re.MULTILINE)
    assert len(rows) == 12
    table = {spelling: arrow.strip() for spelling, arrow in rows}
    assert table["string"] == "`string`" and table["binary"] == "`binary`"
    for spelling, arrow in table.items():
        if spelling == "decimal(P,S)":
            assert parse_type("decimal(10,2)").to_arrow() == pa.decimal128(10, 2)
            assert parse_type("decimal(40,2)").to_arrow() == pa.decimal256(40, 2)
            continue
        name = arrow.strip("`")
        expected = pa.timestamp("us", tz="UTC") if name == "timestamp[us, tz=UTC]" else pa.type_for_alias(name)
        assert parse_type(spelling).to_arrow() == expected, spelling


def test_reads_return_string_and_binary_even_from_large_input(local_catalog):
    """TYPE-1, READ-7, MAN-4: large_string/large_binary in, string/binary out, in rows and in manifests."""
    data = pa.table({"s": pa.array(["a", "b", None], pa.large_string()),
                     "b": pa.array([b"x", b"y", b"z"], pa.large_binary()),
                     "n": pa.array([1, 2, 3], pa.int64())})
    table = local_catalog.create_table("ns.types", data.schema, partition_by=["s", "b"])
    table.append(data)
    result = table.scan().to_arrow()
    assert result.schema.field("s").type == pa.string()
    assert result.schema.field("b").type == pa.binary()
    assert sorted(result.column("s").to_pylist(), key=repr) == ["a", "b", None]
    batches = list(table.scan().to_batches())
    assert batches and all(b.schema.field("s").type == pa.string() for b in batches)
    assert all(b.schema.field("b").type == pa.binary() for b in batches)
    (manifest,) = manifests_of(table)
    partition = pq.ParquetFile(manifest).schema_arrow.field("partition").type
    assert partition.field("s").type == pa.string() and partition.field("b").type == pa.binary()


# -- gap 2: READ-5 / ML-3, skipping manifests by their counts -----------------------------------

def test_manifest_list_counts_are_exact_after_appends_and_deletes(local_catalog):
    """ML-3: the counts of every manifest-list row equal the statuses of the manifest's entries."""
    schema = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.int64())])
    table = local_catalog.create_table("ns.counts", schema, partition_by=["k"],
                                       properties={"write.delete.mode": "copy-on-write"})
    for k in range(3):
        table.append(pa.table({"k": [k, k], "v": [1, 2]}, schema=schema))
    table.delete("k = 1")
    table.delete("k = 2 AND v = 1")
    snap = table.current_snapshot()
    for m in read_manifest_list(table.io, f"{table.location}/{snap.manifest_list}"):
        status = pq.read_table(f"{table.location}/{m.path}", columns=["status"]).column("status").to_pylist()
        assert (m.added_files_count, m.existing_files_count, m.deleted_files_count) == (
            status.count(1), status.count(0), status.count(2))
    assert values(table, "k") == [0, 0, 2]


def test_a_manifest_whose_counts_say_no_live_entry_is_not_read(local_catalog):
    """READ-5, ML-3: pass 1 MAY skip a row with added + existing = 0; lakefmt does, without opening it."""
    schema = pa.schema([pa.field("k", pa.int64())])
    table = local_catalog.create_table("ns.skip", schema)
    table.append(pa.table({"k": [1, 2]}, schema=schema))
    snap = table.current_snapshot()
    (real,) = read_manifest_list(table.io, f"{table.location}/{snap.manifest_list}")
    ghost = replace(real, path="metadata/m-missing.manifest.parquet", added_files_count=0, existing_files_count=0,
                    deleted_files_count=1, added_rows_count=0, existing_rows_count=0, deleted_rows_count=5)
    from lakefmt.manifest_io import write_manifest_list
    write_manifest_list(table.io, f"{table.location}/metadata/snap-test.manifest-list.parquet", [ghost, real])
    scan = replace(table.scan(), snapshot=replace(snap, manifest_list="metadata/snap-test.manifest-list.parquet"))
    plan = scan.plan()
    assert (plan.manifests_total, plan.manifests_read) == (2, 1)
    assert sorted(scan.to_arrow().column("k").to_pylist()) == [1, 2]


# -- gap 3: COMMIT-1 / COMMIT-5 / LAYOUT-9 / CAT-15, the base version N --------------------------

def test_the_base_version_is_the_number_in_the_metadata_file_name(local_catalog):
    """COMMIT-1, COMMIT-5, LAYOUT-9, CAT-15: N comes from the name of metadata_location, nowhere else."""
    schema = pa.schema([pa.field("k", pa.int64())])
    table = local_catalog.create_table("ns.src", schema)
    table.append(pa.table({"k": [1]}, schema=schema))
    text = Path(table.metadata_location).read_text()
    assert '"version"' not in text  # the metadata JSON holds no version number
    copy = f"{table.location}/metadata/v000041-{'0' * 8}-aaaa-4aaa-8aaa-{'0' * 12}.metadata.json"
    Path(copy).write_text(text)
    local_catalog.drop_table("ns.src")
    moved = local_catalog.register_table("ns.moved", copy)
    moved.append(pa.table({"k": [2]}, schema=schema))
    name = moved.metadata_location.rsplit("/", 1)[1]
    assert name.startswith("v000042-") and name.endswith(".metadata.json")
    assert local_catalog.commit_log("ns.moved")[0].version == 42
    assert sorted(moved.scan().to_arrow().column("k").to_pylist()) == [1, 2]


# -- gap 4: MAN-11 / WRITE-9, the physical Parquet schema ----------------------------------------

def test_manifest_and_manifest_list_schemas_are_the_ones_the_spec_prints(local_catalog):
    """MAN-11: lakefmt writes exactly the two Parquet schemas printed in manifests.md."""
    schema = pa.schema([pa.field("s", pa.string()), pa.field("n", pa.int64())])
    table = local_catalog.create_table("ns.phys", schema, partition_by=["s"], format_version=2)
    table.append(pa.table({"s": ["a", "b"], "n": [1, 2]}, schema=schema))
    manifest_block, list_block = code_blocks(spec_text("manifests.md"), "MAN-11")
    (manifest,) = manifests_of(table)
    assert parquet_schema_tokens(str(pq.ParquetFile(manifest).schema)) == parquet_schema_tokens(manifest_block)
    snap = table.current_snapshot()
    listed = pq.ParquetFile(f"{table.location}/{snap.manifest_list}").schema
    assert parquet_schema_tokens(str(listed)) == parquet_schema_tokens(list_block)
    assert "field_id=" not in re.sub(r"field_id=-1", "", str(pq.ParquetFile(manifest).schema))  # MAN-2: no ids


def test_data_file_schema_is_the_one_the_spec_prints(local_catalog):
    """WRITE-9: required fields REQUIRED, optional OPTIONAL, field ids, no ARROW:schema."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string()),
                        pa.field("b", pa.binary()), pa.field("f", pa.float64())])
    table = local_catalog.create_table("ns.dataphys", schema)
    table.append(pa.table({"id": [1], "s": ["x"], "b": [b"y"], "f": [1.5]}, schema=schema))
    (block,) = code_blocks(spec_text("commits.md"), "WRITE-9")
    (path,) = data_files(table)
    footer = pq.ParquetFile(path)
    assert parquet_schema_tokens(str(footer.schema)) == parquet_schema_tokens(block)
    assert not footer.metadata.metadata  # no key-value metadata, ARROW:schema included


def test_readers_accept_optional_repetition_for_a_required_column(local_catalog):
    """WRITE-9, MAN-11: a data file whose required column is OPTIONAL reads, with the read schema's nullability."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string())])
    table = local_catalog.create_table("ns.optional", schema)
    table.append(pa.table({"id": [1, 2, 3], "s": ["a", "b", "c"]}, schema=schema))
    (path,) = data_files(table)
    loose = pa.schema([pa.field("id", pa.int64(), metadata={"PARQUET:field_id": "1"}),
                       pa.field("s", pa.string(), metadata={"PARQUET:field_id": "2"})])
    pq.write_table(pa.table({"id": [1, 2, 3], "s": ["a", "b", "c"]}, schema=loose), path)
    assert "optional int64 field_id=1 id" in str(pq.ParquetFile(path).schema)
    result = table.scan().to_arrow()
    assert result.schema.field("id") == pa.field("id", pa.int64(), nullable=False)
    assert sorted(result.column("id").to_pylist()) == [1, 2, 3]


# -- gap 5: CAT-14 / CAT-16 / CAT-17 / CAT-18, the catalog for readers --------------------------

def test_a_read_only_reader_never_takes_the_exclusive_lock(local_catalog):
    """CAT-17, CAT-18: under another process's shared lock a read-only reader reads; a writer waits."""
    schema = pa.schema([pa.field("k", pa.int64())])
    local_catalog.create_table("ns.ro", schema).append(pa.table({"k": [7]}, schema=schema))
    with open(lock_path(local_catalog.catalog_path), "rb") as held:
        fcntl.flock(held, fcntl.LOCK_SH)  # another reader's shared lock, on its own open file
        reader = lakefmt.Catalog(local_catalog.warehouse, read_only=True, lock_timeout=5)
        assert reader.load_table("ns.ro").scan().to_arrow().column("k").to_pylist() == [7]
        with pytest.raises(CatalogLockTimeoutError, match=r"\.lock"):
            lakefmt.Catalog(local_catalog.warehouse, lock_timeout=0.3)


def test_a_read_only_reader_creates_nothing_and_a_writer_creates_missing_tables(local_catalog):
    """CAT-14: only opening for writing creates the missing tables of CAT-3; a reader needs only `tables`."""
    schema = pa.schema([pa.field("k", pa.int64())])
    local_catalog.create_table("ns.old", schema).append(pa.table({"k": [1, 2]}, schema=schema))
    path = local_catalog.catalog_path

    def tables_in_file() -> set[str]:
        con = duckdb.connect(path, read_only=True)
        try:
            return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        finally:
            con.close()

    con = duckdb.connect(path)
    con.execute("DROP TABLE leases")
    con.execute("DROP TABLE writer_progress")
    con.execute("CHECKPOINT")
    con.close()
    before = tables_in_file()
    assert "leases" not in before
    reader = lakefmt.Catalog(local_catalog.warehouse, read_only=True)
    assert sorted(reader.load_table("ns.old").scan().to_arrow().column("k").to_pylist()) == [1, 2]
    assert reader.list_tables("ns") == ["ns.old"]
    assert tables_in_file() == before
    lakefmt.Catalog(local_catalog.warehouse)  # opened for writing
    assert {"leases", "writer_progress"} <= tables_in_file()


def test_an_s3_warehouse_has_no_default_catalog(tmp_path):
    """CAT-16: the catalog of an object-store warehouse is given separately, never looked for in the store."""
    with pytest.raises(InvalidCatalogPathError, match=r"s3:// warehouse needs catalog_path"):
        lakefmt.Catalog("s3://bucket/warehouse")
    with pytest.raises(InvalidCatalogPathError, match="local file path"):
        lakefmt.Catalog("s3://bucket/warehouse", catalog_path="s3://bucket/warehouse/catalog.duckdb")


def test_a_catalog_path_that_is_a_folder_is_refused(tmp_path):
    """CAT-14: a catalog path naming a folder is InvalidCatalogPathError."""
    (tmp_path / "cat").mkdir()
    with pytest.raises(InvalidCatalogPathError, match="is a folder"):
        lakefmt.Catalog(str(tmp_path / "wh"), catalog_path=str(tmp_path / "cat"), create=True)


# -- gap 6: EXPR-1 / EXPR-2 / EXPR-4, the filter grammar ------------------------------------------

SCHEMA = Schema((Field(1, "a", LONG), Field(2, "s", STRING), Field(3, "f", DOUBLE), Field(4, "local", TIMESTAMP),
                 Field(5, "ts", TIMESTAMPTZ), Field(6, "d", DATE), Field(7, "g", FLOAT), Field(8, "b", BINARY)))
MIDNIGHT_2026_01_15 = 20468 * 86_400_000_000


def bound_literal(text: str):
    return bind(text, SCHEMA).literal


def test_between_is_inclusive_and_not_between_is_its_negation(local_catalog):
    """EXPR-2: BETWEEN means a >= lo AND a <= hi; NOT BETWEEN is NOT of that, so NaN satisfies it."""
    assert parse_filter("a BETWEEN 3 AND 5") == (col("a") >= 3) & (col("a") <= 5)
    assert parse_filter("a NOT BETWEEN 3 AND 5") == Not((col("a") >= 3) & (col("a") <= 5))
    schema = pa.schema([pa.field("a", pa.int64()), pa.field("f", pa.float64())])
    table = local_catalog.create_table("ns.between", schema)
    table.append(pa.table({"a": [1, 3, 4, 5, 6, None], "f": [1.0, 3.0, 4.0, 5.0, math.nan, None]}, schema=schema))
    assert values(table, "a", "a BETWEEN 3 AND 5") == [3, 4, 5]
    assert values(table, "a", "a BETWEEN 5 AND 3") == []
    assert values(table, "a", "a NOT BETWEEN 3 AND 5") == [1, 6]  # NULL is neither
    assert values(table, "a", "f NOT BETWEEN 3 AND 5") == [1, 6]  # 6 holds NaN: NOT (FALSE) is TRUE
    assert values(table, "a", "f < 3 OR f > 5") == [1]  # NaN compares FALSE


@pytest.mark.parametrize(("text", "expected"), [
    (r"s LIKE 'ab%'", col("s").starts_with("ab")),
    (r"s LIKE '100\%%'", col("s").starts_with("100%")),
    (r"s LIKE 'a\_b%'", col("s").starts_with("a_b")),
    (r"s LIKE 'a\\%'", col("s").starts_with("a\\")),
    (r"s LIKE 'a\_b'", col("s") == "a_b"),
    (r"s NOT LIKE 'x\%'", col("s") != "x%"),
    (r"s NOT LIKE 'x\%y%'", col("s").not_starts_with("x%y")),
])
def test_like_escapes(text, expected):
    """EXPR-2: backslash escapes %, _ and itself in LIKE patterns."""
    assert parse_filter(text) == expected


@pytest.mark.parametrize(("text", "message", "position"), [
    (r"s LIKE 'a\b%'", "a backslash escapes only %, _ or a backslash", 7),
    ("s LIKE 'ab\\'", "a backslash escapes only %, _ or a backslash", 7),
    (r"s LIKE 'a_b%'", "only prefix patterns", 7),
    (r"s LIKE '%ab'", "only prefix patterns", 7),
    (r"s LIKE 'a%b%'", "only prefix patterns", 7),
])
def test_bad_like_patterns_are_filter_errors(text, message, position):
    """EXPR-2: an unsupported wildcard or a bad escape is FilterError at the pattern's position."""
    with pytest.raises(FilterError, match=message) as info:
        parse_filter(text)
    assert info.value.position == position


def test_like_prefixes_print_and_parse_back(local_catalog):
    """EXPR-2: printed filters escape LIKE wildcards, so every prefix round-trips; rows match literally."""
    for prefix in ["a%", "a_", "a\\", "%_\\x", "it's"]:
        expr = col("s").starts_with(prefix)
        assert "LIKE" in str(expr)
        assert parse_filter(str(expr)) == expr
        assert parse_filter(str(~expr)) == ~expr
    schema = pa.schema([pa.field("s", pa.string())])
    table = local_catalog.create_table("ns.like", schema)
    table.append(pa.table({"s": ["a%b", "a_b", "axb", "a\\b", "ab"]}, schema=schema))
    assert values(table, "s", r"s LIKE 'a\%%'") == ["a%b"]
    assert values(table, "s", r"s LIKE 'a\_%'") == ["a_b"]
    assert values(table, "s", r"s LIKE 'a\\%'") == ["a\\b"]
    assert values(table, "s", r"s LIKE 'a%'") == sorted(["a%b", "a_b", "axb", "a\\b", "ab"], key=repr)


def test_is_nan_is_the_spelling_and_isnan_an_alias():
    """EXPR-1, EXPR-2: is_nan(c) as in EXPR-1; isnan and not_nan are accepted; printing uses is_nan."""
    assert parse_filter("is_nan(f)") == parse_filter("ISNAN(f)") == col("f").is_nan()
    assert parse_filter("not_nan(f)") == col("f").not_nan()
    assert parse_filter("not_starts_with(s, 'a')") == col("s").not_starts_with("a")
    assert str(col("f").is_nan()) == "is_nan(f)"
    assert str(col("f").not_nan()) == "not_nan(f)"
    assert parse_filter(str(col("f").not_nan())) == col("f").not_nan()
    for text in ("is_nan(f)", "isnan(f)", "NOT is_nan(f)", "not_nan(f)"):
        expr = bind(text, SCHEMA)
        assert expr == bind(str(expr), SCHEMA)


def test_literals_with_an_offset_on_a_timestamp_column_are_converted_to_utc():
    """EXPR-4: an offset on a zone-less column is removed by converting to UTC, then compared as wall clock."""
    ten = bound_literal("local < TIMESTAMP '2026-01-01 10:00:00'")
    assert bound_literal("local < TIMESTAMPTZ '2026-01-01T12:00:00+02:00'") == ten
    assert bound_literal("local < TIMESTAMP '2026-01-01T12:00:00+02:00'") == ten
    assert bound_literal("local < '2026-01-01T12:00:00+02:00'") == ten
    assert bound_literal("local < '2026-01-01T10:00:00Z'") == ten
    assert bound_literal("ts < TIMESTAMPTZ '2026-01-01T12:00:00+02:00'") == ten  # the same instant
    assert bound_literal("ts < TIMESTAMP '2026-01-01 10:00:00'") == ten  # no offset on timestamptz: UTC


def test_date_literals_on_timestamp_columns_are_midnight():
    """EXPR-4: DATE d on timestamp is d 00:00 wall clock, on timestamptz d 00:00 UTC."""
    for text in ("local >= DATE '2026-01-15'", "local >= '2026-01-15'", "ts >= DATE '2026-01-15'",
                 "ts >= '2026-01-15'"):
        assert bound_literal(text) == MIDNIGHT_2026_01_15, text


@pytest.mark.parametrize(("text", "days"), [
    ("d = TIMESTAMP '2026-01-15 00:00:00'", 20468),
    ("d = '2026-01-15T00:00:00'", 20468),
    ("d = '2026-01-15'", 20468),
])
def test_midnight_date_times_bind_to_date_columns(text, days):
    """EXPR-4: a date-time without offset at 00:00:00 is its date on a date column."""
    assert bound_literal(text) == days


@pytest.mark.parametrize(("text", "message"), [
    ("d = TIMESTAMP '2026-01-15 01:00:00'", "has a time of day"),
    ("d = '2026-01-15T01:00:00'", "has a time of day"),
    ("d = TIMESTAMPTZ '2026-01-15 00:00:00'", "has an offset"),
    ("local = TIME '10:00:00'", "type mismatch"),
    ("ts = TIME '10:00:00'", "type mismatch"),
    ("d = TIME '10:00:00'", "type mismatch"),
    ("local = TIMESTAMP '2026-01-15 00:00:00.1234567'", "invalid TIMESTAMP literal"),
    ("local = '2026-01-15T00:00:00.1234567'", "not an ISO timestamp string"),
])
def test_temporal_literals_that_do_not_fit_are_filter_errors(text, message):
    """EXPR-2, EXPR-4: the rest of the table of EXPR-4 is FilterError, and no fraction digit is dropped."""
    with pytest.raises(FilterError, match=message):
        bind(text, SCHEMA)


# -- gap 7: PART-7, partition folder names without reference to Python ----------------------------

def f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


@pytest.mark.parametrize(("value", "single", "text"), [
    (1.5, False, "1.5"), (100.0, False, "100.0"), (0.1, False, "0.1"), (1 / 3, False, "0.3333333333333333"),
    (0.0001, False, "0.0001"), (0.00001, False, "1e-05"), (1.5e16, False, "1.5e+16"),
    (1e15 + 0.5, False, "1000000000000000.5"), (5e-324, False, "5e-324"),
    (1.7976931348623157e308, False, "1.7976931348623157e+308"), (-0.0, False, "-0.0"), (0.0, False, "0.0"),
    (math.inf, False, "inf"), (-math.inf, False, "-inf"), (math.nan, False, "nan"), (-2.5, False, "-2.5"),
    (f32(0.1), True, "0.1"), (f32(1e20), True, "1e+20"), (f32(3.4028234663852886e38), True, "3.4028235e+38"),
    (f32(1.401298464324817e-45), True, "1e-45"), (16777216.0, True, "16777216.0"), (-0.0, True, "-0.0"),
])
def test_float_text_vectors(value, single, text):
    """PART-7: the test vectors of the spec's floating-point rule."""
    assert float_text(value, single) == text


def test_float_text_is_shortest_round_trip_for_random_values():
    """PART-7: doubles read back and match the shortest round-trip text; floats read back in binary32."""
    rng = random.Random(13)
    for _ in range(20000):
        value = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if math.isfinite(value):
            assert float_text(value, False) == repr(value)  # Python's repr is shortest round-trip too
        single = f32(rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-30, 30))
        if math.isfinite(single) and single != 0:
            text = float_text(single, True)
            assert f32(float(text)) == single
            digits = text.split("e")[0].replace("-", "").replace(".", "").strip("0")
            shorter = f"{single:.{len(digits) - 2}e}" if len(digits) > 1 else None
            assert shorter is None or f32(float(shorter)) != single or len(digits) == 1


def test_percent_encoding_keeps_exactly_the_unreserved_bytes():
    """PART-7: every UTF-8 byte except A-Z a-z 0-9 - _ . ~ becomes %XX, uppercase hex."""
    text = "".join(chr(c) for c in range(1, 128)) + "é€😀"
    unreserved = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")
    expected = "".join(chr(b) if b in unreserved else f"%{b:02X}" for b in text.encode("utf-8"))
    assert Transform("identity").human_string(text, STRING) == expected


def test_years_outside_one_to_9999_and_decimals_have_defined_paths():
    """PART-7: years zero-padded to four digits with a leading '-', decimals with exactly S digits."""
    assert [year_str(y) for y in (47, 2017, 10000, 0, -1, -12345)] == ["0047", "2017", "10000", "0000", "-0001",
                                                                        "-12345"]
    assert Transform("year").human_string(8030, TIMESTAMP) == "10000"
    assert Transform("month").human_string(-1970 * 12 - 1, DATE) == "-0001-12"
    assert Transform("day").human_string(-719528, DATE) == "0000-01-01"
    assert Transform("day").human_string(-719529, DATE) == "-0001-12-31"
    assert Transform("hour").human_string(-719529 * 24 + 5, TIMESTAMP) == "-0001-12-31-05"
    dec = decimal_type(12, 10)
    assert Transform("identity").human_string(decimal.Decimal("0E-10"), dec) == "0.0000000000"
    assert Transform("identity").human_string(decimal.Decimal("-0.0500000000"), dec) == "-0.0500000000"
    assert Transform("identity").human_string(decimal.Decimal("1E-7").quantize(decimal.Decimal("1E-10")),
                                              dec) == "0.0000001000"
    assert Transform("identity").human_string(decimal.Decimal(12), decimal_type(5, 0)) == "12"
    assert Transform("identity").human_string(1e16, DOUBLE) == "1e%2B16"
    assert Transform("identity").human_string(f32(0.1), FLOAT) == "0.1"


def test_partition_folders_of_real_files(local_catalog):
    """PART-7, LAYOUT-6: the folder names lakefmt writes for float, double and decimal partitions."""
    schema = pa.schema([pa.field("g", pa.float32()), pa.field("x", pa.float64()),
                        pa.field("m", pa.decimal128(12, 10))])
    table = local_catalog.create_table("ns.paths", schema, partition_by=["g", "x", "m"])
    table.append(pa.table({"g": pa.array([0.1], pa.float32()), "x": [1e16],
                           "m": pa.array([decimal.Decimal(0)], pa.decimal128(12, 10))}, schema=schema))
    (path,) = [f.path for f in table.plan_files()]
    assert path.startswith("data/g=0.1/x=1e%2B16/m=0.0000000000/part-")


# -- gap 8: SNAP-2, 64-bit ids as JSON numbers -----------------------------------------------------

def test_snapshot_ids_are_json_integers_read_exactly(local_catalog):
    """SNAP-2: ids are written as JSON integers and read as exact 64-bit integers, above 2^53 too."""
    schema = pa.schema([pa.field("k", pa.int64())])
    table = local_catalog.create_table("ns.ids", schema)
    table.append(pa.table({"k": [1]}, schema=schema))
    text = Path(table.metadata_location).read_text()
    sid = table.current_snapshot().snapshot_id
    assert re.search(rf'"snapshot-id": ?{sid}\b', text) and f'"{sid}"' not in text
    for big in (2**53 + 1, 2**63 - 1):
        meta = TableMetadata.loads(text.replace(str(sid), str(big)))
        assert meta.current_snapshot_id == big and meta.snapshots[0].snapshot_id == big
        assert meta.snapshot_log[0].value == big
        assert float(big) != big or big < 2**53  # what a parser through doubles would lose
    obj = json.loads(text)
    obj["current-snapshot-id"] = str(sid)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(obj, json.loads(spec_text("table-metadata.schema.json")))


# -- gap 9: MAN-9, lakefmt.schema is informational -------------------------------------------------

def test_lakefmt_schema_is_the_schema_at_write_time_and_is_not_read(local_catalog):
    """MAN-9: a rewritten manifest records the schema it was written under; readers never use it."""
    schema = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.int64())])
    table = local_catalog.create_table("ns.mschema", schema, partition_by=["k"],
                                       properties={"write.delete.mode": "copy-on-write"})
    table.append(pa.table({"k": [1, 2], "v": [10, 20]}, schema=schema))
    with table.update_schema() as update:
        update.add_column("w", pa.string())
    table.delete("k = 1")  # rewrites the manifest: file k=2, written under schema 0, stays as EXISTING
    (manifest,) = manifests_of(table)
    recorded = json.loads(pq.ParquetFile(manifest).schema_arrow.metadata[b"lakefmt.schema"])
    assert [f["name"] for f in recorded["fields"]] == ["k", "v", "w"]
    written = pq.ParquetFile(data_files(table)[0]).schema_arrow.names
    assert written == ["k", "v"]  # the listed file does not have the recorded schema
    original = pq.read_table(manifest)
    broken = original.replace_schema_metadata({**original.schema.metadata, b"lakefmt.schema": b"{not json"})
    pq.write_table(broken, manifest)
    manifest_cache.clear()
    reopened = local_catalog.load_table("ns.mschema")
    assert reopened.scan().to_arrow().to_pylist() == [{"k": 2, "v": 20, "w": None}]


# -- gap 10: TYPE-11, signed zeros in bounds -------------------------------------------------------

@pytest.mark.parametrize(("arrow_type", "data", "lower", "upper"), [
    (pa.float64(), [0.0], "0000000000000080", "0000000000000000"),
    (pa.float64(), [-0.0], "0000000000000080", "0000000000000000"),
    (pa.float64(), [0.0, -0.0, None, math.nan], "0000000000000080", "0000000000000000"),
    (pa.float64(), [-1.0, -0.0], "000000000000f0bf", "0000000000000000"),
    (pa.float32(), [0.0, 2.0], "00000080", "00000040"),
])
def test_zero_bounds_are_negative_below_and_positive_above(local_catalog, arrow_type, data, lower, upper):
    """TYPE-11: a zero lower bound is written -0.0, a zero upper bound +0.0; filters on ±0 find both zeros."""
    schema = pa.schema([pa.field("x", arrow_type)])
    table = local_catalog.create_table("ns.zero", schema)
    table.append(pa.table({"x": pa.array(data, arrow_type)}, schema=schema))
    (f,) = table.plan_files()
    assert (f.lower_bounds[1].hex(), f.upper_bounds[1].hex()) == (lower, upper)
    zeros = [v for v in data if v == 0]  # -0.0 == 0.0 (TYPE-5)
    for literal in ("0.0", "-0.0", "0"):
        assert len(table.scan(f"x = {literal}").to_arrow()) == len(zeros), literal
    assert len(table.scan("x > -0.0").to_arrow()) == sum(1 for v in data if v is not None and v > 0)


def test_zero_partition_summaries_follow_the_same_rule_and_skip_nan(local_catalog):
    """TYPE-11, ML-4: identity partitions of ±0.0 summarize as -0.0 / +0.0; NaN never becomes a bound."""
    schema = pa.schema([pa.field("x", pa.float64()), pa.field("n", pa.int64())])
    table = local_catalog.create_table("ns.zpart", schema, partition_by=["x"])
    table.append(pa.table({"x": [0.0, math.nan], "n": [1, 2]}, schema=schema))
    snap = table.current_snapshot()
    (m,) = read_manifest_list(table.io, f"{table.location}/{snap.manifest_list}")
    (summary,) = m.partitions
    assert (summary.lower_bound.hex(), summary.upper_bound.hex()) == ("0000000000000080", "0000000000000000")
    assert sorted(table.scan("x = -0.0").to_arrow().column("n").to_pylist()) == [1]
    assert table.scan("is_nan(x)").to_arrow().column("n").to_pylist() == [2]


# -- gap 11: COMMIT-12, removing a file whole ------------------------------------------------------

def test_copy_on_write_removes_a_file_whole_without_reading_it(local_catalog):
    """COMMIT-12 step 1: when statistics prove every row matches, lakefmt removes the file unread."""
    schema = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.int64())])
    table = local_catalog.create_table("ns.whole", schema, partition_by=["k"],
                                       properties={"write.delete.mode": "copy-on-write"})
    table.append(pa.table({"k": [1, 1, 2], "v": [1, 2, 3]}, schema=schema))
    (doomed,) = [f"{table.location}/{f.path}" for f in table.plan_files("k = 1")]
    size = Path(doomed).stat().st_size
    Path(doomed).write_bytes(b"\0" * size)  # unreadable: any read of it would fail
    snap = table.delete("k = 1")
    assert snap is not None and snap.operation == "delete"
    assert snap.summary["deleted-data-files"] == "1" and snap.summary["added-data-files"] == "0"
    assert table.scan().to_arrow().to_pylist() == [{"k": 2, "v": 3}]


# -- gap 12: editorial -----------------------------------------------------------------------------

def test_reading_ids_are_in_order_and_the_json_schema_cites_meta_3():
    """README conventions: READ-n stand in numeric order; the JSON Schema cites META-3 for references."""
    numbers = [int(n) for n in re.findall(r"^\s*-\s+\*\*READ-(\d+)\*\*", spec_text("reading.md"), re.MULTILINE)]
    assert numbers == sorted(numbers) == list(range(1, max(numbers) + 1))
    for path in (SPEC / "table-metadata.schema.json", SPEC.parent / "lakefmt" / "table-metadata.schema.json"):
        description = json.loads(path.read_text())["description"]
        assert "(META-3)" in description and "META-4" not in description
    assert (SPEC / "table-metadata.schema.json").read_bytes() == (
        SPEC.parent / "lakefmt" / "table-metadata.schema.json").read_bytes()
