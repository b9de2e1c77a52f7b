"""Unfiltered reads of many local files through Arrow's dataset scanner (READ-6, READ-12, READ-14).

A scan with no filter of many small files spent most of its time on per-file work in
Python around decoding. Here the files that need nothing beyond reading their columns are
handed to Arrow's C++ scanner, a run of consecutive files at a time: each file's footer is
read once (as a dataset fragment, which the scanner reuses), and it takes the fast path only
if

* it passes READ-12: its columns carry field ids, no two the same, and its footer's row
  count is its manifest entry's ``record_count``;
* every projected field is a column of the file stored with the field's type, so the
  read by field id (READ-6) is a read of those columns by their names in the file, with
  nothing added as nulls and nothing widened (:attr:`ReadPlan.as_stored`);
* it has no deletion vector (READ-14).

Every other file, and any file whose footer cannot be read, goes through
:meth:`FileReader.read`, so errors are the same as there (READ-10, READ-12). A run whose
scan fails is read again file by file, raising that file's error. The result is the
per-file path's: the projected columns with the read schema (READ-7), files in plan order,
each file's rows in its order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads

from lakefmt.errors import CorruptDataFileError
from lakefmt.file_layout import Layout, checked
from lakefmt.file_reader import FileReader
from lakefmt.threads import thread_map

# Fragments whose footers are read: pre-buffering the columns of a small file costs more than it saves.
_FORMAT = pads.ParquetFileFormat(default_fragment_scan_options=pads.ParquetFragmentScanOptions(pre_buffer=False))
# Fewer files than this are read file by file: the scanner's start costs more than it saves.
MIN_FILES = 8


def read_unfiltered(reader: FileReader, tasks: Sequence[Any], threads: int) -> list[pa.Table]:
    """The projected rows of each of ``tasks`` (``(data_file, location)`` pairs, in plan order)
    as a list of tables in that order; ``reader`` has no filter and reads local files."""
    fs = reader.io.arrow_fs
    fields = reader.projected.fields
    runs: list[tuple[Layout | None, list[Any]]] = []  # per run of files alike: (layout, fragments) or (None, tasks)
    for task in tasks:
        layout, fragment = _fast(reader, task, fs)
        if runs and runs[-1][0] is layout:
            runs[-1][1].append(fragment if layout is not None else task)
        else:
            runs.append((layout, [fragment if layout is not None else task]))
    tables: list[pa.Table] = []
    start = 0
    for layout, items in runs:
        run_tasks = tasks[start:start + len(items)]
        start += len(items)
        if layout is not None and len(items) >= MIN_FILES:
            plan = layout.plan(fields, False, reader.output)
            try:
                read = pads.FileSystemDataset(items, layout.arrow_schema, _FORMAT, fs).to_table(
                    columns=plan.columns, use_threads=True)
            except (pa.ArrowInvalid, OSError):
                pass  # read file by file below: the failing file raises its own error (READ-10)
            else:
                tables.append(pa.Table.from_arrays(read.columns, schema=reader.output))
                continue
        tables += thread_map(lambda task: reader.read(task.location, expected_rows=task.data_file.record_count,
                                                      data_file=task.data_file), run_tasks, threads)
    return tables


def _fast(reader: FileReader, task: Any, fs: Any) -> tuple[Layout | None, Any]:
    """The file's layout and fragment, footer read, when it can take the fast path; else (None, None)."""
    data_file = task.data_file
    if data_file.deletion_vector is not None:
        return None, None
    try:
        fragment = _FORMAT.make_fragment(reader.io.fs_path(task.location), fs)
        fragment.ensure_complete_metadata()
        footer = fragment.metadata
        layout = checked(reader.layout_of(fragment.physical_schema, footer), footer, task.location,
                         data_file.record_count)
    except (pa.ArrowInvalid, OSError, CorruptDataFileError):
        return None, None  # unreadable or fails READ-12: the per-file read raises the error naming the file
    plan = layout.plan(reader.projected.fields, False, reader.output)
    if not plan.as_stored or not plan.columns:
        return None, None  # columns added or widened since, or none read: the per-file path
    return layout, fragment
