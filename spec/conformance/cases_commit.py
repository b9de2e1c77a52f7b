"""Commit cases: two writers on one base, interleaved by a script, and the outcomes the spec allows."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from _build import TableBuild, case, without_rows, write_parquet

from lakefmt.conformance.filters import make

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("x", pa.int64()), pa.field("s", pa.string())])
A_FIRST = [["prepare", "A"], ["prepare", "B"], ["commit", "A"], ["commit", "B"]]
B_FIRST = [["prepare", "A"], ["prepare", "B"], ["commit", "B"], ["commit", "A"]]


def rows(ids: list[int], xs: list[int] | None = None) -> pa.Table:
    xs = ids if xs is None else xs
    return pa.Table.from_pydict({"id": ids, "x": xs, "s": [f"r{i}" for i in ids]}, schema=SCHEMA)


class Interleaving:
    """The base table (files f1 with x 0…4 and f2 with x 10…14), the two writers, the allowed results."""

    def __init__(self, b: TableBuild, mode: str) -> None:
        self.b = b
        b.create(SCHEMA, properties={"write.delete.mode": mode})
        b.append(rows([0, 1, 2, 3, 4]))
        b.append(rows([10, 11, 12, 13, 14]))
        self.base = b.model
        self.writers: dict[str, dict[str, Any]] = {}
        self.results: list[dict[str, Any]] = []

    def writer(self, name: str, op: str, *, data: pa.Table | None = None, tree: list[Any] | None = None) -> None:
        spec: dict[str, Any] = {"op": op}
        if data is not None:
            spec["rows"] = f"input/{name}.parquet"
            write_parquet(self.b.out / spec["rows"], data)
        if tree is not None:
            flt = make(tree)
            spec["filter"] = {"text": flt.text, "tree": flt.tree}
        self.writers[name] = spec

    def allow(self, because: str, rows_after: pa.Table, **outcomes: str) -> None:
        path = f"expected/result-{len(self.results)}.parquet"
        write_parquet(self.b.out / path, rows_after)
        self.results.append({"outcomes": outcomes, "rows": path, "because": because})

    def finish(self, script: list[list[str]]) -> dict[str, Any]:
        return {"metadata": self.b.copy_table(), "writers": self.writers, "script": script, "results": self.results}


def cat(*tables: pa.Table) -> pa.Table:
    return pa.concat_tables(tables)


@case("commit", "c-append-append", "two appends on one base: the second rebases",
      "COMMIT-6 COMMIT-7 COMMIT-8 CAT-4 ROWDEL-10")
def append_append(b: TableBuild) -> dict:
    i = Interleaving(b, "merge-on-read")
    i.writer("A", "append", data=rows([20, 21, 22]))
    i.writer("B", "append", data=rows([30, 31]))
    i.allow("appends never conflict (COMMIT-7 example 1)", cat(i.base, rows([20, 21, 22]), rows([30, 31])),
            A="committed", B="committed")
    return i.finish(A_FIRST)


@case("commit", "c-compact-then-append", "an append lands while a compaction of the same files is in flight",
      "COMMIT-7 COMMIT-8 COMMIT-9 COMMIT-17 ROWDEL-10")
def compact_then_append(b: TableBuild) -> dict:
    i = Interleaving(b, "merge-on-read")
    i.writer("A", "compact")
    i.writer("B", "append", data=rows([30, 31]))
    i.allow("the compaction rebases: its files are still live (COMMIT-7 example 2)", cat(i.base, rows([30, 31])),
            A="committed", B="committed")
    return i.finish(B_FIRST)


@case("commit", "c-append-then-compact", "a compaction lands while an append is in flight", "COMMIT-7 COMMIT-8 ROWDEL-10")
def append_then_compact(b: TableBuild) -> dict:
    i = Interleaving(b, "merge-on-read")
    i.writer("A", "compact")
    i.writer("B", "append", data=rows([30, 31]))
    i.allow("an append never conflicts (ROWDEL-10)", cat(i.base, rows([30, 31])), A="committed", B="committed")
    return i.finish(A_FIRST)


@case("commit", "c-compact-compact", "two compactions of the same files: one wins", "COMMIT-9 COMMIT-17 COMPACT-24")
def compact_compact(b: TableBuild) -> dict:
    i = Interleaving(b, "merge-on-read")
    i.writer("A", "compact")
    i.writer("B", "compact")
    i.allow("B's inputs are gone (COMMIT-9)", i.base, A="committed", B="conflict")
    i.allow("B planned again over A's files (MAY)", i.base, A="committed", B="committed")
    return i.finish(A_FIRST)


def _overwrites(b: TableBuild, mode: str) -> dict:
    i = Interleaving(b, mode)
    f = ["<", "x", 5]
    a, bb = rows([40, 41], [1, 2]), rows([50], [3])
    i.writer("A", "overwrite", data=a, tree=f)
    i.writer("B", "overwrite", data=bb, tree=f)
    i.allow("B conflicts: A removed or changed the files B read, and added rows matching x < 5 "
            "(COMMIT-9, COMMIT-10, ROWDEL-4, ROWDEL-5)", cat(without_rows(i.base, f), a), A="committed", B="conflict")
    i.allow("B planned again over A's snapshot, replacing A's rows (ROWDEL-5 SHOULD)",
            cat(without_rows(i.base, f), bb), A="committed", B="committed")
    return i.finish(A_FIRST)


@case("commit", "c-overwrite-overwrite-cow", "two copy-on-write overwrites of the same rows",
      "COMMIT-9 COMMIT-10 COMMIT-12 ROWDEL-4 ROWDEL-5")
def overwrite_cow(b: TableBuild) -> dict:
    return _overwrites(b, "copy-on-write")


@case("commit", "c-overwrite-overwrite-mor", "two merge-on-read overwrites of the same rows",
      "COMMIT-10 ROWDEL-2 ROWDEL-3 ROWDEL-5")
def overwrite_mor(b: TableBuild) -> dict:
    return _overwrites(b, "merge-on-read")


@case("commit", "c-delete-then-compact", "a compaction removes the file a merge-on-read delete gives a vector",
      "ROWDEL-5 ROWDEL-11 COMMIT-9")
def delete_then_compact(b: TableBuild) -> dict:
    i = Interleaving(b, "merge-on-read")
    f = ["=", "x", 1]
    i.writer("A", "delete", tree=f)
    i.writer("B", "compact")
    i.allow("the delete planned again over the compacted file (ROWDEL-5 SHOULD; ROWDEL example 3)",
            without_rows(i.base, f), A="committed", B="committed")
    i.allow("the delete conflicts: its file is gone (ROWDEL-5)", i.base, A="conflict", B="committed")
    return i.finish(B_FIRST)


@case("commit", "c-compact-then-delete", "a merge-on-read delete lands while a compaction of its file is in flight",
      "ROWDEL-4 ROWDEL-11 COMPACT-18 DV-9")
def compact_then_delete(b: TableBuild) -> dict:
    i = Interleaving(b, "merge-on-read")
    f = ["=", "x", 1]
    i.writer("A", "compact")
    i.writer("B", "delete", tree=f)
    i.allow("the compaction conflicts: a vector changed (ROWDEL-4; ROWDEL example 2)", without_rows(i.base, f),
            A="conflict", B="committed")
    i.allow("the compaction planned again from the new snapshot (MAY); the deleted row stays deleted",
            without_rows(i.base, f), A="committed", B="committed")
    return i.finish(B_FIRST)


@case("commit", "c-delete-delete", "two merge-on-read deletes of rows of one file: the vectors are united",
      "ROWDEL-3 DV-9 DV-11")
def delete_delete(b: TableBuild) -> dict:
    i = Interleaving(b, "merge-on-read")
    i.writer("A", "delete", tree=["=", "id", 1])
    i.writer("B", "delete", tree=["=", "id", 3])
    i.allow("B rebases with the union of both vectors (ROWDEL-3; ROWDEL example 1)", rows([0, 2, 4, 10, 11, 12, 13, 14]),
            A="committed", B="committed")
    return i.finish(A_FIRST)


@case("commit", "c-cow-delete-delete", "two copy-on-write deletes of rows of one file",
      "COMMIT-9 COMMIT-12 ROWDEL-4 ROWDEL-5")
def cow_delete_delete(b: TableBuild) -> dict:
    i = Interleaving(b, "copy-on-write")
    i.writer("A", "delete", tree=["=", "id", 1])
    i.writer("B", "delete", tree=["=", "id", 3])
    i.allow("B planned again over A's rewritten file (ROWDEL-5 SHOULD)", rows([0, 2, 4, 10, 11, 12, 13, 14]),
            A="committed", B="committed")
    i.allow("B conflicts: the file it rewrites is gone (COMMIT-9)", rows([0, 2, 3, 4, 10, 11, 12, 13, 14]),
            A="committed", B="conflict")
    return i.finish(A_FIRST)


@case("commit", "c-delete-append-disjoint", "a delete rebases over an append that cannot hold matching rows",
      "COMMIT-10 ROWDEL-10 EXPR-8")
def delete_append_disjoint(b: TableBuild) -> dict:
    i = Interleaving(b, "merge-on-read")
    f = ["=", "x", 1]
    added = rows([60, 61, 62, 63, 64], [5, 6, 7, 8, 9])
    i.writer("A", "delete", tree=f)
    i.writer("B", "append", data=added)
    i.allow("the appended file's x is in [5, 9]: no conflict (COMMIT-7 example 4)",
            cat(without_rows(i.base, f), added), A="committed", B="committed")
    return i.finish(B_FIRST)


@case("commit", "c-delete-append-overlap", "a delete loses to an append that might hold matching rows",
      "COMMIT-10 ROWDEL-5 ROWDEL-10 EXPR-8")
def delete_append_overlap(b: TableBuild) -> dict:
    i = Interleaving(b, "merge-on-read")
    f = ["=", "x", 1]
    added = rows([70, 71, 72, 73], [0, 1, 5, 9])
    i.writer("A", "delete", tree=f)
    i.writer("B", "append", data=added)
    i.allow("the appended file's x is in [0, 9]: the delete conflicts (COMMIT-10; COMMIT-7 example 5)",
            cat(i.base, added), A="conflict", B="committed")
    i.allow("the delete planned again over the append, deleting its x = 1 too (ROWDEL-5 SHOULD)",
            without_rows(cat(i.base, added), f), A="committed", B="committed")
    return i.finish(B_FIRST)
