"""Run the service: bind the socket, serve HTTP with uvicorn, stop cleanly on SIGTERM (spec/service.md SERVICE-8).

:func:`serve` configures JSON logging, starts the
:class:`~lakefmt.service.daemon.CompactionService`, binds ``host:port`` itself (port 0
picks a free port; the ``service.listening`` log line names it) and runs uvicorn in the
main thread. On the first SIGTERM or SIGINT uvicorn stops accepting requests and
returns; then the service stops: no new work, ``shutdown_grace_seconds`` for running
groups to commit, then running groups are abandoned, leases released and unfinished
jobs recorded ``interrupted``. A second signal skips the rest of the grace period.
The process exits with status 0.

Example:
    >>> serve(load_config("lakefmt.toml", warehouse="warehouse"))
"""

from __future__ import annotations

import logging
import signal
import socket
from types import FrameType
from typing import Any

import uvicorn

from lakefmt.catalog import Catalog
from lakefmt.service.api import create_app
from lakefmt.service.config import ServiceConfig, check_exposure, is_loopback
from lakefmt.service.daemon import CompactionService
from lakefmt.service.logs import LOGGER_NAME, configure_logging, log_event

logger = logging.getLogger(LOGGER_NAME)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6)."""
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    # The protocol number makes asyncio set TCP_NODELAY on accepted connections: without it a kept-alive
    # connection waits ~40 ms (Nagle's algorithm against delayed ACKs) for each answer's body.
    sock = socket.socket(info[0], socket.SOCK_STREAM, info[2])
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(info[4])
    sock.listen(128)  # connections queue from now on, before uvicorn's loop accepts them
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Signals:
    """SIGTERM/SIGINT: the first asks the HTTP server to exit; any later one aborts running groups."""

    def __init__(self, service: CompactionService) -> None:
        self.service = service
        self.server: uvicorn.Server | None = None
        self.received = 0

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.handle)

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        # uvicorn handles signals while it serves and re-raises them once it has stopped; they end up here.
        self.received += 1
        if self.server is not None:
            self.server.should_exit = True
        if self.received > 1 or self.service.stopping:
            self.service.abort_running()


def warn_if_unauthenticated(config: ServiceConfig) -> None:
    """One warning line when the API needs no token: loud when the address is not loopback (SERVICE-29)."""
    if config.token is not None:
        return
    if is_loopback(config.host):
        log_event(logger, "service.unauthenticated", level=logging.WARNING, host=config.host,
                  message="no token is set: any local user or process can call the API (trigger jobs, expire "
                          "snapshots, remove orphans); set LAKEFMT_SERVICE_TOKEN to require one")
    else:
        log_event(logger, "service.insecure", level=logging.WARNING, host=config.host,
                  message=f"INSECURE: serving WITHOUT AUTHENTICATION on {config.host} (--insecure): anyone who can "
                          "reach this address can trigger compaction, expire snapshots and remove orphan files; "
                          "set LAKEFMT_SERVICE_TOKEN")


def serve(config: ServiceConfig, *, catalog: Catalog | None = None, schedule: bool = True,
          extra_threads: Any = None) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status (0 after a clean stop).

    Raises:
        ValidationError: no token and a non-loopback address without ``insecure`` (SERVICE-29).
    """
    check_exposure(config)
    configure_logging(config.log_level, secrets=[config.token])
    warn_if_unauthenticated(config)
    service = CompactionService(config, catalog=catalog)
    signals = _Signals(service)
    signals.install()
    sock = bind(config.host, config.port)
    address = url_of(sock)
    service.start(address, schedule=schedule)
    server = uvicorn.Server(uvicorn.Config(create_app(service), log_config=None, access_log=config.access_log,
                                           lifespan="off", timeout_graceful_shutdown=5, server_header=False))
    signals.server = server
    if extra_threads is not None:
        extra_threads(service)
    log_event(logger, "service.listening", address=address, port=sock.getsockname()[1],
              openapi=f"{address}/openapi.json", docs=f"{address}/docs")
    try:
        if signals.received == 0:
            server.run(sockets=[sock])
    finally:
        sock.close()
        service.stop()
    return 0
