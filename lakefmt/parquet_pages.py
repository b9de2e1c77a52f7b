"""Reading only the data pages of a Parquet column chunk that hold wanted rows (READ-15).

pyarrow decodes whole column chunks. A selective read that keeps a few rows of a 131,072-row
row group would decompress every page of a wide column to keep those few values: for a
200-byte string column, 26 MB decoded per row group for one row. Here the reader walks the
chunk's page headers (Thrift compact protocol: a header is tens of bytes in front of a page
of up to about a megabyte) and hands pyarrow a *sparse copy* of the file: the pages that hold
a wanted row are copied as they are, and every other data page is replaced, in the same
bytes, by a header of an uncompressed page of as many rows, all null. pyarrow decodes the
real pages and fills the rest with nulls without reading them; the caller then takes only the
wanted rows, which all come from real pages. The copy lives in one buffer of the file's size
whose untouched parts are never written (a fresh large allocation is not backed by memory
until written), so it costs the pages copied and a few bytes per skipped page.

Only flat nullable columns (definition level 1, no repetition) are treated so: a stand-in
page of nulls needs a column that may hold nulls, and a flat column has one value per row, so
a page's ``num_values`` is its row count. Everything else, and any header this module does not
understand, is copied whole: the result is then what reading the whole chunk gives.

Example:
    >>> buf = sparse_copy(source, footer, groups=[3], columns=[5], rows={3: [17, 90_000]})
    >>> pq.ParquetFile(pa.BufferReader(buf), metadata=footer, pre_buffer=False).read_row_groups([3])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefmt import arrow_values
from lakefmt.file_cache import ImmutableFileCache
from lakefmt.thrift_compact import Truncated, i32_field, read_struct, uvarint

if TYPE_CHECKING:
    from lakefmt.io import FileIO

# Pages of nulls are decoded as intended by the pyarrow versions this module is tested on (26);
# older ones read whole column chunks, which READ-15 always allows.
ENABLED = int(pa.__version__.split(".")[0]) >= 26
# The page count of a chunk is estimated with the data page size lakefmt writes by default (WRITE-10);
# a file of larger pages is walked more often than it pays, which costs only the headers.
PAGE_BYTES = 256 << 10
_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
_PROBE = 1024  # bytes read for a page header; more when its statistics are longer
_MAX_HEADER = 1 << 20
# Readers of files from parquet-mr before 1.2.9 read up to 100 bytes past a chunk's recorded
# size (PARQUET-816); those bytes are copied too, so the copy reads as the file would.
_TAIL = 100
# The pages found in column chunks of data files, weighed in pages (four integers each): data files
# are never modified (LAYOUT-4), and walking a chunk's headers costs about 8 us per page.
PAGES = ImmutableFileCache[list[tuple[int, int, int, int]]](max_weight=500_000, weight=lambda p: max(1, len(p)))
# PageHeader fields read: type (1), compressed_page_size (3), data_page_header.num_values (5.1),
# data_page_header_v2.num_rows (8.3).
_WANTED: dict[int, Any] = {1: None, 3: None, 5: {1: None}, 8: {3: None}}


def worth_walking(chunk: pq.ColumnChunkMetaData, rows: int, wanted: pa.Array, first: int = 0) -> bool:
    """Whether skipping pages can pay: a chunk of at least two pages (estimated from its decoded
    size) whose ``wanted`` rows fall in fewer of them. ``wanted`` holds ascending row numbers,
    ``first`` the number of the group's first row, ``rows`` the group's row count. Pages are
    taken as even in rows, so rows next to each other (a sorted file's matches) count as one
    page however many they are. A header costs about 10 microseconds to read, and nothing when
    the chunk's pages are kept (:data:`PAGES`); a page, up to a millisecond to decompress and
    decode."""
    pages = -(-chunk.total_uncompressed_size // PAGE_BYTES)
    if pages < 2 or rows <= 0 or len(wanted) == 0:
        return False
    low, high = wanted[0].as_py() - first, wanted[-1].as_py() - first
    if high * pages // rows - low * pages // rows + 1 < pages or len(wanted) < pages:
        return True
    int64 = pa.int64()  # scalars built from buffers: pyarrow imports pandas to convert a Python value
    shifted = pc.subtract(wanted.cast(int64), arrow_values.scalar(first, int64))
    page_of = pc.divide(pc.multiply(shifted, arrow_values.scalar(pages, int64)), arrow_values.scalar(rows, int64))
    return pc.count_distinct(page_of).as_py() < pages


def skippable_columns(footer: pq.FileMetaData) -> set[int]:
    """Leaf column indices whose pages may be replaced by pages of nulls: flat, nullable."""
    schema = footer.schema
    return {i for i in range(footer.num_columns)
            if schema.column(i).max_definition_level == 1 and schema.column(i).max_repetition_level == 0}


def sparse_copy(source: Any, footer: pq.FileMetaData, size: int, groups: Sequence[int], columns: Sequence[int],
                rows: Mapping[int, Sequence[int]], walk: set[tuple[int, int]], *,
                cached_as: tuple[FileIO, str] | None = None) -> pa.Buffer:
    """A buffer of ``size`` bytes holding, for each row group of ``groups`` and leaf column of
    ``columns``, the column chunk as stored, except that in the chunks ``(group, column)`` of
    ``walk`` the data pages holding none of ``rows[group]`` (row numbers within the group,
    ascending) are pages of nulls. ``source`` is the file (a pyarrow ``NativeFile``).
    ``cached_as`` (the file's store and a name for these bytes, such as its location and size)
    keeps the pages found in each chunk for the next read of the file (:data:`PAGES`)."""
    out = pa.allocate_buffer(size)
    view = memoryview(out).cast("B")
    copy: list[tuple[int, int]] = []
    stand_ins: list[tuple[int, bytes]] = []
    for g in groups:
        row_group = footer.row_group(g)
        for c in columns:
            chunk = row_group.column(c)
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                start = chunk.dictionary_page_offset
            end = start + chunk.total_compressed_size
            pages = None
            if (g, c) in walk:
                pages = _chunk_pages(source, start, end, row_group.num_rows, cached_as)
            if pages is None:
                copy.append((start, end))
            else:
                copy += _stand_ins(pages, rows[g], stand_ins)
            copy.append((end, min(end + _TAIL, size)))
    for a, b in copy:
        if b > a:
            source.seek(a)
            if source.readinto(view[a:b]) != b - a:
                raise OSError(f"short read at byte {a} of a {size}-byte file")
    # Last: a chunk's tail (see _TAIL) may overlap the first page of the next chunk.
    for offset, page in stand_ins:
        view[offset:offset + len(page)] = page
    return out


def _chunk_pages(source: Any, start: int, end: int, rows: int, cached_as: tuple[FileIO, str] | None
                 ) -> list[tuple[int, int, int, int]] | None:
    """:func:`_pages`, kept in :data:`PAGES` under ``cached_as`` when given (a chunk whose headers
    are not understood is kept as an empty list, and gives None)."""
    if cached_as is None:
        return _pages(source, start, end, rows)
    io, name = cached_as
    key = f"{name}@{start}:{end}"
    pages = PAGES.get(io, key)
    if pages is None:
        pages = PAGES.put(io, key, _pages(source, start, end, rows) or [])
    return pages or None


def _stand_ins(pages: list[tuple[int, int, int, int]], wanted: Sequence[int], stand_ins: list[tuple[int, bytes]]
               ) -> list[tuple[int, int]]:
    """One page of nulls (added to ``stand_ins``) for each run of adjacent data pages holding no wanted
    row, filling the run's bytes; the byte ranges of the other pages, to copy.

    A run of pages becomes one page of as many rows: a sorted file's few matching rows leave two
    runs in a chunk of dozens of pages, and the decoder then reads two page headers, not dozens.
    """
    copy: list[tuple[int, int]] = []
    run: list[int] = []  # [offset, bytes, rows] of the current run of pages without a wanted row
    first = 0
    i = 0

    def end_run() -> None:
        stand_in = _null_page(run[2], run[1])
        if stand_in is None:
            _copy(copy, run[0], run[0] + run[1])
        else:
            stand_ins.append((run[0], stand_in))
        run.clear()

    for offset, length, kind, count in pages:
        skip = False
        if kind != _DICTIONARY_PAGE:
            while i < len(wanted) and wanted[i] < first:
                i += 1
            skip = not (i < len(wanted) and wanted[i] < first + count)
            first += count
        if skip and run and run[0] + run[1] == offset:
            run[1] += length
            run[2] += count
            continue
        if run:
            end_run()
        if skip:
            run.extend((offset, length, count))
        else:
            _copy(copy, offset, offset + length)
    if run:
        end_run()
    return copy


def _copy(ranges: list[tuple[int, int]], start: int, end: int) -> None:
    """Add the byte range ``start:end`` to ``ranges``, joined to the last one when they touch."""
    if ranges and ranges[-1][1] == start:
        ranges[-1] = (ranges[-1][0], end)
    else:
        ranges.append((start, end))


def _pages(source: Any, start: int, end: int, rows: int) -> list[tuple[int, int, int, int]] | None:
    """``(offset, bytes, page type, rows)`` of each page of the chunk at ``start:end``; None when a
    header is not understood or the data pages do not add up to the row group's ``rows``."""
    pages = []
    pos = start
    total = 0
    while pos < end:
        probe = _PROBE
        while True:
            data = source.read_at(min(probe, end - pos), pos)
            try:
                header, used = read_struct(data, 0, _WANTED)
                if used > len(data):
                    raise Truncated
                break
            except Truncated:
                if probe >= min(_MAX_HEADER, end - pos):
                    return None
                probe *= 8
            except (IndexError, ValueError, RecursionError):
                return None
        kind, body = header.get(1), header.get(3)
        if kind == _DATA_PAGE:
            count = header.get(5, {}).get(1)
        elif kind == _DATA_PAGE_V2:
            count = header.get(8, {}).get(3)
        elif kind == _DICTIONARY_PAGE:
            count = 0
        else:
            return None
        if body is None or count is None or body < 0 or count < 0:
            return None
        pages.append((pos, used + body, kind, count))
        total += count
        pos += used + body
    return pages if pos == end and total == rows else None


# -- Thrift compact protocol -----------------------------------------------------------------------

@lru_cache(maxsize=4096)
def _null_page(rows: int, slot: int) -> bytes | None:
    """Header and levels of an uncompressed DATA_PAGE_V2 of ``rows`` nulls that fills ``slot`` bytes
    (the page's values, none, are followed by padding never read); None when it does not fit.
    Kept per ``(rows, slot)``: a repeated read of a file's chunk stands in for the same pages."""
    levels, tail = _null_page_parts(rows)
    fixed = len(_V2_TYPE) + len(tail)
    body = slot - fixed
    for _ in range(4):  # the size fields' own length decides the body's: a fixed point in one or two steps
        fitted = slot - fixed - 2 * len(i32_field(1, body))
        if fitted == body:
            break
        body = fitted
    size = i32_field(1, body)
    header = _V2_TYPE + size + size + tail
    if body < len(levels) or len(header) + body != slot:
        return None
    return header + levels


_V2_TYPE = i32_field(1, _DATA_PAGE_V2)


@lru_cache(maxsize=256)
def _null_page_parts(rows: int) -> tuple[bytes, bytes]:
    """The definition levels of a page of ``rows`` nulls, and its header after the two page sizes."""
    levels = uvarint(rows << 1) + b"\x00"  # one RLE run of ``rows`` definition levels 0 (bit width 1)
    v2 = (i32_field(1, rows) + i32_field(1, rows) + i32_field(1, rows) + i32_field(1, 0) + i32_field(1, len(levels)) + i32_field(1, 0)
          + bytes([(1 << 4) | 2]) + b"\x00")  # num_values, num_nulls, num_rows, PLAIN, level lengths, not compressed
    return levels, bytes([(5 << 4) | 12]) + v2 + b"\x00"
