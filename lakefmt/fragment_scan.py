"""Unfiltered reads of many local files through Arrow's dataset scanner (READ-6, READ-12, READ-14, READ-17).

A scan with no filter of many small files spent most of its time on per-file work in
Python around decoding. Here the files that need nothing beyond reading their columns are
handed to Arrow's C++ scanner, a run of consecutive files without a deletion vector
(READ-14) at a time, and each file's footer is read once, by the scanner, in parallel:

1. The layout of the run's first (else last) file is worked out from its footer. It is
   used only if that file passes READ-12 and every projected field is a column of it
   stored with the field's type, so the read by field id (READ-6) is a read of those
   columns by their names in the file, with nothing added as nulls and nothing widened
   (:attr:`ReadPlan.as_stored`).
2. The scanner reads every file of the run with that file's Arrow schema.
3. Before any row is returned, each file's own footer (which the scanner kept in the
   file's fragment) is checked (READ-17): a file whose Arrow schema, field ids included,
   is that layout's passes READ-12's field-id checks as the layout did, and its footer's
   row count must be its manifest entry's ``record_count`` (else
   :class:`CorruptDataFileError`, as file by file). The rows of a file with another
   schema are dropped and the file is read again as described next.

A run goes through the scanner only when it has at least :data:`MIN_FILES` files and
pyarrow.dataset is imported already, or it has :data:`IMPORT_FILES` files (:func:`use_scanner`).

Files read again, and runs where step 1 or 2 fails (a file unreadable, no usable layout),
are grouped by their own layouts as before: runs of files passing those checks go through
the scanner with their layout, every other file through :meth:`FileReader.read`, so errors
are the same as there (READ-10, READ-12). A scan that fails there is read again file by
file, raising that file's error. The result is the per-file path's: the projected columns
with the read schema (READ-7), files in plan order, each file's rows in its order.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from lakefmt.errors import CorruptDataFileError
from lakefmt.file_layout import Layout, checked
from lakefmt.file_reader import FileReader
from lakefmt.gc_pause import gc_paused
from lakefmt.threads import thread_map

# Fewer files than this are read file by file: the scanner's start costs more than it saves.
MIN_FILES = 8
# Unless pyarrow.dataset is imported already, fewer files than this are read file by file: importing
# it imports pandas when installed (0.3-0.4 s), more than the scanner saves on such a scan (measured
# on a loaded 2-core machine, files of 250 rows: 2,000 files 1.5 s through the scanner, 1.6 s file
# by file; 10,000 files 6.6 s and 6.5 s).
IMPORT_FILES = 4096

_format: Any = None


def _parquet_format() -> Any:
    """Arrow's Parquet format for fragments, without pre-buffering (it costs a small file more than it saves).

    pyarrow.dataset is imported here, not with this module: importing it imports pandas when
    pandas is installed (~0.3 s), which a process that never scans many files need not pay.
    """
    global _format
    if _format is None:
        import pyarrow.dataset as pads  # see the docstring: only a scan of many files needs it

        _format = pads.ParquetFileFormat(default_fragment_scan_options=pads.ParquetFragmentScanOptions(pre_buffer=False))
    return _format


def use_scanner(files: int) -> bool:
    """Whether a run of ``files`` files without deletion vectors goes through Arrow's scanner."""
    return files >= MIN_FILES and ("pyarrow.dataset" in sys.modules or files >= IMPORT_FILES)


def read_unfiltered(reader: FileReader, tasks: Sequence[Any], threads: int) -> list[pa.Table]:
    """The projected rows of each of ``tasks`` (``(data_file, location)`` pairs, in plan order)
    as a list of tables in that order; ``reader`` has no filter and reads local files."""
    tables: list[pa.Table] = []
    start = 0
    while start < len(tasks):
        plain = tasks[start].data_file.deletion_vector is None
        end = start + 1
        while end < len(tasks) and (tasks[end].data_file.deletion_vector is None) == plain:
            end += 1
        run = tasks[start:end]
        start = end
        if plain and use_scanner(len(run)):
            tables += _read_run(reader, run, threads)
        else:
            tables += _read_each(reader, run, threads)  # a deletion vector is applied file by file (READ-14)
    return tables


def _read_run(reader: FileReader, run: Sequence[Any], threads: int) -> list[pa.Table]:
    """Files without deletion vectors: one scan with a layout found up front, checked file by file after."""
    fs, fs_path, make_fragment = reader.io.arrow_fs, reader.io.fs_path, _parquet_format().make_fragment
    with gc_paused():  # a wrapper object or two per file, kept until the end (lakefmt.gc_pause)
        fragments = [make_fragment(fs_path(task.location), fs) for task in run]
    layout = next((found for found in (_fast(reader, run[i], fragments[i])[0] for i in (0, -1)) if found), None)
    table = _scan(reader, layout, fragments) if layout is not None else None
    if table is None:
        return _read_by_layout(reader, run, fragments, threads)
    with gc_paused():
        footers = [fragment.metadata for fragment in fragments]  # kept by the scanner: no I/O
        counts = [footer.num_rows for footer in footers]
        alike = [same_schema(fragment, footer, layout) for fragment, footer in zip(fragments, footers)]
    if sum(counts) != table.num_rows:  # not the files' rows: read by layout
        return _read_by_layout(reader, run, fragments, threads)
    if all(alike) and counts == [task.data_file.record_count for task in run]:
        return [table]  # every file has the layout, which passed READ-12's field-id checks (_fast), and its rows
    pieces: list[pa.Table] = []
    offset = start = 0  # rows of the files before this one; of those before the current stretch
    other: list[int] = []  # files of another schema since the last stretch of files alike
    for i, (task, footer, rows, same) in enumerate(zip(run, footers, counts, alike)):
        if same:
            if other:  # read before this file is checked: errors come in plan order
                pieces += _read_by_layout(reader, [run[j] for j in other], [fragments[j] for j in other], threads)
                other, start = [], offset
            if rows != task.data_file.record_count:  # the layout passed READ-12's field-id checks (_fast)
                checked(layout, footer, task.location, task.data_file.record_count)  # READ-12, READ-17
        else:  # another schema: its rows as scanned are dropped, the file is read again by its own layout
            if not other and offset > start:
                pieces.append(table.slice(start, offset - start))
            other.append(i)
        offset += rows
    if not other and not pieces:
        return [table]
    if other:
        pieces += _read_by_layout(reader, [run[j] for j in other], [fragments[j] for j in other], threads)
    else:
        pieces.append(table.slice(start, offset - start))
    return pieces


def same_schema(fragment: Any, footer: Any, layout: Layout) -> bool:
    """Whether the file has ``layout``'s schema, field ids included (READ-17).

    Compared as the Parquet schema, which holds the field ids Arrow reads into
    ``PARQUET:field_id``, and the Arrow schema without metadata (names, types, nullability).
    Arrow derives a file's Arrow schema from its Parquet schema and its key-value metadata
    (``ARROW:schema``) alone, so a file whose Parquet schema and key-value metadata are the
    layout file's has its Arrow schema, which is then not compared: comparing Arrow schemas
    computes each file's schema fingerprint (10,000 small files: ~50 ms of the check's ~90 ms;
    with metadata, 110-135 ms). Other metadata does not change the rows read.
    """
    return footer.schema.equals(layout.parquet_schema) and (
        footer.metadata == layout.key_value_metadata or fragment.physical_schema.equals(layout.arrow_schema))


def _scan(reader: FileReader, layout: Layout, fragments: Sequence[Any]) -> pa.Table | None:
    """``fragments`` read by Arrow's scanner with ``layout``'s schema; None if the scan fails."""
    import pyarrow.dataset as pads  # imported by _parquet_format already (see there)

    plan = layout.plan(reader.projected.fields, False, reader.output)
    output = reader.output
    # The result's columns are the files' columns of the same names: the scan reads them with the result's schema,
    # every column read, without a projection step (~5% of the scanner's CPU on 10,000 small files) or a
    # conversion of the result after (~60 ms on 10,000 files). Else columns renamed since are read by their names
    # in the files and the result is given the result's schema after.
    renamed = plan.columns != output.names
    schema = layout.arrow_schema if renamed else output
    columns = (None if plan.columns == layout.arrow_schema.names else plan.columns) if renamed else None
    try:
        read = pads.FileSystemDataset(list(fragments), schema, _parquet_format(),
                                      reader.io.arrow_fs).to_table(columns=columns, use_threads=True)
    except (pa.ArrowInvalid, OSError):
        return None  # read again by layout: the failing file raises its own error (READ-10)
    return pa.Table.from_arrays(read.columns, schema=output) if renamed else read


def _read_by_layout(reader: FileReader, run: Sequence[Any], fragments: Sequence[Any], threads: int
                    ) -> list[pa.Table]:
    """Consecutive files of one layout read by one scan, each other file by :meth:`FileReader.read`."""
    thread_map(_read_footer, fragments, threads)  # footers not read yet are read in parallel
    groups: list[tuple[Layout | None, list[int]]] = []  # (layout, indices) per run of files alike
    for i, (task, fragment) in enumerate(zip(run, fragments)):
        layout, _ = _fast(reader, task, fragment)
        if groups and groups[-1][0] is layout:
            groups[-1][1].append(i)
        else:
            groups.append((layout, [i]))
    tables: list[pa.Table] = []
    for layout, indices in groups:
        if layout is not None and len(indices) >= MIN_FILES:
            table = _scan(reader, layout, [fragments[i] for i in indices])
            if table is not None:
                tables.append(table)
                continue
        tables += _read_each(reader, [run[i] for i in indices], threads)
    return tables


def _read_footer(fragment: Any) -> None:
    try:
        fragment.ensure_complete_metadata()
    except (pa.ArrowInvalid, OSError):
        pass  # the file is read by itself, which raises the error naming it (READ-10)


def _read_each(reader: FileReader, tasks: Sequence[Any], threads: int) -> list[pa.Table]:
    """Each file read by itself (READ-6, READ-10, READ-12, READ-14)."""
    return thread_map(lambda task: reader.read(task.location, expected_rows=task.data_file.record_count,
                                               data_file=task.data_file), tasks, threads)


def _fast(reader: FileReader, task: Any, fragment: Any) -> tuple[Layout | None, Any]:
    """The file's layout and fragment, footer read, when it can take the fast path; else (None, None)."""
    if task.data_file.deletion_vector is not None:
        return None, None
    try:
        fragment.ensure_complete_metadata()
        footer = fragment.metadata
        layout = checked(reader.layout_of(fragment.physical_schema, footer), footer, task.location,
                         task.data_file.record_count)
    except (pa.ArrowInvalid, OSError, CorruptDataFileError):
        return None, None  # unreadable or fails READ-12: the per-file read raises the error naming the file
    plan = layout.plan(reader.projected.fields, False, reader.output)
    if not plan.as_stored or not plan.columns:
        return None, None  # columns added or widened since, or none read: the per-file path
    return layout, fragment
