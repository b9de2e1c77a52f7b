"""Table properties: every name and default in one place (spec/metadata.md §Properties, META-12).

Properties are strings in metadata. :func:`int_property` and friends parse them and
refuse bad values with :class:`ValidationError` naming the property.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lakefmt.errors import ValidationError

MiB = 1024 * 1024


@dataclass(frozen=True)
class Property:
    name: str
    default: int | float | str
    minimum: float | None = None
    maximum: float | None = None
    doc: str = ""


TARGET_FILE_SIZE = Property("write.target-file-size-bytes", 128 * MiB, 1, None,
                            "Writers roll data files when this many bytes have been written.")
COMPRESSION_LEVEL = Property("write.parquet.compression-level", 1, 1, 22,
                             "ZSTD level of data files a write makes (compaction: compaction.zstd-level).")
ROW_GROUP_ROWS = Property("write.parquet.row-group-rows", 131_072, 1, None, "Rows per Parquet row group.")
PAGE_SIZE_BYTES = Property("write.parquet.page-size-bytes", 256 * 1024, 1024, None,
                           "A data page ends once its values pass this many bytes (WRITE-10): a wide column "
                           "gets pages of a few thousand rows, which selective reads skip (READ-15).")
MIN_COMPRESSION_SAVING = Property("write.parquet.min-compression-saving", 0.1, 0, 1,
                                  "Columns ZSTD shrinks by less than this fraction are stored uncompressed "
                                  "(WRITE-7); 0 compresses every column.")
COMMIT_RETRIES = Property("commit.retry.num-retries", 20, 0, 1000, "CAS retries before giving up.")
COMMIT_MIN_WAIT_MS = Property("commit.retry.min-wait-ms", 5, 0, None, "First retry back-off.")
COMMIT_MAX_WAIT_MS = Property("commit.retry.max-wait-ms", 2000, 0, None, "Largest retry back-off.")
METADATA_PREVIOUS_MAX = Property("write.metadata.previous-versions-max", 100, 1, None,
                                 "Entries kept in the metadata log.")
INLINE_SNAPSHOTS_MAX = Property("write.metadata.inline-snapshots-max", 100, 1, None,
                                 "Format version 2: snapshots kept in the metadata file; older ones move to "
                                 "history files in runs of half this many (META-17).")
MANIFEST_TARGET_SIZE = Property("write.manifest.target-size-bytes", 8 * MiB, 1, None,
                                "Target size of manifests written by manifest compaction.")
WRITE_LEASE_SECONDS = Property("write.lease-seconds", 3600, 1, None,
                               "Lifetime of a writer's write-intent lease (CAT-10); renewed at half-life.")
MANIFEST_MIN_MERGE_COUNT = Property("commit.manifest.min-count-to-merge", 10, 0, None,
                                    "Appends merge the small manifests of a size tier when more than this many "
                                    "exist (0: never; COMMIT-8).")
EXPIRE_MAX_SNAPSHOT_AGE_MS = Property("history.expire.max-snapshot-age-ms", 5 * 24 * 3600 * 1000, 0, None,
                                      "Snapshot expiry removes snapshots older than this by default (MAINT-3).")
EXPIRE_MIN_SNAPSHOTS_TO_KEEP = Property("history.expire.min-snapshots-to-keep", 1, 1, None,
                                        "Snapshot expiry keeps at least this many of the newest current "
                                        "ancestors (MAINT-3).")
DELETE_MODE = Property("write.delete.mode", "merge-on-read", doc=(
    "How delete, overwrite with a filter, upsert and merge remove rows: 'merge-on-read' writes deletion "
    "vectors (ROWDEL-1), 'copy-on-write' rewrites the files (COMMIT-12)."))
DELETE_MODES = ("merge-on-read", "copy-on-write")

CORE_PROPERTIES = (TARGET_FILE_SIZE, COMPRESSION_LEVEL, ROW_GROUP_ROWS, PAGE_SIZE_BYTES, MIN_COMPRESSION_SAVING,
                   COMMIT_RETRIES, COMMIT_MIN_WAIT_MS, COMMIT_MAX_WAIT_MS, METADATA_PREVIOUS_MAX, INLINE_SNAPSHOTS_MAX,
                   MANIFEST_TARGET_SIZE, MANIFEST_MIN_MERGE_COUNT, WRITE_LEASE_SECONDS, EXPIRE_MAX_SNAPSHOT_AGE_MS,
                   EXPIRE_MIN_SNAPSHOTS_TO_KEEP, DELETE_MODE)


def delete_mode(props: Mapping[str, str]) -> str:
    """``write.delete.mode``, checked (ROWDEL-1)."""
    mode = props.get(DELETE_MODE.name, str(DELETE_MODE.default))
    if mode not in DELETE_MODES:
        raise ValidationError(f"property {DELETE_MODE.name} must be one of {', '.join(DELETE_MODES)}, got {mode!r}")
    return mode


def number_property(props: Mapping[str, str], prop: Property, override: float | None = None) -> float:
    raw = override if override is not None else props.get(prop.name, prop.default)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValidationError(f"property {prop.name} must be a number, got {raw!r}") from None
    if value != value:  # NaN
        raise ValidationError(f"property {prop.name} must be a number, got {raw!r}")
    if prop.minimum is not None and value < prop.minimum:
        raise ValidationError(f"property {prop.name} must be >= {prop.minimum:g}, got {raw!r}")
    if prop.maximum is not None and value > prop.maximum:
        raise ValidationError(f"property {prop.name} must be <= {prop.maximum:g}, got {raw!r}")
    return value


def int_property(props: Mapping[str, str], prop: Property, override: int | None = None) -> int:
    value = number_property(props, prop, override)
    if value in (float("inf"), float("-inf")) or value != int(value):
        raise ValidationError(f"property {prop.name} must be an integer, got {value!r}")
    return int(value)


def validate_properties(props: Mapping[str, str], known: tuple[Property, ...] = CORE_PROPERTIES) -> None:
    """Check every known property that is set; unknown names are allowed (META-12)."""
    for prop in known:
        if prop.name in props:
            if isinstance(prop.default, int) and not isinstance(prop.default, bool):
                int_property(props, prop)  # "1.5" is refused here, not at the first write
            elif isinstance(prop.default, float):
                number_property(props, prop)
            elif prop is DELETE_MODE:
                delete_mode(props)
