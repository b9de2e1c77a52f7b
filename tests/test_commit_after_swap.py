"""Work done in a commit's own catalog session after its swap (``Table.commit_change(after_swap=...)``)."""

from __future__ import annotations

import logging

import pyarrow as pa

from lakefmt.commit import FileChange
from tests.conftest import rows

SCHEMA = pa.schema([("n", pa.int64())])


def test_after_swap_runs_once_in_the_swap_session_seeing_the_new_pointer(local_catalog):
    t = local_catalog.create_table("db.after", SCHEMA)
    seen: list[str] = []
    files = t.write_data_files(pa.table({"n": pa.array(range(10), pa.int64())}))
    snapshot = t.commit_change(FileChange("append", added=files),
                               after_swap=lambda s: seen.append(s.current_location("db", "after")))
    assert seen == [t.metadata_location]  # once, after the swap, in a session that sees it
    assert t.current_snapshot().snapshot_id == snapshot.snapshot_id


def test_an_error_after_the_swap_never_fails_the_commit(local_catalog, caplog):
    t = local_catalog.create_table("db.after", SCHEMA)
    data = pa.table({"n": pa.array(range(10), pa.int64())})
    files = t.write_data_files(data)

    def broken(session: object) -> None:
        raise RuntimeError("releasing went wrong")

    with caplog.at_level(logging.WARNING, logger="lakefmt.commit"):
        t.commit_change(FileChange("append", added=files), after_swap=broken)
    assert "releasing went wrong" in caplog.text
    assert rows(local_catalog.load_table("db.after").scan().to_arrow()) == rows(data)  # committed, files kept
