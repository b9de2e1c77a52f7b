"""A writer run as a real OS process by the crash and mid-write tests (spec/maintenance.md, MAINT-8).

``python -m tests.maintenance.writer_process '<json>'`` does one ``append`` or ``delete``
on a table. Started with ``LAKEFMT_PAUSE_AT=<point>`` and ``LAKEFMT_PAUSE_FILE=<path>``
it stops at that point of the commit protocol (lakefmt.hooks) until the test kills it.
Only pyarrow and lakefmt are imported, so it starts quickly.
"""

from __future__ import annotations

import json
import sys

import pyarrow as pa

import lakefmt

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.string()), pa.field("v", pa.float64())])


def batch(start: int, n: int, parts: str = "abc") -> pa.Table:
    """Deterministic rows ``id = start .. start + n - 1`` spread over partitions ``parts``."""
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "part": [parts[i % len(parts)] for i in ids], "v": [i * 0.5 for i in ids]},
                    schema=SCHEMA)


def main(config: dict) -> None:
    catalog = lakefmt.Catalog(config["warehouse"], catalog_path=config.get("catalog_path"),
                              storage_options=config.get("storage_options") or None)
    table = catalog.load_table(config["table"])
    if config["op"] == "append":
        table.append(batch(config["start"], config["rows"]))
    elif config["op"] == "delete":
        table.delete(config["filter"])
    else:
        raise ValueError(config["op"])
    print("committed", table.metadata.current_snapshot_id)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
