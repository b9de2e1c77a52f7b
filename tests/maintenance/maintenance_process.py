"""Snapshot expiry or orphan removal run as a real OS process (spec/maintenance.md, MAINT-4 … MAINT-11).

``python -m tests.maintenance.maintenance_process '<json>'`` runs one ``expire`` or
``orphans`` on a table and prints one JSON line: the result's fields, or the error's
type and message. Started with ``LAKEFMT_PAUSE_AT``, ``LAKEFMT_PAUSE_FILE`` and
``LAKEFMT_RESUME_FILE`` it stops at a named point (lakefmt.hooks) until the test
creates the resume file, so two processes can be interleaved deterministically.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import timedelta

import lakefmt


def main(config: dict) -> None:
    catalog = lakefmt.Catalog(config["warehouse"], catalog_path=config.get("catalog_path"),
                              storage_options=config.get("storage_options") or None)
    table = catalog.load_table(config["table"])
    try:
        if config["op"] == "expire":
            result = table.maintenance.expire_snapshots(older_than=timedelta(0), retain_last=config["retain_last"])
        elif config["op"] == "orphans":
            result = table.maintenance.remove_orphan_files(older_than=timedelta(0), dry_run=False)
        else:
            raise ValueError(config["op"])
    except lakefmt.LakefmtError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        return
    print(json.dumps({"ok": True, **dataclasses.asdict(result)}))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
