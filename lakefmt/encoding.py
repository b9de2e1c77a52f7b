"""Which Parquet encoding each column of a data file gets (WRITE-7).

pyarrow dictionary-encodes every column by default and falls back to plain encoding
only once a row group's dictionary page passes 1 MiB. For a column whose values are
nearly all distinct — timestamps in microseconds, sequence numbers, measured doubles —
the dictionary never pays: the writer hashes every value, stores each one in the
dictionary *and* an index per row, then usually falls back anyway. Measured on one
partition of 4.8 million Artemis-like rows (pyarrow 26, ZSTD 3): with a dictionary,
``ts``, ``seq`` and ``value`` wrote 35-60% slower and 4-26% larger than plain + ZSTD,
while ``mission_id`` and ``sensor_kind`` wrote 2-3x smaller with one. Near-unique
integers and timestamps (``ts``, ``seq``) are written ``DELTA_BINARY_PACKED``: on the
same rows, 22% less write CPU and 10% fewer bytes than plain, because ZSTD then
compresses small deltas instead of 8-byte values. Some columns ZSTD cannot shrink at
all: random doubles (``value``, 6% saved) and delta-packed timestamps that arrive in
random order within a window (``ts``, 0% saved) cost half of their write time in ZSTD
for that, so a column saving less than :data:`MIN_ZSTD_SAVING` in a trial write of the
sample is stored uncompressed: 15% less CPU for a whole bin-pack rewrite (reading and
verifying included) for 3% more bytes on that data. ZSTD compresses each data page on its
own, so the trial writes each column's first rows only up to :data:`TRIAL_PAGES` pages of
the file's page size (halving the sample down to 1,024 rows): the telemetry dataset's
200-byte strings are tried on 4,096 rows, narrow columns on the whole sample, and the trial
of a telemetry sample costs 8 ms of CPU instead of 29 (pyarrow 26). The trial is made only
when at least :data:`MEASURE_MIN_ROWS` (two samples' worth) are written with the choice: the
rows arriving at once, or all the rows of a compaction run, which shares its choice
(:class:`SharedChoice`). For a smaller write the trial costs about what it saves, and
compressing a small file's incompressible column costs little; for a run of three
20,000-row telemetry groups it pays: each group's output is written in 14 ms of CPU
instead of 38.

The same trial is written once more at ZSTD level :data:`FAST_ZSTD_LEVEL` when the level
asked for is higher, and a column that the fast level stores in no more bytes than the level
asked for is compressed at the fast level (WRITE-12). Measured on the telemetry dataset's
200-byte ``payload`` strings (500,000 rows, pyarrow 26, 256 KiB pages): level 1 stored them
in 42.1 MB with 0.24-0.30 s of CPU, level 3 in 44.2 MB with 0.55-0.63 s; about a quarter of
the CPU of a bin-pack rewrite of that data. The second trial costs a few milliseconds a choice.

:func:`choose_encodings` decides per column from a sample of the rows: a top-level
column keeps its dictionary unless at least :data:`HIGH_CARDINALITY_RATIO` of the
sample's non-null values are distinct (the first 16,384 rows: counting the distinct
values of 65,536 timestamps cost 5 ms, a few percent of a compaction group). Such a
column's dictionary would hold nearly every value of a row group: at 131,072 rows per
row group, 1 MiB of 8-byte values, the page size at which pyarrow gives up on it anyway.
Nested columns, booleans, columns that arrive as Arrow dictionaries and samples too
small to tell keep pyarrow's default (a dictionary). The choice changes only
the encoding, never a value; every encoding used is in the Parquet format
specification and read by pyarrow, DuckDB, Spark (3.3 and later), Trino and delta-rs.

Example:
    >>> choose_encodings(table)
    Encodings(use_dictionary=['mission_id', 'payload_id', 'sensor_kind'],
              column_encoding={'ts': 'DELTA_BINARY_PACKED', 'seq': 'DELTA_BINARY_PACKED'})
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefmt.arrow_values import empty_table

SAMPLE_ROWS = 16_384
MEASURE_MIN_ROWS = 2 * SAMPLE_ROWS  # fewer rows written with a choice: no trial write (every column ZSTD)
MIN_SAMPLE_ROWS = 1_024
TRIAL_PAGES = 4  # a trial write measures at most this many data pages of each column
TRIAL_PAGE_BYTES = 1024 * 1024  # the page size assumed when none is given (pyarrow's default)
HIGH_CARDINALITY_RATIO = 0.9
MIN_ZSTD_SAVING = 0.1
FAST_ZSTD_LEVEL = 1  # tried against a higher level asked for (WRITE-12)


@dataclass(frozen=True)
class Encodings:
    """pyarrow's ``use_dictionary``, ``column_encoding`` and ``compression`` for one file's columns."""

    use_dictionary: bool | list[str] = True
    column_encoding: dict[str, str] | None = None
    compression: str | dict[str, str] = "zstd"  # pyarrow's: one codec, or one per leaf path
    fast: tuple[str, ...] = ()  # leaf paths compressed at FAST_ZSTD_LEVEL at most (WRITE-12)

    def compression_level(self, level: int) -> int | dict[str, int]:
        """pyarrow's ``compression_level``: ``level`` for every ZSTD column (none for uncompressed
        ones), at most :data:`FAST_ZSTD_LEVEL` for the ``fast`` ones."""
        if isinstance(self.compression, str):
            return level
        return {path: min(level, FAST_ZSTD_LEVEL) if path in self.fast else level
                for path, codec in self.compression.items() if codec == "zstd"}


DEFAULT = Encodings()


def high_cardinality(column: pa.Array | pa.ChunkedArray) -> bool:
    """Whether at least :data:`HIGH_CARDINALITY_RATIO` of the non-null values of a sample are distinct."""
    non_null = len(column) - column.null_count
    if non_null < MIN_SAMPLE_ROWS or pa.types.is_dictionary(column.type):
        return False
    try:
        # The distinct values themselves, not count_distinct: the same hash kernel and count, in
        # half the CPU on 16,384 strings of 200 bytes (2.5 ms against 1.2 ms, pyarrow 26).
        values = pc.unique(column)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return False  # a type the hash kernel does not know: keep pyarrow's default
    distinct = len(values) - values.null_count  # null, when present, is one entry of its own
    return distinct >= HIGH_CARDINALITY_RATIO * non_null


def _leaves(dtype: pa.DataType) -> int:
    """How many Parquet leaf columns a column of ``dtype`` writes."""
    if pa.types.is_struct(dtype):
        return sum(_leaves(dtype.field(i).type) for i in range(dtype.num_fields))
    if pa.types.is_map(dtype):
        return _leaves(dtype.key_type) + _leaves(dtype.item_type)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype):
        return _leaves(dtype.value_type)
    return 1


@lru_cache(maxsize=64)
def leaf_paths(schema: pa.Schema) -> tuple[tuple[int, str], ...]:
    """``(top-level column index, Parquet leaf path)`` for every leaf column ``schema`` writes.

    Cached by schema: a table's writers ask for the same few schemas again and again.
    """
    sink = pa.BufferOutputStream()
    pq.write_table(empty_table(schema), sink)
    parquet_schema = pq.read_metadata(pa.BufferReader(sink.getvalue())).schema
    owners = [i for i, field in enumerate(schema) for _ in range(_leaves(field.type))]
    return tuple((owners[i], parquet_schema.column(i).path) for i in range(len(parquet_schema)))


def _delta_packable(dtype: pa.DataType) -> bool:
    """Stored as Parquet INT32 or INT64, the physical types DELTA_BINARY_PACKED encodes."""
    return (pa.types.is_int32(dtype) or pa.types.is_int64(dtype) or pa.types.is_date32(dtype)
            or pa.types.is_timestamp(dtype) or pa.types.is_time32(dtype) or pa.types.is_time64(dtype))


def choose_encodings(sample: pa.Table, compression_level: int = 3,
                     min_saving: float = MIN_ZSTD_SAVING, page_size: int | None = None, *,
                     rows: int = 0) -> Encodings:
    """The encodings for a file whose rows look like ``sample`` (its first rows are used).

    Every column keeps its dictionary except the high-cardinality top-level primitive
    ones, which are written plain, or ``DELTA_BINARY_PACKED`` when stored as integers;
    of those, the ones ZSTD does not shrink by ``min_saving`` (the table's
    ``write.parquet.min-compression-saving``; 0 compresses every column) are stored
    uncompressed, and those that :data:`FAST_ZSTD_LEVEL` stores in no more bytes than
    ``compression_level`` get the fast level (:func:`measure_zstd`, with data pages of
    ``page_size`` as the file will have; WRITE-12), measured only when ``sample`` or ``rows``
    (all the rows the choice will be used for) reaches :data:`MEASURE_MIN_ROWS`.
    """
    measure = worth_measuring(max(sample.num_rows, rows), compression_level, min_saving)
    sample = sample.slice(0, SAMPLE_ROWS)
    plain = {i for i, (field, column) in enumerate(zip(sample.schema, sample.columns))
             if not pa.types.is_nested(field.type) and not pa.types.is_boolean(field.type)
             and high_cardinality(column)}
    if not plain:
        return DEFAULT
    leaves = leaf_paths(sample.schema)
    dictionary = [path for owner, path in leaves if owner not in plain]
    delta = {sample.schema.field(i).name: "DELTA_BINARY_PACKED" for i in sorted(plain)
             if _delta_packable(sample.schema.field(i).type)}
    raw, fast = measure_zstd(sample.select(sorted(plain)), delta, compression_level, min_saving, page_size) \
        if measure else ((), ())
    compression = {path: "none" if path in raw else "zstd" for _, path in leaves} if raw or fast else "zstd"
    return Encodings(dictionary, delta or None, compression, fast)


def worth_measuring(rows: int, compression_level: int, min_saving: float) -> bool:
    """Whether a choice serving ``rows`` rows makes the trial write (WRITE-7, WRITE-12)."""
    return (min_saving > 0 or compression_level > FAST_ZSTD_LEVEL) and rows >= MEASURE_MIN_ROWS


def incompressible(columns: pa.Table, column_encoding: dict[str, str], compression_level: int,
                   min_saving: float = MIN_ZSTD_SAVING) -> tuple[str, ...]:
    """The columns of ``columns`` (plain or delta-encoded) that ZSTD shrinks by less than
    ``min_saving``, measured by writing them once with ZSTD."""
    return tuple(path for path, (stored, raw) in _zstd_sizes(columns, column_encoding, compression_level).items()
                 if raw and stored > (1 - min_saving) * raw)


def measure_zstd(columns: pa.Table, column_encoding: dict[str, str], compression_level: int,
                 min_saving: float = MIN_ZSTD_SAVING, page_size: int | None = None
                 ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(raw, fast)`` leaf paths of ``columns``: those ZSTD shrinks by less than ``min_saving`` at
    ``compression_level`` (stored uncompressed, WRITE-7; none when ``min_saving`` is 0), and of the
    others those that :data:`FAST_ZSTD_LEVEL` stores in no more bytes than ``compression_level``
    (WRITE-12), each measured by writing ``columns`` once with pages of ``page_size``."""
    asked = _zstd_sizes(columns, column_encoding, compression_level, page_size)
    raw = tuple(path for path, (stored, total) in asked.items()
                if min_saving > 0 and total and stored > (1 - min_saving) * total)
    if compression_level <= FAST_ZSTD_LEVEL or len(raw) == len(asked):
        return raw, ()
    quick = _zstd_sizes(columns.select([p for p in asked if p not in raw]), column_encoding, FAST_ZSTD_LEVEL,
                        page_size)
    return raw, tuple(path for path, (stored, _) in quick.items() if stored <= asked[path][0])


def _zstd_sizes(columns: pa.Table, column_encoding: dict[str, str], level: int, page_size: int | None = None
                ) -> dict[str, tuple[int, int]]:
    """``{leaf path: (compressed bytes, uncompressed bytes)}`` of ``columns`` written with ZSTD at
    ``level``, without dictionaries (top-level primitive columns: one leaf each, named as the
    column), each column's rows cut to :func:`_trial_rows`; one write per row count."""
    by_rows: dict[int, list[str]] = {}
    for name, column in zip(columns.column_names, columns.columns):
        by_rows.setdefault(_trial_rows(column, page_size), []).append(name)
    out = {}
    for rows, names in by_rows.items():
        sink = pa.BufferOutputStream()
        pq.write_table(columns.select(names).slice(0, rows), sink, compression="zstd", compression_level=level,
                       use_dictionary=False, store_schema=False,
                       column_encoding={k: v for k, v in column_encoding.items() if k in names} or None,
                       **({"data_page_size": page_size} if page_size else {}))
        footer = pq.read_metadata(pa.BufferReader(sink.getvalue()))
        for i in range(footer.num_columns):
            chunks = [footer.row_group(g).column(i) for g in range(footer.num_row_groups)]
            out[chunks[0].path_in_schema] = (sum(c.total_compressed_size for c in chunks),
                                             sum(c.total_uncompressed_size for c in chunks))
    return {name: out[name] for name in columns.column_names}


def _trial_rows(column: pa.ChunkedArray, page_size: int | None) -> int:
    """The rows of ``column`` a trial write takes: all of them, halved while they hold more than
    :data:`TRIAL_PAGES` pages of ``page_size`` (down to :data:`MIN_SAMPLE_ROWS`). ZSTD compresses
    page by page, so more pages of alike rows measure the same ratio at more cost."""
    rows = len(column)
    budget = TRIAL_PAGES * (page_size or TRIAL_PAGE_BYTES)
    per_row = column.nbytes / max(rows, 1)
    while rows > MIN_SAMPLE_ROWS and rows * per_row > budget:
        rows //= 2
    return max(rows, min(len(column), MIN_SAMPLE_ROWS))


class SharedChoice:
    """One choice of encodings for all the files an operation writes with one Arrow schema and one
    set of options: the first file's, chosen from its first rows (WRITE-7, WRITE-11; a compaction
    run's outputs, COMPACT-16).

    ``rows`` is how many rows the operation writes in all: the trial write (WRITE-7, WRITE-12)
    is made once they reach :data:`MEASURE_MIN_ROWS`, however few rows the first file has. A
    file whose first rows are too few to tell (under :data:`MIN_SAMPLE_ROWS`) or to measure
    compression takes only a choice made from as few rows: a small group's choice never stands
    for a large one's. Thread-safe: a writer that asks while another chooses waits for that
    choice instead of sampling its own rows. On a run of 3 groups of 20,000 telemetry rows,
    choosing costs about 7 ms of CPU without the trial and 27 ms with it, once per run (pyarrow
    26, 2 shared cores, medians of 14 calls in one process; a process's first call cost 37-80 ms,
    its distinct counts about twice a later call's).

    Example:
        >>> shared = SharedChoice(rows=60_000)
        >>> shared.choose(first_rows, 3, 0.1) is shared.choose(other_rows, 3, 0.1)
        True
    """

    def __init__(self, rows: int = 0) -> None:
        self.rows = rows
        self._lock = threading.Lock()
        self._chosen: dict[tuple[pa.Schema, int, float, int | None, int], Future[Encodings]] = {}

    def choose(self, sample: pa.Table, compression_level: int = 3, min_saving: float = MIN_ZSTD_SAVING,
               page_size: int | None = None) -> Encodings:
        """The encodings chosen for the first sample of ``sample``'s schema, size class and options."""
        enough = sample.num_rows >= MIN_SAMPLE_ROWS
        measured = enough and worth_measuring(max(sample.num_rows, self.rows), compression_level, min_saving)
        key = (sample.schema, compression_level, min_saving, page_size, enough + measured)
        with self._lock:
            chosen = self._chosen.get(key)
            first = chosen is None
            if first:
                chosen = self._chosen[key] = Future()
        if first:  # this writer chooses; the others wait for its result (or its error)
            try:
                chosen.set_result(choose_encodings(sample, compression_level, min_saving, page_size,
                                                   rows=self.rows if measured else 0))
            except BaseException as exc:  # noqa: BLE001 - handed to every writer waiting for this choice
                chosen.set_exception(exc)
        return chosen.result()
