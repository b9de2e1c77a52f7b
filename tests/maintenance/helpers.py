"""Shared helpers of the maintenance tests: writer processes, listings, waiting for leases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import lakefmt
from lakefmt.leases import Leases
from lakefmt.maintenance import relativize, table_location
from tests.maintenance.writer_process import SCHEMA, batch

REPO = Path(__file__).resolve().parents[2]
__all__ = [
    "SCHEMA",
    "all_files",
    "batch",
    "end_write_leases_of",
    "kill",
    "make_table",
    "spawn_paused_writer",
    "start_paused",
]


def make_table(catalog: lakefmt.Catalog, name: str = "maint.t", **properties: str) -> lakefmt.Table:
    return catalog.create_table(name, SCHEMA, partition_by=["part"], properties=properties)


def all_files(table: lakefmt.Table) -> set[str]:
    """Every file under the table location, relative to it."""
    location = table_location(table.metadata_location)
    return {rel for info in table.io.list_files(location) if (rel := relativize(location, info.path))}


def spawn_paused_writer(catalog: lakefmt.Catalog, identifier: str, point: str, tmp_path: Path, *,
                        timeout: float = 60, **config: Any) -> subprocess.Popen[str]:
    """Start a writer process and wait until it pauses at ``point`` (lakefmt.hooks)."""
    marker = tmp_path / f"paused-{uuid.uuid4().hex}"
    config = {"warehouse": catalog.warehouse, "catalog_path": catalog.catalog_path,
              "storage_options": catalog.io.storage_options, "table": identifier, **config}
    env = dict(os.environ, LAKEFMT_PAUSE_AT=point, LAKEFMT_PAUSE_FILE=str(marker),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "tests.maintenance.writer_process", json.dumps(config)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"writer exited with {proc.returncode} before {point}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            kill(proc)
            raise AssertionError(f"writer did not reach {point} within {timeout}s")
        time.sleep(0.02)
    return proc


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL: no cleanup, no finally blocks, the catalog flock dies with the process."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def end_write_leases_of(catalog: lakefmt.Catalog, table: lakefmt.Table, files: set[str]) -> int:
    """End the write leases whose token the names of ``files`` carry, as their expiry would (CAT-10).

    A killed writer's lease would expire after ``write.lease-seconds``; ending it explicitly
    lets a test keep a long lease, which a loaded machine cannot outlast by accident.
    """
    leases = Leases(catalog)
    ended = 0
    for lease in leases.live(table.metadata.table_uuid, "write"):
        if any(lease.key in path.rsplit("/", 1)[-1] for path in files):
            leases.release(table.metadata.table_uuid, "write", [lease.key], owner=lease.owner)
            ended += 1
    return ended


class PausedProcess:
    """A maintenance process (tests.maintenance.maintenance_process) stopped at a named point."""

    def __init__(self, proc: subprocess.Popen[str], resume_file: Path) -> None:
        self.proc, self.resume_file = proc, resume_file

    def resume(self, timeout: float = 120) -> dict[str, Any]:
        """Let it continue; wait for it to finish and return its printed outcome."""
        self.resume_file.write_text("go")
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, f"exited with {self.proc.returncode}:\n{out}\n{err}"
        return json.loads(out.strip().splitlines()[-1])


def start_paused(catalog: lakefmt.Catalog, identifier: str, point: str, tmp_path: Path, *,
                 timeout: float = 120, **config: Any) -> PausedProcess:
    """Start ``maintenance_process`` and wait until it reaches ``point`` (lakefmt.hooks), then return it."""
    name = uuid.uuid4().hex
    marker, resume = tmp_path / f"paused-{name}", tmp_path / f"resume-{name}"
    config = {"warehouse": catalog.warehouse, "catalog_path": catalog.catalog_path,
              "storage_options": catalog.io.storage_options, "table": identifier, **config}
    env = dict(os.environ, LAKEFMT_PAUSE_AT=point, LAKEFMT_PAUSE_FILE=str(marker),
               LAKEFMT_RESUME_FILE=str(resume),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "tests.maintenance.maintenance_process", json.dumps(config)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"process exited with {proc.returncode} before {point}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            kill(proc)
            raise AssertionError(f"process did not reach {point} within {timeout}s")
        time.sleep(0.02)
    return PausedProcess(proc, resume)
