"""Registering a warehouse's tables again from their metadata files (spec/catalog.md CAT-21).

When the catalog file is lost, every table's files are still in storage. Each table
folder ``<warehouse>/<namespace>/<table>-<h>`` (LAYOUT-10) gives back the name the
table was created with, and its ``metadata/`` folder the candidates for its current
metadata file: the highest version first (LAYOUT-9), the newest ``last-updated-ms``
among files of one version. A candidate is used only if it reads and every file its
current snapshot needs (manifest list, manifests, data files) exists; otherwise the
next one is tried. :meth:`lakefmt.Catalog.recover` is the entry point.

Example:
    >>> catalog, report = Catalog.recover("warehouse")
    >>> print(report.summary())
    registered 2 table(s), skipped 0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakefmt.errors import LakefmtError
from lakefmt.metadata import TableMetadata, read_metadata
from lakefmt.scan import DataScan
from lakefmt.warehouse_layout import find_metadata_files, metadata_version, parse_table_folder

if TYPE_CHECKING:
    from lakefmt.catalog import Catalog
    from lakefmt.io import FileIO

_MAX_NAME = 128


@dataclass(frozen=True)
class RecoveredTable:
    """A table registered by recovery: under which name, from which metadata file, and why so."""

    identifier: str
    metadata_location: str
    version: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SkippedTable:
    """A table folder recovery did not register, and why."""

    table_location: str
    reason: str


@dataclass(frozen=True)
class RecoveryReport:
    """What :meth:`lakefmt.Catalog.recover` did."""

    registered: tuple[RecoveredTable, ...] = ()
    already_registered: tuple[str, ...] = ()
    skipped: tuple[SkippedTable, ...] = field(default_factory=tuple)

    def summary(self) -> str:
        text = f"registered {len(self.registered)} table(s), skipped {len(self.skipped)}"
        if self.already_registered:
            text += f", {len(self.already_registered)} already in the catalog"
        return text


@dataclass(frozen=True)
class _Found:
    table_location: str
    namespace: str
    name: str
    h: str
    metadata: TableMetadata
    metadata_location: str
    notes: tuple[str, ...]


def register_found_tables(catalog: Catalog) -> RecoveryReport:
    """Register every table folder of ``catalog.warehouse`` that the catalog does not hold yet (CAT-21)."""
    known = {r[0] for r in _registered_uuids(catalog)}
    found: list[_Found] = []
    skipped: list[SkippedTable] = []
    already: list[str] = []
    for table_location, files in sorted(find_metadata_files(catalog.io, catalog.warehouse).items()):
        parsed = parse_table_folder(table_location)
        if parsed is None:
            skipped.append(SkippedTable(table_location, "the folder is not <warehouse>/<namespace>/<table>-<12 hex> "
                                        "(LAYOUT-10); register it by hand with Catalog.register_table"))
            continue
        choice = _newest_usable(catalog.io, files)
        if isinstance(choice, str):
            skipped.append(SkippedTable(table_location, choice))
            continue
        metadata, location, notes = choice
        if metadata.table_uuid in known:
            already.append(table_location)
            continue
        found.append(_Found(table_location, *parsed, metadata, location, notes))
    registered = [_register(catalog, f, taken) for f, taken in _names(catalog, found)]
    return RecoveryReport(tuple(registered), tuple(already), tuple(skipped))


def _registered_uuids(catalog: Catalog) -> list[tuple[str, str, str]]:
    with catalog.session() as s:
        return s.table_identities()


def _names(catalog: Catalog, found: list[_Found]) -> list[tuple[_Found, bool]]:
    """Each table with whether its folder name is taken: by a table in the catalog, or by a newer folder.

    Of several folders with one name (a table dropped or renamed, then created again),
    the one updated last keeps the name; the others get ``<table>_<h>``.
    """
    taken = {(ns, name) for _, ns, name in _registered_uuids(catalog)}
    out: list[tuple[_Found, bool]] = []
    for f in sorted(found, key=lambda f: (f.namespace, f.name, -f.metadata.last_updated_ms)):
        key = (f.namespace, f.name)
        out.append((f, key in taken))
        taken.add(key)
    return out


def _register(catalog: Catalog, f: _Found, name_taken: bool) -> RecoveredTable:
    name, notes = f.name, list(f.notes)
    if name_taken:
        name = f"{f.name[:_MAX_NAME - 13]}_{f.h}"
        notes.append(f"{f.namespace}.{f.name} was taken (a newer table of that name, or one already in the "
                     f"catalog), so this table is registered as {f.namespace}.{name}")
    catalog.register_table((f.namespace, name), f.metadata_location)
    return RecoveredTable(f"{f.namespace}.{name}", f.metadata_location, metadata_version(f.metadata_location),
                          tuple(notes))


def _newest_usable(io: FileIO, files: list[str]) -> tuple[TableMetadata, str, tuple[str, ...]] | str:
    """The newest metadata file whose current snapshot is complete in storage, or why there is none."""
    candidates: list[tuple[int, int, str, TableMetadata | None, str]] = []
    for location in files:
        try:
            metadata = read_metadata(io, location)
            candidates.append((metadata_version(location), metadata.last_updated_ms, location, metadata, ""))
        except LakefmtError as exc:
            candidates.append((metadata_version(location), -1, location, None, str(exc)))
    candidates.sort(key=lambda c: (c[0], c[1]), reverse=True)
    notes: list[str] = []
    for version, _, location, metadata, error in candidates:
        problem = error or _missing_files(io, metadata)  # type: ignore[arg-type]
        if not problem:
            top = candidates[0][0]
            same = sum(1 for c in candidates if c[0] == version)
            if same > 1:
                notes.append(f"{same} metadata files have version {version}; chose the one updated last")
            if version != top:
                notes.append(f"newer metadata files were unusable; chose version {version}")
            return metadata, location, tuple(notes)  # type: ignore[return-value]
        notes.append(f"skipped {location}: {problem}")
    return "no usable metadata file: " + "; ".join(notes)


def _missing_files(io: FileIO, metadata: TableMetadata) -> str:
    """'' if every file the current snapshot reads exists, else what is missing."""
    try:
        tasks = DataScan.create(io, metadata).plan().tasks
    except LakefmtError as exc:
        return str(exc)
    data_root = f"{metadata.location}/data"
    present = {info.path for info in io.list_files(data_root)} if tasks else set()
    missing = [t.location for t in tasks if t.location not in present]
    if missing:
        return f"{len(missing)} data file(s) of its current snapshot are missing, e.g. {missing[0]}"
    return ""
