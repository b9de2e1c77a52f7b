"""Helpers for service tests: small-file tables, and `lakefmt serve` as a real process on a loopback port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lakefmt
from tests.conftest import DOWNLINKS_SCHEMA, downlinks

REPO = Path(__file__).resolve().parents[2]
TOKEN = "test-token-7f3a9c1e5b"  # distinctive, so a leak into the logs is easy to find


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.service)


def small_files_table(catalog: lakefmt.Catalog, name: str, *, appends: int = 6, rows: int = 600,
                      missions: int = 3, properties: dict[str, str] | None = None) -> lakefmt.Table:
    """``appends`` commits, each one small file per mission partition; compactable at once (min age 0)."""
    props = {"compaction.min-age-seconds": "0", **(properties or {})}
    t = catalog.create_table(name, schema=DOWNLINKS_SCHEMA, partition_by=["mission_id"], properties=props)
    for i in range(appends):
        t.append(downlinks(rows, seed=i, missions=missions,
                           start_us=1_767_225_600_000_000 + i * rows * 60_000_000))
    return t


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse a /metrics answer with prometheus_client's parser: (sample name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families  # the service extra

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


class Http:
    """A tiny JSON client over urllib: returns (status, body) and never raises on HTTP errors."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.token = token

    def request(self, method: str, path: str, body: Any = None, *, token: str | None | bool = True,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
        hdrs = dict(headers or {})
        bearer = self.token if token is True else token
        if bearer:
            hdrs["Authorization"] = f"Bearer {bearer}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, raw, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            status, raw, ctype = exc.code, exc.read(), exc.headers.get("Content-Type", "")
        return status, (json.loads(raw) if "json" in ctype and raw else raw.decode())

    def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.request("POST", path, body, **kw)

    def wait_job(self, job_id: str, *, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, job = self.get(f"/api/v1/jobs/{job_id}")
            assert status == 200, job
            if job["status"] not in ("queued", "running"):
                return job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} did not finish in {timeout} s")


def serve_command(warehouse: Path, *args: str) -> list[str]:
    """``lakefmt serve`` on a free loopback port, as a child process runs it."""
    return [sys.executable, "-m", "lakefmt.cli", "serve", "--warehouse", str(warehouse), "--port", "0", *args]


def serve_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without any LAKEFMT_* variable, plus ``env``."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEFMT_")}
    full_env.update({"PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                     "LAKEFMT_SERVICE_HEARTBEAT_SECONDS": "1", **(env or {})})
    return full_env


class ServiceProcess:
    """``lakefmt serve --port 0`` in a child process; its JSON log lines are read from a file."""

    def __init__(self, warehouse: Path, log: Path, *, env: dict[str, str] | None = None,
                 args: list[str] | None = None, token: str | None = TOKEN) -> None:
        self.log_path = log
        full_env = serve_env(env)
        if token:
            full_env["LAKEFMT_SERVICE_TOKEN"] = token
        self._log_file = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(serve_command(warehouse, *(args or [])), env=full_env,
                                     stdout=subprocess.DEVNULL, stderr=self._log_file, cwd=str(warehouse.parent))
        self.url = self._wait_listening()
        self.http = Http(self.url, token)

    def _wait_listening(self, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if event.get("event") == "service.listening":
                    return str(event["address"])
            if self.proc.poll() is not None:
                raise AssertionError(f"lakefmt serve exited with {self.proc.returncode}:\n{self.log_text()}")
            time.sleep(0.05)
        raise AssertionError(f"lakefmt serve did not listen within {timeout} s:\n{self.log_text()}")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        out = []
        for line in self.log_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if name is None or event.get("event") == name:
                out.append(event)
        return out

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM, then wait; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._log_file.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log_file.close()


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator[Any]:
    """Start ``lakefmt serve`` processes; any still running at teardown are killed (by their pid)."""
    started: list[ServiceProcess] = []

    def start(warehouse: Path, **kw: Any) -> ServiceProcess:
        proc = ServiceProcess(warehouse, tmp_path / f"serve-{len(started)}.log", **kw)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
