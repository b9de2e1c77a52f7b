"""Writer cases: scenarios the implementation under test writes; lakefmt checks and reads back each step."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from _build import TableBuild, case, rng_for, without_rows, write_parquet
from kit_rows import EVENTS_SCHEMA, TYPES_SCHEMA, events, typed_rows

from lakefmt.conformance.filters import make
from lakefmt.schema import Schema


class Scenario:
    """Steps of a writer case, with the rows the table must hold after each (the model)."""

    def __init__(self, b: TableBuild, schema: pa.Schema, *, partition_by: list[dict[str, str]] | None = None,
                 sort_by: list[dict[str, str]] | None = None, properties: dict[str, str] | None = None,
                 format_version: int = 1) -> None:
        self.b, self.model, self.steps = b, schema.empty_table(), []
        self.steps.append({"op": "create", "schema": Schema.from_arrow(schema).to_json(),
                           "partition-by": partition_by or [], "sort-by": sort_by or [],
                           "properties": properties or {}, "format-version": format_version,
                           "expect": self._expected()})

    def _expected(self) -> str:
        return write_parquet(self.b.out / "expected" / f"step-{len(self.steps)}.parquet", self.model) \
            .split(f"{self.b.case_id}/", 1)[1]

    def _rows(self, rows: pa.Table) -> str:
        return write_parquet(self.b.out / "input" / f"step-{len(self.steps)}.parquet", rows) \
            .split(f"{self.b.case_id}/", 1)[1]

    def append(self, rows: pa.Table) -> None:
        step = {"op": "append", "rows": self._rows(rows), "operation": "append"}
        self.model = pa.concat_tables([self.model, rows.cast(self.model.schema)])
        self.steps.append({**step, "expect": self._expected()})

    def delete(self, tree: list[Any]) -> None:
        flt = make(tree)
        self.model = without_rows(self.model, tree)
        self.steps.append({"op": "delete", "filter": {"text": flt.text, "tree": flt.tree}, "operation": "delete",
                           "expect": self._expected()})

    def overwrite(self, tree: list[Any], rows: pa.Table) -> None:
        flt = make(tree)
        step = {"op": "overwrite", "filter": {"text": flt.text, "tree": flt.tree}, "rows": self._rows(rows),
                "operation": "overwrite"}
        self.model = pa.concat_tables([without_rows(self.model, tree), rows.cast(self.model.schema)])
        self.steps.append({**step, "expect": self._expected()})

    def finish(self, more: pa.Table) -> dict[str, Any]:
        """The case.json fields; ``more`` is what lakefmt appends to the table before compacting it."""
        rows = write_parquet(self.b.out / "input" / "continue.parquet", more).split(f"{self.b.case_id}/", 1)[1]
        self.model = pa.concat_tables([self.model, more.cast(self.model.schema)])
        expect = write_parquet(self.b.out / "expected" / "continue.parquet", self.model) \
            .split(f"{self.b.case_id}/", 1)[1]
        return {"steps": self.steps, "continue": {"rows": rows, "expect": expect}}


@case("writer", "w-append", "create an unpartitioned table and append twice",
      "CAT-3 CAT-4 CAT-5 CAT-12 COMMIT-1 COMMIT-5 COMMIT-6 LAYOUT-6 LAYOUT-9 WRITE-1 WRITE-6 META-11 MAN-2 ML-2")
def w_append(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    s = Scenario(b, EVENTS_SCHEMA)
    s.append(events(20, rng))
    s.append(events(15, rng, first_id=20, null_every=4))
    return s.finish(events(5, rng, first_id=100))


@case("writer", "w-partitioned", "a partitioned, sorted table: day and bucket transforms",
      "WRITE-2 WRITE-4 PART-3 PART-4 PART-7 PART-9 MAN-4 ML-4 META-9 META-10 LAYOUT-6")
def w_partitioned(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    s = Scenario(b, EVENTS_SCHEMA, partition_by=[{"source": "ts", "transform": "day"},
                                                 {"source": "id", "transform": "bucket[4]"}],
                 sort_by=[{"source": "n", "direction": "asc", "null-order": "nulls-first"}])
    s.append(events(60, rng, null_every=10))
    s.append(events(30, rng, first_id=60))
    return s.finish(events(10, rng, first_id=200))


@case("writer", "w-types", "every column type, with edge values", "TYPE-1 TYPE-2 TYPE-3 TYPE-4 TYPE-6 TYPE-10 WRITE-1 MAN-6 MAN-7")
def w_types(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    s = Scenario(b, TYPES_SCHEMA)
    s.append(typed_rows(20, rng))
    s.append(typed_rows(10, rng, first_id=50, edges=0))
    return s.finish(typed_rows(4, rng, first_id=100, edges=0))


@case("writer", "w-delete-copy-on-write", "copy-on-write deletes: files removed whole and rewritten",
      "COMMIT-12 COMMIT-9 ROWDEL-1 MAN-3 MAN-10 SNAP-4 SNAP-5")
def w_delete_cow(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    s = Scenario(b, EVENTS_SCHEMA, partition_by=[{"source": "kind", "transform": "identity"}],
                 properties={"write.delete.mode": "copy-on-write"})
    s.append(events(40, rng))
    s.delete(["=", "kind", "imu"])
    s.delete(["<", "n", 20])
    return s.finish(events(5, rng, first_id=100))


@case("writer", "w-delete-merge-on-read", "merge-on-read deletes: the first vector upgrades the table to version 2",
      "ROWDEL-2 DV-1 DV-2 DV-3 DV-5 DV-7 DV-8 DV-9 DV-10 DV-11 FMT-4 LAYOUT-12")
def w_delete_mor(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    s = Scenario(b, EVENTS_SCHEMA)
    s.append(events(50, rng))
    s.append(events(50, rng, first_id=50))
    s.delete(["=", "id", 3])
    s.delete(["in", "id", [4, 5, 60, 61]])
    s.delete([">=", "id", 50])
    return s.finish(events(5, rng, first_id=100))


@case("writer", "w-overwrite", "overwrite the rows of a filter, then every row",
      "COMMIT-12 ROWDEL-2 SNAP-4 SNAP-5")
def w_overwrite(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    s = Scenario(b, EVENTS_SCHEMA, partition_by=[{"source": "kind", "transform": "identity"}])
    s.append(events(30, rng))
    s.overwrite(["=", "kind", "rad"], events(4, rng, first_id=500).set_column(1, "kind", pa.array(["rad"] * 4)))
    s.overwrite([">=", "id", 0], events(3, rng, first_id=900))
    return s.finish(events(5, rng, first_id=1000))


@case("writer", "w-format-v2", "a table created at format version 2", "DV-1 FMT-1 FMT-4 MAN-9 ML-7 DV-5 META-11")
def w_format_v2(b: TableBuild) -> dict:
    rng = rng_for(b.case_id)
    s = Scenario(b, EVENTS_SCHEMA, partition_by=[{"source": "id", "transform": "truncate[10]"}], format_version=2)
    s.append(events(25, rng))
    s.delete(["in", "id", [1, 12, 24]])
    return s.finish(events(5, rng, first_id=30))
