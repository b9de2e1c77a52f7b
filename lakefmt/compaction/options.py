"""Compaction properties and their defaults, in one place (spec/compaction.md §Properties, COMPACT-1).

Every knob is a table property (``compaction.*``) with a default here; a call may
override any of them. :func:`resolve_options` turns properties plus overrides into
one frozen :class:`CompactionOptions`, refusing bad values with
:class:`~lakefmt.errors.ValidationError` that names the property.

Example:
    >>> opts = resolve_options(t.properties, min_age_seconds=0)
    >>> opts.small_file_threshold
    100663296
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from lakefmt.compaction.pacing import parse_quiet_windows
from lakefmt.errors import ValidationError
from lakefmt.properties import (
    COMPRESSION_LEVEL,
    TARGET_FILE_SIZE,
    MiB,
    Property,
    int_property,
    number_property,
)

Strategy = Literal["binpack", "sort", "zorder"]
STRATEGIES: tuple[str, ...] = ("binpack", "sort", "zorder")
GiB = 1024 * MiB

TARGET_FILE_SIZE_BYTES = Property(
    "compaction.target-file-size-bytes", 128 * MiB, 1, None,
    "Size compaction output files roll at; falls back to write.target-file-size-bytes when unset.")
SMALL_FILE_THRESHOLD_RATIO = Property(
    "compaction.small-file-threshold-ratio", 0.75, 0.0, 1.0,
    "A file is a candidate when smaller than this fraction of the target size.")
MIN_INPUT_FILES = Property(
    "compaction.min-input-files", 5, 1, None, "Fewest candidate files a partition (and a group) needs.")
MAX_GROUP_SIZE_BYTES = Property(
    "compaction.max-group-size-bytes", 1 * GiB, 1, None,
    "Most input bytes one group rewrites: bounds the memory and I/O of one rewrite.")
MIN_AGE_SECONDS = Property(
    "compaction.min-age-seconds", 3600, 0, None,
    "A partition whose newest ingested file is younger than this is still open and is skipped (0: never).")
MAX_CONCURRENT_GROUPS = Property(
    "compaction.max-concurrent-groups", 0, 0, 64,
    "Group rewrites running at once in one process; 0 (the default): 4 for binpack, 2 for sort and zorder.")
BINPACK_GROUPS_AT_ONCE = 4  # a bin-pack streams: a group holds about a row group of rows (COMPACT-13)
REORDER_GROUPS_AT_ONCE = 2  # a sort or Z-order group holds up to sort-memory-bytes (COMPACT-36)
READ_BANDWIDTH_MB_PER_S = Property(
    "compaction.read-bandwidth-mb-per-s", 0, 0, None,
    "Read budget of one compaction run in MB/s (10^6 bytes); 0 means unlimited.")
QUIET_WINDOWS = Property(
    "compaction.quiet-windows", "",
    doc="UTC windows in which scheduled runs do nothing, e.g. '09:00-17:00,22:00-23:00'.")
ZSTD_LEVEL = Property("compaction.zstd-level", 3, 1, 22, "ZSTD level of compaction outputs.")
LEASE_SECONDS = Property(
    "compaction.lease-seconds", 900, 1, None,
    "Lifetime of a partition lease; renewed before every commit, taken over once expired.")
VERIFY = Property(
    "compaction.verify", "written",
    doc="How outputs are checked against inputs (COMPACT-17): 'written' hashes the rows handed to the writer "
        "and reads the footers back; 'read-back' also decodes and hashes the outputs from storage.")
VERIFY_MODES = ("written", "read-back")
SORTED_ROW_GROUP_ROWS = Property(
    "compaction.sorted-row-group-rows", 16_384, 1, None,
    "Rows per Parquet row group of sort and Z-order outputs: small row groups let selective "
    "reads skip all but a few rows of a clustered file.")
SORTED_PAGE_SIZE_BYTES = Property(
    "compaction.sorted-page-size-bytes", 64 * 1024, 1024, None,
    "Data page size of sort and Z-order outputs (WRITE-10): a selective read of clustered rows decodes "
    "one small page of a wide column instead of a large one.")
SORT_MEMORY_BYTES = Property(
    "compaction.sort-memory-bytes", 256 * MiB, 1, None,
    "Bytes of rows a sort or Z-order rewrite reorders in memory at once: a larger group is "
    "ordered in key ranges spilled to local disk (COMPACT-36), so memory does not grow with the group.")
DELETE_RATIO_THRESHOLD = Property(
    "compaction.delete-ratio-threshold", 0.3, 0.0, 1.0,
    "A file whose deletion vector deletes at least this fraction of its rows is a candidate even when "
    "large or alone in its partition (COMPACT-35); greater than 0, at most 1.")

COMPACTION_PROPERTIES = (TARGET_FILE_SIZE_BYTES, SMALL_FILE_THRESHOLD_RATIO, MIN_INPUT_FILES,
                         MAX_GROUP_SIZE_BYTES, MIN_AGE_SECONDS, MAX_CONCURRENT_GROUPS,
                         READ_BANDWIDTH_MB_PER_S, QUIET_WINDOWS, ZSTD_LEVEL, LEASE_SECONDS, VERIFY,
                         SORTED_ROW_GROUP_ROWS, SORTED_PAGE_SIZE_BYTES, DELETE_RATIO_THRESHOLD,
                         SORT_MEMORY_BYTES)


@dataclass(frozen=True)
class CompactionOptions:
    """The resolved knobs of one compaction run (COMPACT-1). Plain data: picklable."""

    target_file_size: int = 128 * MiB
    small_file_ratio: float = 0.75
    min_input_files: int = 5
    max_group_size: int = 1 * GiB
    min_age_seconds: float = 3600
    max_concurrent_groups: int = 0  # 0: by strategy (groups_at_once)
    read_mb_per_s: float = 0.0
    quiet_windows: str = ""
    zstd_level: int = 3
    lease_seconds: float = 900
    verify: str = "written"
    sorted_row_group_rows: int = 16_384
    sorted_page_size_bytes: int = 64 * 1024
    delete_ratio_threshold: float = 0.3
    sort_memory_bytes: int = 256 * MiB

    def groups_at_once(self, strategy: str) -> int:
        """Group rewrites a run of ``strategy`` may have running at once (COMPACT-27):
        ``max_concurrent_groups``, or when it is 0 the strategy's default. A bin-pack streams its
        rows (COMPACT-13), so a group costs little memory, and more groups at once keep the cores
        busy when groups are small: with 2, a run of three small partitions rewrote the last one
        alone on one core. A sort or Z-order group holds up to ``sort_memory_bytes`` (COMPACT-36).
        """
        if self.max_concurrent_groups:
            return self.max_concurrent_groups
        return BINPACK_GROUPS_AT_ONCE if strategy == "binpack" else REORDER_GROUPS_AT_ONCE

    @property
    def small_file_threshold(self) -> int:
        """Files of at least this many bytes are left alone (COMPACT-4)."""
        return int(self.target_file_size * self.small_file_ratio)


_BY_FIELD: dict[str, Property] = {
    "target_file_size": TARGET_FILE_SIZE_BYTES, "small_file_ratio": SMALL_FILE_THRESHOLD_RATIO,
    "min_input_files": MIN_INPUT_FILES, "max_group_size": MAX_GROUP_SIZE_BYTES,
    "min_age_seconds": MIN_AGE_SECONDS, "max_concurrent_groups": MAX_CONCURRENT_GROUPS,
    "read_mb_per_s": READ_BANDWIDTH_MB_PER_S, "quiet_windows": QUIET_WINDOWS, "zstd_level": ZSTD_LEVEL,
    "lease_seconds": LEASE_SECONDS, "verify": VERIFY,
    "sorted_row_group_rows": SORTED_ROW_GROUP_ROWS, "sorted_page_size_bytes": SORTED_PAGE_SIZE_BYTES,
    "delete_ratio_threshold": DELETE_RATIO_THRESHOLD,
    "sort_memory_bytes": SORT_MEMORY_BYTES,
}
_INTEGERS = {"target_file_size", "min_input_files", "max_group_size", "max_concurrent_groups", "zstd_level",
             "sorted_row_group_rows", "sorted_page_size_bytes", "sort_memory_bytes"}


def resolve_options(properties: Mapping[str, str], **overrides: Any) -> CompactionOptions:
    """Options from table properties, with ``overrides`` (non-None) taking precedence (COMPACT-1).

    The target size falls back to ``write.target-file-size-bytes`` and the ZSTD level to
    ``write.parquet.compression-level`` when the ``compaction.*`` property is not set.
    """
    unknown = set(overrides) - set(_BY_FIELD)
    if unknown:
        raise ValidationError(f"unknown compaction option(s) {sorted(unknown)}; known: {sorted(_BY_FIELD)}")
    props = dict(properties)
    if TARGET_FILE_SIZE_BYTES.name not in props and TARGET_FILE_SIZE.name in props:
        props[TARGET_FILE_SIZE_BYTES.name] = props[TARGET_FILE_SIZE.name]
    if ZSTD_LEVEL.name not in props and COMPRESSION_LEVEL.name in props:
        props[ZSTD_LEVEL.name] = props[COMPRESSION_LEVEL.name]
    values: dict[str, Any] = {}
    for f in fields(CompactionOptions):
        prop = _BY_FIELD[f.name]
        override = overrides.get(f.name)
        if f.name == "quiet_windows":
            text = override if override is not None else props.get(prop.name, prop.default)
            parse_quiet_windows(str(text))
            values[f.name] = str(text)
        elif f.name == "verify":
            mode = str(override if override is not None else props.get(prop.name, prop.default)).strip().lower()
            if mode not in VERIFY_MODES:
                raise ValidationError(f"{prop.name} must be one of {', '.join(VERIFY_MODES)}, not {mode!r}")
            values[f.name] = mode
        elif f.name in _INTEGERS:
            values[f.name] = int_property(props, prop, override)
        elif f.name == "delete_ratio_threshold":
            ratio = number_property(props, prop, override)
            if ratio <= 0:  # 0 would make every file a candidate (COMPACT-35)
                raise ValidationError(f"property {prop.name} must be > 0 and <= 1, got "
                                      f"{override if override is not None else props.get(prop.name)!r}")
            values[f.name] = ratio
        else:
            values[f.name] = number_property(props, prop, override)
    return CompactionOptions(**values)
