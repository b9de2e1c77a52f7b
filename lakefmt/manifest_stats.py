"""The statistics columns of a manifest's entries (spec/manifests.md MAN-6, MAN-7): decoded lazily, copied as stored.

A plan that filters on nothing never decodes the four statistics maps of the files it
lists; a commit that rewrites a manifest copies the maps of the entries it did not change
from the columns they were read from (:func:`stored_stats`) instead of decoding them into
dicts and encoding them again (240 tiny files: 46.5 ms of CPU down to 30.0 ms for the
removal part of a replace commit).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakefmt import arrow_values
from lakefmt.errors import CorruptMetadataError
from lakefmt.gc_pause import gc_paused
from lakefmt.manifest import STATS_FIELDS, DataFile

ReadColumns = Callable[[pq.ParquetFile, str, str, Sequence[str] | None], pa.Table]
"""Reads columns of an open manifest, raising lakefmt's errors (``manifest_io._read_open``)."""


class ManifestStats:
    """The four statistics map columns of one manifest (MAN-6, MAN-7), decoded on first use.

    Holds the parsed manifest. The first file that asks reads the map columns and turns
    them into a dict per row and map, for every row at once (a map column converts to
    Python lists in one call, and the files of a manifest that a filter looks at are
    usually most of them); each file then takes its own four dicts. A manifest whose
    statistics nobody asks for costs nothing here.
    """

    def __init__(self, parquet: pq.ParquetFile, location: str, read: ReadColumns,
                 arrow: pa.Schema | None = None) -> None:
        """``arrow``: the file's Arrow schema when the caller has it (``schema_arrow`` converts it again each call)."""
        self._parquet: pq.ParquetFile | None = parquet
        self._location = location
        self._read_columns = read
        arrow = parquet.schema_arrow if arrow is None else arrow
        self._names = [name for name in STATS_FIELDS if name in arrow.names]
        for name in self._names:  # the types are checked now: a malformed manifest fails when it is read
            if not pa.types.is_map(arrow.field(name).type):
                raise TypeError(f"column {name} is {arrow.field(name).type}, not a map (MAN-2)")
        self._lock = threading.Lock()
        self._rows: list[list[dict[Any, Any]]] | None = None
        self._table: pa.Table | None = None

    def _read(self) -> pa.Table:
        """The map columns as stored; the caller holds the lock."""
        if self._table is None:
            assert self._parquet is not None
            self._table = self._read_columns(self._parquet, self._location, "manifest", self._names)
            self._parquet = None  # read: the file is no longer needed
        return self._table

    def stored(self, arrow_schema: pa.Schema) -> dict[str, pa.Array] | None:
        """The four map columns as stored, if each has the type of ``arrow_schema`` and no null (a
        null map is written back as an empty one); None otherwise."""
        with self._lock:
            table = self._read()
        out = {}
        for name in STATS_FIELDS:
            if name not in table.column_names:
                return None
            column = table.column(name)
            if column.type != arrow_schema.field(name).type or column.null_count:
                return None
            out[name] = column.combine_chunks()
        return out

    def _decode(self) -> list[list[dict[Any, Any]]]:
        # Four dicts per row, kept with the manifest: built with the cyclic collector paused (lakefmt.gc_pause).
        with self._lock, gc_paused():
            if self._rows is None:
                table = self._read()
                try:
                    n = table.num_rows
                    self._rows = [map_dicts(table.column(name)) if name in self._names else [{} for _ in range(n)]
                                  for name in STATS_FIELDS]
                except (TypeError, ValueError, pa.ArrowInvalid) as exc:
                    raise CorruptMetadataError(f"manifest {self._location} is malformed: {exc}") from exc
            return self._rows

    def row_stats(self, row: int) -> list[dict[Any, Any]]:
        return [maps[row] for maps in self._rows or self._decode()]


def map_dicts(column: pa.ChunkedArray) -> list[dict[Any, Any]]:
    """A map column as one dict per row (empty for a null map), through its flattened keys and values."""
    array = column.combine_chunks()  # a slice's offsets index its unsliced keys and items: no adjustment
    offsets, keys, items = array.offsets.to_pylist(), array.keys.to_pylist(), array.items.to_pylist()
    out = [dict(zip(keys[a:b], items[a:b])) for a, b in pairwise(offsets)]
    if array.null_count:
        out = [m if valid else {} for m, valid in zip(out, array.is_valid().to_pylist())]
    return out


def stored_stats(files: list[DataFile], arrow_schema: pa.Schema) -> dict[str, pa.Array] | None:
    """The statistics columns of ``files`` as stored, when none of them was decoded (MAN-6, MAN-7).

    A file read from a manifest whose statistics nobody asked for (the existing and
    removed files of a rewritten manifest, usually all of them) has its four maps copied
    from the columns it was read from, row by row with ``take``: the same keys, values and
    order as decoding them into dicts and encoding them again, at a fraction of the cost.
    None (encode every file's dicts) when any file has decoded or new statistics, or a
    source column cannot be copied as is.
    """
    if not files:
        return None
    offsets: dict[int, int] = {}
    sources: list[dict[str, pa.Array]] = []
    indices: list[int] = []
    for f in files:
        state = f.__dict__
        source, row = state.get("_stats"), state.get("_stats_row")
        if source is None or row is None:
            return None
        base = offsets.get(id(source))
        if base is None:
            arrays = source.stored(arrow_schema)
            if arrays is None:
                return None
            base = offsets[id(source)] = sum(len(a["value_counts"]) for a in sources)
            sources.append(arrays)
        indices.append(base + row)
    if len(sources) == 1 and indices == list(range(len(sources[0]["value_counts"]))):
        return sources[0]  # every row of one manifest, in order: the columns as they are
    take = arrow_values.array(indices, pa.int64())  # pa.array on Python ints would import pandas
    return {name: (sources[0][name] if len(sources) == 1 else pa.concat_arrays([a[name] for a in sources])
                   ).take(take) for name in STATS_FIELDS}
