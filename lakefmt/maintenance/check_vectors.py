"""Deletion-vector checks of ``lakefmt check`` (format version 2, spec/deletes.md, ROWDEL-14).

* per manifest entry (every level): the vector names a file under ``data/deletes/``
  (LAYOUT-12), its offset, length and cardinality are in range (DV-5), it does not
  delete every row of its file (the file is removed instead, DV-7), and the table is at
  version 2 (DV-1);
* per snapshot (every level): each data file has at most one vector (DV-9), no two
  live entries point at the same blob (DV-10), the summary totals of DV-8 hold, and a
  file's vector holds at least the positions of its vector in the parent snapshot when
  both are retained (DV-9: by cardinality here, position by position at level ``full``);
* per vector file (level ``files``): it exists (LAYOUT-5) and is at least as long as the
  furthest blob an entry points at (DV-4);
* per blob (level ``full``): it passes every reader check of DV-4 against its entry:
  magic, CRC-32, encoding, ``row_count`` equal to the data file's ``record_count``,
  cardinality equal to the entry's, positions ascending and below the row count.

Each vector file is read once, however many entries and snapshots point into it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt import deletion_vectors as dv
from lakefmt.errors import CorruptMetadataError
from lakefmt.io import FileIO
from lakefmt.maintenance.check_files import Violation
from lakefmt.manifest import DataFile

MIN_BLOB = 28  # header (24 bytes) and CRC-32 (4 bytes) of an empty payload (DV-2)
Key = tuple[str, dv.DeletionVector]  # (data file, its vector): one blob to check


@dataclass(frozen=True)
class Growth:
    """A file's vector changed from ``before`` (in the parent) to ``after`` in ``snapshot_id`` (DV-9)."""

    data_file: str
    before: dv.DeletionVector
    after: dv.DeletionVector
    snapshot_id: int


def entry_violations(f: DataFile, manifest: str, format_version: int) -> list[Violation]:
    """Checks of one live entry's vector that need no file (every level)."""
    ref = f.deletion_vector
    if ref is None:
        return []
    out: list[Violation] = []

    def bad(requirement: str, message: str) -> None:
        out.append(Violation(requirement, f"deletion vector of {f.path}: {message}", manifest))

    if format_version < 2:
        bad("DV-1", "a version 1 table holds no deletion vector (a version 1 reader would return the "
                    "deleted rows)")
    name = ref.path[len(dv.FOLDER) + 1:] if ref.path.startswith(f"{dv.FOLDER}/") else ""
    if not name.startswith("dv-") or not name.endswith(".bin") or "/" in name:
        bad("LAYOUT-12", f"path {ref.path!r} is not a relative path {dv.FOLDER}/dv-{{unique}}.bin")
    if ref.offset < 0 or ref.length < MIN_BLOB:
        bad("DV-5", f"offset {ref.offset} and length {ref.length} cannot locate a blob "
                    f"(offset >= 0, length >= {MIN_BLOB})")
    if ref.cardinality < 1 or ref.cardinality > f.record_count:
        bad("DV-5", f"cardinality {ref.cardinality} is outside 1..{f.record_count} (the file's record_count)")
    elif ref.cardinality == f.record_count:
        bad("DV-7", f"deletes all {f.record_count} rows: the file must be removed instead")
    return out


def snapshot_violations(snapshot_id: int, live: Counter[str], vectors: Mapping[str, list[dv.DeletionVector]],
                        summary: Mapping[str, str], *, complete: bool, where: str) -> list[Violation]:
    """One vector per file (DV-9), one entry per blob (DV-10) and the summary totals (DV-8) of a snapshot."""
    out = []
    for path, refs in vectors.items():
        if live[path] > 1:
            out.append(Violation("DV-9", f"data file {path} has {len(refs)} deletion vector(s) in its {live[path]} "
                                         f"live entries of snapshot {snapshot_id}: at most one vector per file",
                                 where))
    blobs = Counter((ref.path, ref.offset) for refs in vectors.values() for ref in set(refs))
    for (path, offset), n in sorted(blobs.items()):
        if n > 1:
            out.append(Violation("DV-10", f"{n} live entries of snapshot {snapshot_id} point at the blob at offset "
                                          f"{offset} of {path}: a blob belongs to one data file", where))
    totals = (("total-position-deletes", sum(r.cardinality for refs in vectors.values() for r in refs)),
              ("total-delete-vectors", sum(len(refs) for refs in vectors.values())))
    for key, actual in totals:
        if complete and key in summary and summary[key].isdigit() and int(summary[key]) != actual:
            out.append(Violation("DV-8", f"snapshot {snapshot_id} says {key} = {summary[key]}, its manifests hold "
                                         f"{actual}", where))
    return out


def lineage_violations(snapshot_id: int, parent: Mapping[str, list[dv.DeletionVector]], live: Counter[str],
                       vectors: Mapping[str, list[dv.DeletionVector]], where: str
                       ) -> tuple[list[Violation], list[Growth]]:
    """A vector never shrinks (DV-9): what the metadata shows, and the changed vectors to compare by content."""
    out, grown = [], []
    for path, before in parent.items():
        if len(before) != 1 or not live[path]:
            continue  # several vectors are reported by snapshot_violations; a removed file may lose its vector
        after = vectors.get(path)
        if not after:
            out.append(Violation("DV-9", f"data file {path} has no deletion vector in snapshot {snapshot_id}, its "
                                         "parent's vector for it deletes rows: they would come back", where))
        elif len(after) == 1 and after[0] != before[0]:
            if after[0].cardinality < before[0].cardinality:
                out.append(Violation("DV-9", f"the deletion vector of {path} in snapshot {snapshot_id} deletes "
                                             f"{after[0].cardinality} rows, its parent's {before[0].cardinality}",
                                     where))
            else:
                grown.append(Growth(path, before[0], after[0], snapshot_id))
    return out, grown


def file_violations(io: FileIO, location: str, vectors: Mapping[Key, DataFile], *,
                    resolve: Callable[[str], str | None], exists: Callable[[str], bool],
                    size: Callable[[str], int | None], decode: bool, threads: int,
                    grown: Iterable[Growth] = ()) -> list[Violation]:
    """Existence and length of each vector file; with ``decode``, every blob (DV-4) and vector growth (DV-9).

    ``resolve`` turns a vector path of a manifest into one relative to ``location`` (None: outside it,
    reported as LAYOUT-12 already).
    """
    by_file: dict[str, list[Key]] = {}
    for key in vectors:
        ref = key[1]
        rel = resolve(ref.path)
        if rel is not None and ref.offset >= 0 and ref.length >= MIN_BLOB:  # otherwise reported as DV-5
            by_file.setdefault(rel, []).append(key)
    out: list[Violation] = []
    present: list[str] = []
    for path, keys in sorted(by_file.items()):
        if not exists(path):
            users = sorted({data for data, _ in keys})
            out.append(Violation("LAYOUT-5", f"deletion-vector file of {len(users)} data file(s) is missing, "
                                              f"e.g. of {users[0]}", path))
            continue
        actual = size(path)
        end, data = max((ref.offset + ref.length, data) for data, ref in keys)
        if actual is not None and actual < end:
            out.append(Violation("DV-4", f"deletion-vector file has {actual} bytes, the entry of {data} points at "
                                         f"bytes up to {end}", path))
        present.append(path)
    if not decode or not present:
        return out
    grown = list(grown)
    wanted = {(g.data_file, ref) for g in grown for ref in (g.before, g.after)}
    masks: dict[Key, pa.BooleanArray] = {}

    def check(path: str) -> list[Violation]:
        return _blob_violations(io, location, path, [(key, vectors[key]) for key in by_file[path]], wanted, masks)

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(present)))) as pool:
        for found in pool.map(check, present):
            out += found
    for g in grown:
        before, after = masks.get((g.data_file, g.before)), masks.get((g.data_file, g.after))
        if before is not None and after is not None and pc.any(pc.and_not(before, after)).as_py():
            out.append(Violation("DV-9", f"the deletion vector of {g.data_file} in snapshot {g.snapshot_id} lacks "
                                         "positions its parent's vector deletes: those rows would come back",
                                 resolve(g.after.path)))
    return out


def _blob_violations(io: FileIO, location: str, path: str, blobs: Iterable[tuple[Key, DataFile]],
                     wanted: set[Key], masks: dict[Key, pa.BooleanArray]) -> list[Violation]:
    """Decode every blob of one vector file; keep the masks of ``wanted`` ones in ``masks``."""
    try:
        data = io.read_bytes(f"{location}/{path}")
    except OSError as exc:
        return [Violation("READ-10", f"deletion-vector file cannot be read: {exc}", path)]
    out = []
    for key, f in sorted(blobs, key=lambda pair: (pair[0][1].offset, pair[0][0])):
        ref = key[1]
        blob = data[ref.offset:ref.offset + ref.length]
        if len(blob) < ref.length:
            continue  # reported with the file's length
        try:
            mask = dv.decode(blob, f.record_count, cardinality=ref.cardinality,
                             where=f"at offset {ref.offset} of data file {key[0]}")
        except CorruptMetadataError as exc:
            out.append(Violation("DV-4", str(exc), path))
            continue
        if key in wanted:
            masks[key] = mask  # one key per blob: threads never write the same key
    return out
