"""``lakefmt expire | orphans | rollback | stats | check``: maintenance commands (spec/maintenance.md).

Example:
    $ lakefmt expire artemis.downlinks --older-than 7d --retain-last 10
    $ lakefmt orphans artemis.downlinks --older-than 3d            # dry run: lists orphans
    $ lakefmt orphans artemis.downlinks --older-than 3d --delete
    $ lakefmt rollback artemis.downlinks 6048353465316254
    $ lakefmt stats artemis.downlinks --format json
    $ lakefmt check artemis.downlinks || echo "violations found"

``check`` exits with status 3 when it finds a violation (2 stays "bad input or a lakefmt
error", 1 "storage unreachable").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from typing import Any

from lakefmt.cli.format import FORMATS, human_bytes, print_records
from lakefmt.cli.options import CliError, add_command, open_catalog

EXIT_VIOLATIONS = 3
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


def parse_age(text: str) -> dt.timedelta | dt.datetime:
    """``"7d"``, ``"12h"``, ``"90m"``, ``"30s"`` or ``"0"`` -> a timedelta; ISO 8601 -> a datetime (UTC)."""
    match = _DURATION.match(text)
    if match:
        return dt.timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--older-than expects an age such as 7d, 12h, 30m, 0 or an ISO 8601 time, "
                       f"got {text!r}") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.timezone.utc)


def cmd_expire(args: argparse.Namespace) -> int:
    table = open_catalog(args).load_table(args.table)
    result = table.maintenance.expire_snapshots(
        older_than=parse_age(args.older_than) if args.older_than else None, retain_last=args.retain_last,
        snapshot_ids=args.snapshot_id or None, dry_run=args.dry_run)
    verb = "would expire" if result.dry_run else "expired"
    print(f"{verb} {len(result.expired_snapshot_ids)} snapshot(s) of {table.name}; "
          f"{'would free' if result.dry_run else 'freed'} {human_bytes(result.bytes_freed)} "
          f"({result.bytes_freed} bytes) in {len(result.data_files)} data files, "
          f"{len(result.deletion_vector_files)} deletion-vector files, {len(result.manifests)} "
          f"manifests, {len(result.manifest_lists)} manifest lists, {len(result.metadata_files)} "
          "metadata files")
    for path in result.failed_deletes:
        print(f"warning: could not delete {path} (left for orphan removal)", file=sys.stderr)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def cmd_orphans(args: argparse.Namespace) -> int:
    table = open_catalog(args).load_table(args.table)
    age = parse_age(args.older_than)
    if not isinstance(age, dt.timedelta):
        raise CliError("--older-than of orphans takes an age such as 3d, not a point in time")
    result = table.maintenance.remove_orphan_files(older_than=age, dry_run=not args.delete)
    for path in result.orphan_files:
        print(path)
    verb = "orphan(s) found (dry run; --delete removes them)" if result.dry_run else "orphan(s) deleted"
    print(f"{len(result.orphan_files)} {verb}, {human_bytes(result.orphan_bytes)}; "
          f"listed {result.listed_files} "
          f"files: {result.referenced_files} referenced, {result.in_flight_files} in flight (named with the "
          f"token of a live write lease: not committed yet), {result.too_young_files} younger than {age}",
          file=sys.stderr)
    if result.superseded_metadata_files:
        print(f"{len(result.superseded_metadata_files)} of the orphans are old metadata files that fell out of the "
              "metadata-log (write.metadata.previous-versions-max, default 100): no commit can make them current "
              "again, so they are safe to delete (MAINT-6)", file=sys.stderr)
    for path in result.failed_deletes:
        print(f"warning: could not delete {path}", file=sys.stderr)
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    table = open_catalog(args).load_table(args.table)
    if args.any:
        snap = table.set_current_snapshot(args.snapshot_id)
    else:
        snap = table.rollback_to(args.snapshot_id)
    print(f"{table.name} is now at snapshot {snap.snapshot_id} ({snap.operation}, "
          f"{snap.summary.get('total-records', '?')} records)")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    stats = open_catalog(args).load_table(args.table).stats()
    if args.format in ("json", "jsonl"):
        print(json.dumps(stats.to_dict(), indent=2 if args.format == "json" else None))
        return 0
    print(f"{stats.table} at snapshot {stats.snapshot_id} ({stats.snapshots} snapshots retained)")
    for label, files, size in (("live", stats.live_files, stats.live_bytes),
                               ("historical (only older snapshots)", stats.historical_files,
                                stats.historical_bytes),
                               ("deletion vectors, live", stats.live_delete_vector_files,
                                stats.live_delete_vector_bytes),
                               ("deletion vectors, historical", stats.historical_delete_vector_files,
                                stats.historical_delete_vector_bytes),
                               ("metadata", stats.metadata_files, stats.metadata_bytes),
                               ("orphan (unreferenced)", stats.orphan_files, stats.orphan_bytes),
                               ("  of which superseded metadata", stats.superseded_metadata_files,
                                stats.superseded_metadata_bytes),
                               ("in flight (uncommitted, leased)", stats.in_flight_files, stats.in_flight_bytes)):
        print(f"  {label:36} {files:>8} files {human_bytes(size):>12}")
    print(f"  rows: {stats.live_records} live of {stats.written_records} written; {stats.deleted_records} "
          f"deleted by {stats.live_delete_vectors} deletion vectors")
    if stats.superseded_metadata_files:
        print("  superseded metadata: metadata files out of the metadata-log (write.metadata.previous-versions-max);"
              " expiry or orphan removal deletes them (MAINT-6)")
    records: list[dict[str, Any]] = [{
        "partition": p.partition or "(unpartitioned)", "files": p.files, "bytes": p.bytes,
        "rows": p.records, "deleted": p.deleted_records, "vectors": p.delete_vectors,
        "avg_file": human_bytes(int(p.average_file_size)), "small": p.small_files, "manifests": p.manifests,
        **{_bucket_label(upper, stats.target_file_size): n for upper, n in p.size_histogram},
    } for p in stats.partitions]
    print_records(records, fmt=args.format, out=sys.stdout)
    return 0


def _bucket_label(upper: int | None, target: int) -> str:
    return f"<{human_bytes(upper)}" if upper is not None else f">={human_bytes(target)}"


def cmd_check(args: argparse.Namespace) -> int:
    report = open_catalog(args).load_table(args.table).maintenance.check(level=args.level)
    if args.format in ("json", "jsonl"):
        print(json.dumps({"table": report.table, "ok": report.ok, "level": report.level,
                          "violations": [v.__dict__ for v in report.violations]}))
    else:
        print(report.format())
    return 0 if report.ok else EXIT_VIOLATIONS


HANDLERS = {"expire": cmd_expire, "orphans": cmd_orphans, "rollback": cmd_rollback, "stats": cmd_stats,
            "check": cmd_check}


def register(subparsers: Any) -> None:
    """Add ``expire``, ``orphans``, ``rollback``, ``stats`` and ``check``."""
    def command(name: str) -> argparse.ArgumentParser:
        p = add_command(subparsers, name, HANDLERS[name])
        p.add_argument("table", help="namespace.table")
        return p

    p = command("expire")
    p.add_argument("--older-than", metavar="AGE|TIME",
                   help="expire snapshots older than this age (7d, 12h, 0) or ISO time "
                        "(default: history.expire.max-snapshot-age-ms, 5 days)")
    p.add_argument("--retain-last", type=int, metavar="N",
                   help="always keep the newest N snapshots of the current history "
                        "(default: history.expire.min-snapshots-to-keep, 1)")
    p.add_argument("--snapshot-id", type=int, action="append", metavar="ID",
                   help="expire exactly this snapshot (repeatable; ignores age and --retain-last)")
    p.add_argument("--dry-run", action="store_true", help="only report what would be removed")

    p = command("orphans")
    p.add_argument("--older-than", default="3d", metavar="AGE", help="grace period (default: 3d)")
    p.add_argument("--delete", action="store_true", help="delete the orphans (default: a dry run)")

    p = command("rollback")
    p.add_argument("snapshot_id", type=int, help="the snapshot to return to")
    p.add_argument("--any", action="store_true",
                   help="allow any retained snapshot, not only an ancestor (set-current-snapshot)")

    p = command("stats")
    p.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")

    p = command("check")
    p.add_argument("--level", choices=("metadata", "files", "full"), default="full",
                   help="metadata only, + file existence and sizes, + footers and rows (default: full)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format")
