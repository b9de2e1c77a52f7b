"""Committing rewritten groups as ``replace`` snapshots (spec/compaction.md COMPACT-18..COMPACT-20, COMPACT-34).

Finished groups are committed together; when the shared commit conflicts, each group is
committed on its own so only the groups that lost an input are dropped. An input is lost
when another commit removed it, or gave it a new deletion vector after this compaction
read it: the commit removes each input with the vector it was read with, and the core
refuses to remove a file whose vector changed (ROWDEL-4), so a group can never bring
back rows a concurrent delete removed. Such a group is reported ``conflict`` and its
outputs deleted; the next run plans it again with the new vector.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING

from lakefmt.commit import FileChange
from lakefmt.compaction.planner import CompactionPlan, FileGroup
from lakefmt.compaction.results import GroupResult
from lakefmt.compaction.rewrite import Hook, RewriteResult
from lakefmt.errors import CommitConflictError, CommitStateUnknownError, LakefmtError
from lakefmt.hooks import checkpoint

if TYPE_CHECKING:
    from lakefmt.catalog_file import CatalogSession
    from lakefmt.metadata import Snapshot
    from lakefmt.table import Table


def commit_groups(table: Table, plan: CompactionPlan, batch: list[tuple[Future[RewriteResult], FileGroup]],
                   hook: Hook | None, renew_leases: Callable[[], object],
                   after_swap: Callable[[CatalogSession], object] | None = None) -> list[GroupResult]:
    """Commit rewritten groups as one ``replace`` snapshot (COMPACT-18); each group on its own after a conflict.

    A group whose rewrite failed is reported and left out (COMPACT-19). When the shared
    commit conflicts (an input of some group is gone), the groups are committed one by
    one, so only the groups whose inputs were removed are dropped. ``after_swap`` runs in
    the catalog session of the batch's commit once it succeeded (the partition leases the
    batch is done with are released there, COMPACT-22); not after a conflict.
    """
    results: list[GroupResult] = []
    ready: list[tuple[FileGroup, RewriteResult, GroupResult]] = []
    for future, group in batch:
        base = GroupResult(group.group_id, group.partition_label, "failed", len(group.files), group.input_bytes)
        try:
            rewritten = future.result()
        except Exception as exc:  # noqa: BLE001 - one bad group never blocks the others (COMPACT-19)
            results.append(replace(base, error=f"{type(exc).__name__}: {exc}"))
            continue
        ready.append((group, rewritten, replace(
            base, output_files=len(rewritten.outputs), output_bytes=rewritten.output_bytes, rows=rewritten.rows,
            method=rewritten.method, seconds=rewritten.seconds, deleted_rows=rewritten.deleted_rows)))
    if not ready:
        return results
    renew_leases()
    if hook is not None:
        for group, rewritten, _ in ready:
            hook("before-commit", {"group_id": group.group_id, "paths": list(rewritten.output_paths)})
    checkpoint("compaction-before-commit")
    if len(ready) == 1:
        return [*results, _commit_one(table, plan, ready, after_swap)]
    try:
        snapshot = _commit(table, plan, ready, cleanup=False, after_swap=after_swap)
    except CommitConflictError:
        return [*results, *(_commit_one(table, plan, [item]) for item in ready)]
    except CommitStateUnknownError as exc:
        return [*results, *(replace(done, error=f"commit outcome unknown, outputs kept: {exc}")
                            for _, _, done in ready)]
    except LakefmtError as exc:
        table.io.delete_many([p for _, rewritten, _ in ready for p in rewritten.output_paths])
        return [*results, *(replace(done, output_files=0, output_bytes=0, error=f"{type(exc).__name__}: {exc}")
                            for _, _, done in ready)]
    return [*results, *(replace(done, status="committed", snapshot_id=snapshot.snapshot_id)
                        for _, _, done in ready)]


def _commit(table: Table, plan: CompactionPlan, ready: list[tuple[FileGroup, RewriteResult, GroupResult]], *,
            cleanup: bool, after_swap: Callable[[CatalogSession], object] | None = None) -> Snapshot:
    """One ``replace`` snapshot removing the groups' inputs and adding their outputs (COMPACT-18, COMPACT-20)."""
    outputs = [f for _, rewritten, _ in ready for f in rewritten.outputs]
    change = FileChange("replace", added=outputs, removed=[f for group, _, _ in ready for f in group.files], summary={
        "lakefmt.compaction.strategy": plan.strategy,
        "lakefmt.compaction.group": ",".join(group.group_id for group, _, _ in ready),
        "lakefmt.compaction.method": ",".join(sorted({rewritten.method for _, rewritten, _ in ready}))})
    return table.commit_change(change, cleanup_on_failure=outputs if cleanup else (), after_swap=after_swap)


def _commit_one(table: Table, plan: CompactionPlan, ready: list[tuple[FileGroup, RewriteResult, GroupResult]],
                after_swap: Callable[[CatalogSession], object] | None = None) -> GroupResult:
    """Commit one rewritten group as its own snapshot; its outputs are deleted if it fails."""
    [(_, _, done)] = ready
    try:
        snapshot = _commit(table, plan, ready, cleanup=True, after_swap=after_swap)
    except CommitConflictError as exc:
        # A source file is gone (another compaction, a delete), or a delete gave it a new deletion
        # vector since it was read (ROWDEL-4): the outputs would resurrect rows; the group no longer applies.
        return replace(done, status="conflict", output_files=0, output_bytes=0, error=str(exc))
    except CommitStateUnknownError as exc:
        return replace(done, error=f"commit outcome unknown, outputs kept: {exc}")
    except LakefmtError as exc:
        return replace(done, output_files=0, output_bytes=0, error=f"{type(exc).__name__}: {exc}")
    return replace(done, status="committed", snapshot_id=snapshot.snapshot_id)
