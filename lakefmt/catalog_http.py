"""The transport of the catalog client: JSON over HTTP to ``lakefmt serve`` (spec/catalog-http.md).

:class:`HttpClient` keeps one kept-alive ``http.client`` connection per thread (a forked
child opens its own), sends a request again when it got no answer, and turns an error answer
``{"error": <lakefmt error class>, "message"}`` back into that lakefmt error. The standard
library is enough, so a core install needs no HTTP package.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import threading
import time
import urllib.parse
from typing import Any

from lakefmt import errors
from lakefmt.errors import LakefmtError, ValidationError

API_PREFIX = "/catalog/v1"
TOKEN_ENV = "LAKEFMT_CATALOG_TOKEN"
_IDLE_SECONDS = 4.0  # reconnect before reusing a connection idle this long (uvicorn closes them after 5 s)
_RETRY_STATUS = (502, 503, 504)  # a proxy or a stopping server (503 without a lakefmt error): send again


def is_catalog_url(location: object) -> bool:
    """Whether ``location`` names a catalog server (``http://`` or ``https://``) rather than a warehouse."""
    return isinstance(location, str) and location.lower().startswith(("http://", "https://"))


class CatalogServerError(LakefmtError):
    """The catalog server could not be reached, or answered outside the protocol."""


class CatalogUnauthorizedError(CatalogServerError):
    """The catalog server refused the bearer token (HTTP 401); nothing was done."""


class _Unreachable(Exception):
    """No answer: the connection failed before a response arrived."""


class HttpClient:
    """JSON requests to one catalog server; one keep-alive ``http.client`` connection per thread (and process).

    A request that got no answer is sent again until ``retry_seconds`` have passed (:meth:`call`).
    """

    def __init__(self, url: str, token: str | None, *, timeout: float, retry_seconds: float) -> None:
        self.url, self.retry_seconds = url, retry_seconds
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValidationError(f"catalog server URL {url!r} must look like http://host:port")
        self.scheme, self.netloc, self.timeout = parts.scheme, parts.netloc, timeout
        base = parts.path.rstrip("/")
        self.base = base if base.endswith(API_PREFIX) else base + API_PREFIX
        self.headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"
        self._local = threading.local()

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection and whether it was used before (a new one after a fork or a long idle)."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None and (local.pid != os.getpid() or time.monotonic() - local.used > _IDLE_SECONDS):
            self.drop()
            conn = None
        if conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            conn = cls(self.netloc, timeout=self.timeout)
            conn.connect()
            with contextlib.suppress(OSError):
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            local.conn, local.pid = conn, os.getpid()
            return conn, False
        return conn, True

    def drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def send(self, method: str, path: str, body: Any = None) -> tuple[int, Any, bool]:
        """One request: ``(status, decoded answer, resent)``; a stale kept-alive connection is replaced once at
        once (``resent``: the first send may have reached the server).

        Raises:
            _Unreachable: no answer arrived.
        """
        data = None if body is None else json.dumps(body).encode()
        for attempt in (1, 2):
            reused = False
            try:
                conn, reused = self._connection()
                conn.request(method, self.base + path, body=data, headers=self.headers)
                response = conn.getresponse()
                raw = response.read()
            except (OSError, http.client.HTTPException) as exc:
                self.drop()
                stale = isinstance(exc, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError))
                if attempt == 1 and reused and stale:
                    continue
                raise _Unreachable(f"{type(exc).__name__}: {exc}") from exc
            self._local.used = time.monotonic()
            if response.will_close:
                self.drop()
            try:
                return response.status, json.loads(raw) if raw else None, attempt > 1
            except ValueError:
                return response.status, raw.decode(errors="replace"), attempt > 1
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, body: Any = None, *, retry: bool = True,
              retry_status: tuple[int, ...] = ()) -> tuple[int, Any, bool]:
        """``(status, answer, uncertain)``; ``uncertain``: an earlier send may have been applied unanswered.

        A request without an answer, or answered 502/503/504 by something other than lakefmt (or a
        status of ``retry_status``), is sent again until ``retry_seconds`` have passed.
        """
        deadline = time.monotonic() + self.retry_seconds
        delay, uncertain = 0.05, False
        while True:
            try:
                status, payload, resent = self.send(method, path, body)
            except _Unreachable as exc:
                problem: object = exc
            else:
                uncertain |= resent
                lakefmt_error = isinstance(payload, dict) and "error" in payload
                if status not in retry_status and (status not in _RETRY_STATUS or lakefmt_error):
                    return status, payload, uncertain
                problem = f"HTTP {status}: {payload}"
            uncertain = True
            if not retry or time.monotonic() + delay > deadline:
                raise CatalogServerError(f"the catalog server {self.url} did not answer {method} {path} "
                                         f"({problem}) within {self.retry_seconds:g}s")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def request_json(self, method: str, path: str, body: Any = None) -> Any:
        status, payload, _ = self.call(method, path, body)
        if status >= 400:
            raise self.error(status, payload)
        return payload

    def error(self, status: int, payload: Any) -> LakefmtError:
        """The lakefmt error an error answer names (``{"error": class name, "message"}``), else a generic one."""
        if status == 401:
            return CatalogUnauthorizedError(
                f"the catalog server {self.url} refused the request (401, missing or wrong bearer token); nothing was "
                f"done. Pass token=... (command line: --token, or ${TOKEN_ENV}) with the server's token")
        if isinstance(payload, dict):
            message = str(payload.get("message") or payload.get("detail") or payload)
            cls = getattr(errors, str(payload.get("error")), None)
            if isinstance(cls, type) and issubclass(cls, LakefmtError):
                extra = {k: payload[k] for k in ("writer_id", "batch_id", "last_committed") if k in payload}
                try:
                    return cls(message, **extra) if extra else cls(message)
                except TypeError:
                    exc = cls.__new__(cls)
                    Exception.__init__(exc, message)
                    return exc
            if status == 422:
                return ValidationError(message)
        return CatalogServerError(f"the catalog server {self.url} answered HTTP {status}: {payload}")


class HeldTurns:
    """The commit turns a client's threads hold (CATHTTP-22): per thread and table, each sent once.

    A turn comes with the refusal of a commit and belongs to the thread whose commit was
    refused: that thread's next commit request to the table carries it. A turn this client
    will not use is given back (CATHTTP-23), so others do not wait for it to lapse.
    """

    MARGIN = 0.8  # a turn is used only within this share of its lifetime: the server's clock runs on

    def __init__(self) -> None:
        self._local = threading.local()

    def _held(self) -> dict[tuple[str, str], tuple[str, float]]:
        held = getattr(self._local, "held", None)
        if held is None:
            held = self._local.held = {}
        return held

    def given(self, key: tuple[str, str], ticket: str, seconds: float) -> float:
        """Record a turn the server gave; returns until when (time.monotonic) it is used."""
        until = time.monotonic() + self.MARGIN * float(seconds)
        self._held()[key] = (str(ticket), until)
        return until

    def holds(self, key: tuple[str, str]) -> bool:
        known = self._held().get(key)
        return known is not None and time.monotonic() < known[1]

    def take(self, key: tuple[str, str]) -> str | None:
        """The ticket for this thread's next commit request to ``key`` (then no longer held), or None."""
        known = self._held().pop(key, None)
        return known[0] if known is not None and time.monotonic() < known[1] else None

    def held(self) -> dict[tuple[str, str], str]:
        return {key: ticket for key, (ticket, _) in self._held().items()}

    def unused_since(self, before: dict[tuple[str, str], str]) -> list[tuple[tuple[str, str], str]]:
        """Turns this thread held at ``before`` and still holds unused: removed, to be given back."""
        held = self._held()
        stale = [(key, ticket) for key, ticket in before.items() if held.get(key, ("",))[0] == ticket]
        for key, _ in stale:
            del held[key]
        return stale
