"""Write leases of Spark jobs, held and renewed on the driver for as long as the job runs (SPARK-13, CAT-10).

Tasks cannot renew a lease (they have no catalog), so the driver takes one
:class:`~lakefmt.leases.WriteLease` per job and holds it: the process's lease keeper
renews it before half of its lifetime has passed, however long the job's tasks take.
Before the job's commit the lease is checked: a lease that expired or was taken over
means orphan removal may already have deleted task outputs, so the job fails with
:class:`~lakefmt.errors.WriteLeaseLostError` and commits nothing. The commit or abort
ends the hold (and :func:`lakefmt.spark.commit.release_tokens` deletes the row).

Example:
    >>> token = lease_job(table, ttl=3600)     # new_job, on the driver
    >>> check_job_lease(token)                 # just before the job's commit
    >>> end_job_leases([token])                # after the commit or the abort
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from lakefmt.errors import WriteLeaseLostError
from lakefmt.leases import WriteLease

if TYPE_CHECKING:
    from lakefmt.table import Table

_held: dict[str, tuple[WriteLease, contextlib.ExitStack]] = {}
_lock = threading.Lock()


def lease_job(table: Table, ttl: float) -> str:
    """Take a write lease for a fresh job token and hold it (renewed) until :func:`end_job_leases`."""
    lease = WriteLease.acquire(table.catalog, table.metadata.table_uuid, ttl, label=table.name)
    stack = contextlib.ExitStack()
    stack.enter_context(lease.hold())
    with _lock:
        _held[lease.token] = (lease, stack)
    return lease.token


def check_job_lease(token: str) -> None:
    """Raise :class:`WriteLeaseLostError` if the job's lease expired or was taken over (COMMIT-19).

    The lease is renewed here (one catalog session), which both proves it is still the
    job's and gives the commit a full lifetime. A token this driver does not hold (a job
    planned by another process) is not checked.
    """
    with _lock:
        entry = _held.get(token)
    if entry is None:
        return
    lease = entry[0]
    if lease.lost or not lease.renew():
        raise WriteLeaseLostError(
            f"the write lease {token} of {lease.label} expired or was taken over while the job ran "
            f"(lease-seconds = {lease.ttl:g}): orphan removal may have deleted its files, so nothing was "
            "committed. Run the job again; if the driver is often stalled, raise write.lease-seconds")


def end_job_leases(tokens: Iterable[str]) -> None:
    """Stop holding (and renewing) the leases of ``tokens`` that this driver holds."""
    for token in tokens:
        with _lock:
            entry = _held.pop(token, None)
        if entry is not None:
            entry[1].close()
