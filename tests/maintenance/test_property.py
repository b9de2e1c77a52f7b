"""Random operation sequences against an in-memory model of the table's rows (MAINT-3 … MAINT-5, MAINT-13).

Operations: append, overwrite, delete, compact, rollback, set-current-snapshot and
expire. The model maps every retained snapshot to its rows. After every step the
current rows equal the model's and ``check`` passes; after every expiry, every
retained snapshot still reads exactly its rows — expiry never deleted a file that a
retained snapshot reads, on any branch of history.
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import lakefmt
from lakefmt.commit import FileChange
from tests.maintenance.helpers import SCHEMA, make_table

Row = tuple[int, str, float]
PARTS = ("a", "b", "c")


def to_rows(table: pa.Table) -> list[Row]:
    return sorted(zip(table["id"].to_pylist(), table["part"].to_pylist(), table["v"].to_pylist()))


def to_table(rows: list[Row]) -> pa.Table:
    return pa.table({"id": [r[0] for r in rows], "part": [r[1] for r in rows], "v": [r[2] for r in rows]},
                    schema=SCHEMA)


class TableModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="lakefmt-model-")
        self.table = make_table(lakefmt.Catalog(self.folder, create=True))
        self.snapshots: dict[int, list[Row]] = {}  # retained snapshot id -> its rows
        self.current: int | None = None
        self.next_id = 0

    def new_rows(self, n: int, part: str | None = None) -> list[Row]:
        ids = range(self.next_id, self.next_id + n)
        out = [(i, part or PARTS[i % 3], float(i)) for i in ids]
        self.next_id += n
        return out

    def committed(self, rows: list[Row]) -> None:
        self.current = self.table.metadata.current_snapshot_id
        assert self.current is not None
        self.snapshots[self.current] = sorted(rows)

    @property
    def rows(self) -> list[Row]:
        return self.snapshots[self.current] if self.current is not None else []

    @initialize(n=st.integers(1, 6))
    def first_append(self, n: int) -> None:
        new = self.new_rows(n)
        self.table.append(to_table(new))
        self.committed(new)

    @rule(n=st.integers(1, 6))
    def append(self, n: int) -> None:
        new = self.new_rows(n)
        self.table.append(to_table(new))
        self.committed(self.rows + new)

    @rule(part=st.sampled_from(PARTS), n=st.integers(0, 3))
    def overwrite(self, part: str, n: int) -> None:
        new = self.new_rows(n, part)
        self.table.overwrite(to_table(new), filter=f"part = '{part}'")
        self.committed([r for r in self.rows if r[1] != part] + new)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        cut = data.draw(st.integers(0, max(self.next_id, 1)))
        if self.table.delete(f"id < {cut}") is not None:
            self.committed([r for r in self.rows if r[0] >= cut])
        else:
            assert not any(r[0] < cut for r in self.rows)

    @rule()
    def compact(self) -> None:
        before = self.table.metadata.current_snapshot_id
        try:
            compaction = self.table.compaction
        except ImportError:  # lakefmt.compaction not installed: a replace through the public commit API
            files = [f for f in self.table.plan_files() if f.partition == ("a",)]
            if len(files) < 2:
                return
            rows = self.table.scan(filter="part = 'a'").to_arrow()
            added = self.table.write_data_files(rows, kind="compact")
            self.table.commit_change(FileChange("replace", added=added, removed=files))
        else:
            compaction.run(min_age_seconds=0, min_input_files=2)
            self.table.refresh()
        rows = self.rows
        for snap in self.table.metadata.ancestors(self.table.metadata.current_snapshot_id):
            if snap.snapshot_id == before:
                break
            self.snapshots[snap.snapshot_id] = rows  # one replace per compacted group: rows unchanged
        self.current = self.table.metadata.current_snapshot_id

    @precondition(lambda self: self.current is not None and len(self.ancestors()) > 1)
    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(self.ancestors()[1:]))
        self.table.rollback_to(target)
        self.current = target

    @precondition(lambda self: len(self.snapshots) > 1)
    @rule(data=st.data())
    def set_current(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(list(self.snapshots)))  # commit order: ids are random
        self.table.set_current_snapshot(target)
        self.current = target

    @rule(retain_last=st.integers(1, 3), by_id=st.booleans(), data=st.data())
    def expire(self, retain_last: int, by_id: bool, data: st.DataObject) -> None:
        """Expire by count (all snapshots are old enough) or by explicit ids."""
        candidates = [sid for sid in self.snapshots if sid != self.current]
        if by_id and candidates:
            chosen = data.draw(st.lists(st.sampled_from(candidates), min_size=1, unique=True))
            result = self.table.maintenance.expire_snapshots(snapshot_ids=chosen)
            assert set(result.expired_snapshot_ids) == set(chosen)
        else:
            everything = datetime.now(timezone.utc) + timedelta(days=1)  # every snapshot is "old"
            result = self.table.maintenance.expire_snapshots(older_than=everything, retain_last=retain_last)
        for sid in result.expired_snapshot_ids:
            del self.snapshots[sid]
        assert {s.snapshot_id for s in self.table.snapshots()} == set(self.snapshots)
        for sid, expected in self.snapshots.items():  # every retained snapshot still reads its rows
            assert to_rows(self.table.scan(snapshot_id=sid).to_arrow()) == expected, sid

    def ancestors(self) -> list[int]:
        return [s.snapshot_id for s in self.table.metadata.ancestors(self.current)]

    @invariant()
    def rows_match_the_model_and_the_table_checks(self) -> None:
        if self.current is None:
            return
        assert self.table.metadata.current_snapshot_id == self.current
        assert to_rows(self.table.scan().to_arrow()) == self.rows
        report = self.table.check()
        assert report.ok, report.format()

    def teardown(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


TableModel.TestCase.settings = settings(max_examples=20, stateful_step_count=8, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
test_random_operations_match_the_model = pytest.mark.slow(TableModel.TestCase)
