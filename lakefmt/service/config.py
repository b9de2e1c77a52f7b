"""Service configuration: defaults, a TOML file, then environment overrides (spec/service.md SERVICE-1, SERVICE-2).

A configuration file has a ``[service]`` section, one section per scheduled job kind
(``[compaction]``, ``[manifests]``, ``[expire]``, ``[orphans]``) and optional per-table
sections ``[table."namespace.name"]``::

    [service]
    host = "127.0.0.1"
    port = 8765
    max_concurrent_jobs = 2          # table jobs running at once, across tables
    include = ["artemis.*"]          # fnmatch patterns of tables to look after (default: all)

    [compaction]
    enabled = true
    schedule = "5 * * * *"           # hourly at :05 (UTC)

    [expire]
    enabled = true
    schedule = "15 3 * * *"
    older_than = "7d"

    [table."artemis.downlinks"]
    strategy = "zorder"
    columns = ["payload_id", "sensor_kind"]

Every key can be overridden by an environment variable ``LAKEFMT_<SECTION>_<KEY>``
(upper case): ``LAKEFMT_SERVICE_PORT=9000``, ``LAKEFMT_COMPACTION_SCHEDULE="*/10 * * * *"``,
``LAKEFMT_EXPIRE_ENABLED=false``. The bearer token comes from ``LAKEFMT_SERVICE_TOKEN``,
``token`` or ``token_file``; it is kept out of ``repr`` so it cannot reach a log. An empty
token is a configuration error, never "no authentication"; without a token,
:func:`check_exposure` allows only a loopback address unless ``insecure = true``
(``lakefmt serve --insecure``) (SERVICE-29).

Example:
    >>> config = load_config("lakefmt.toml", environ=os.environ)
    >>> config.compaction.schedule
    '5 * * * *'
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from lakefmt.errors import ValidationError
from lakefmt.service.cron import CronSchedule

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport (the `service` extra)
    import tomli as tomllib

JobKind = Literal["compaction", "manifests", "expire", "orphans"]
JOB_KINDS: tuple[JobKind, ...] = ("compaction", "manifests", "expire", "orphans")
StrategyChoice = Literal["auto", "binpack", "sort", "zorder"]
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


def parse_seconds(text: str | float, what: str) -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"45s"``, ``90`` -> seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    match = _AGE.match(str(text))
    if not match:
        raise ValidationError(f"{what}: expected an age such as 7d, 12h, 30m or 45s, got {text!r}")
    return float(match.group(1)) * _AGE_UNITS[match.group(2)]


@dataclass(frozen=True)
class CompactionJob:
    """``[compaction]``: compact every table's eligible partitions with the table's policy."""

    enabled: bool = True
    schedule: str = "5 * * * *"
    strategy: StrategyChoice = "auto"  # auto: sort when the table has a sort order, else binpack
    respect_windows: bool = True  # honour each table's compaction.quiet-windows (COMPACT-26)
    read_mb_per_s: float | None = None  # overrides compaction.read-bandwidth-mb-per-s of every table
    min_age_seconds: float | None = None  # overrides compaction.min-age-seconds of every table
    retries: int = 1  # re-plan a table once more after a conflict or a transient error


@dataclass(frozen=True)
class ManifestsJob:
    """``[manifests]``: merge small manifests (COMPACT-29)."""

    enabled: bool = False
    schedule: str = "35 * * * *"


@dataclass(frozen=True)
class ExpireJob:
    """``[expire]``: expire snapshots; ``older_than``/``retain_last`` default to the table's properties."""

    enabled: bool = False
    schedule: str = "15 3 * * *"
    older_than: str | None = None
    retain_last: int | None = None


@dataclass(frozen=True)
class OrphansJob:
    """``[orphans]``: delete unreferenced files older than ``older_than`` (never a dry run)."""

    enabled: bool = False
    schedule: str = "45 3 * * 0"
    older_than: str = "3d"


@dataclass(frozen=True)
class TablePolicy:
    """``[table."ns.name"]``: per-table overrides of the compaction job."""

    enabled: bool = True
    strategy: StrategyChoice | None = None
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServiceConfig:
    """The whole configuration of ``lakefmt serve`` (spec/service.md SERVICE-1)."""

    warehouse: str = "warehouse"
    catalog_path: str | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    insecure: bool = False  # serve without a token on a non-loopback address (SERVICE-29)
    max_concurrent_jobs: int = 2
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    shutdown_grace_seconds: float = 10.0
    heartbeat_seconds: float = 5.0
    gauge_refresh_seconds: float = 60.0
    history_limit: int = 1000  # most finished jobs a history request returns
    log_level: str = "info"
    access_log: bool = False  # one log line per HTTP request
    compaction: CompactionJob = CompactionJob()
    manifests: ManifestsJob = ManifestsJob()
    expire: ExpireJob = ExpireJob()
    orphans: OrphansJob = OrphansJob()
    tables: Mapping[str, TablePolicy] = field(default_factory=dict)

    def job(self, kind: JobKind) -> CompactionJob | ManifestsJob | ExpireJob | OrphansJob:
        return getattr(self, kind)  # type: ignore[no-any-return]

    def policy(self, table: str) -> TablePolicy:
        return self.tables.get(table, TablePolicy())

    @property
    def auth_enabled(self) -> bool:
        return self.token is not None


_SERVICE_KEYS = {f.name for f in fields(ServiceConfig)} - {"compaction", "manifests", "expire", "orphans", "tables",
                                                             "storage_options"}
_SECTIONS: dict[str, type] = {"compaction": CompactionJob, "manifests": ManifestsJob, "expire": ExpireJob,
                              "orphans": OrphansJob}


def load_config(path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None,
                **overrides: Any) -> ServiceConfig:
    """Defaults, then the TOML file at ``path``, then ``LAKEFMT_<SECTION>_<KEY>`` variables, then ``overrides``.

    ``overrides`` are ``[service]`` keys (``warehouse=...``, ``port=0``); None values are ignored.
    Unknown sections or keys, wrong types and bad cron expressions raise :class:`ValidationError`.
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            raise ValidationError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ValidationError(f"config file {path} is not valid TOML: {exc}") from None
    unknown = set(data) - {"service", "table", *_SECTIONS}
    if unknown:
        raise ValidationError(f"config: unknown section(s) {sorted(unknown)}; known: service, "
                              f"{', '.join(_SECTIONS)}, table")
    service = dict(_section(data, "service"))
    jobs = {name: dict(_section(data, name)) for name in _SECTIONS}
    for key, value in (environ or {}).items():
        if not key.startswith("LAKEFMT_"):
            continue
        section, _, name = key[len("LAKEFMT_"):].lower().partition("_")
        if section == "service" and name in _SERVICE_KEYS:
            service[name] = value
        elif section in jobs and name in {f.name for f in fields(_SECTIONS[section])}:
            jobs[section][name] = value
    service.update({k: v for k, v in overrides.items() if v is not None})
    unknown = set(service) - _SERVICE_KEYS - {"storage_options"}
    if unknown:
        raise ValidationError(f"config [service]: unknown key(s) {sorted(unknown)}")
    for name in ("token", "token_file"):
        if isinstance(service.get(name), str) and not service[name].strip():
            source = f"LAKEFMT_SERVICE_{name.upper()}" if f"LAKEFMT_SERVICE_{name.upper()}" in (environ or {}) \
                else f"[service] {name}"
            raise ValidationError(f"config [service] {name} is empty ({source}): an empty token would turn "
                                  "authentication off. Set a non-empty token, or unset it to serve without one "
                                  "(allowed on a loopback address only, or with --insecure)")
    values = {name: _coerce(ServiceConfig, name, value, "service") for name, value in service.items()
              if name != "storage_options"}
    if "storage_options" in service:
        if not isinstance(service["storage_options"], Mapping):
            raise ValidationError("config [service] storage_options must be a table")
        values["storage_options"] = dict(service["storage_options"])
    for name, cls in _SECTIONS.items():
        known = {f.name for f in fields(cls)}
        bad = set(jobs[name]) - known
        if bad:
            raise ValidationError(f"config [{name}]: unknown key(s) {sorted(bad)}; known: {sorted(known)}")
        values[name] = cls(**{k: _coerce(cls, k, v, name) for k, v in jobs[name].items()})
    tables = {}
    for ident, section in _section(data, "table").items():
        if not isinstance(section, Mapping):
            raise ValidationError(f"config [table.{ident!r}] must be a table")
        known = {f.name for f in fields(TablePolicy)}
        bad = set(section) - known
        if bad:
            raise ValidationError(f"config [table.{ident!r}]: unknown key(s) {sorted(bad)}; known: {sorted(known)}")
        tables[ident] = TablePolicy(**{k: _coerce(TablePolicy, k, v, f"table.{ident}") for k, v in section.items()})
    values["tables"] = tables
    config = ServiceConfig(**values)
    if config.token is None and config.token_file:
        try:
            token = Path(config.token_file).read_text().strip()
        except OSError as exc:
            raise ValidationError(f"config token_file {config.token_file}: {exc.strerror}") from exc
        if not token:
            raise ValidationError(f"config token_file {config.token_file} is empty: write the token into it, "
                                  "or unset token_file to serve without one (loopback only, or --insecure)")
        config = dataclasses.replace(config, token=token)
    validate(config)
    return config


def validate(config: ServiceConfig) -> None:
    """Refuse values no service could run with, naming the key."""
    if not 0 <= config.port <= 65535:
        raise ValidationError(f"config [service] port {config.port} is not a TCP port")
    if config.max_concurrent_jobs < 1:
        raise ValidationError("config [service] max_concurrent_jobs must be at least 1")
    for name in ("shutdown_grace_seconds", "heartbeat_seconds", "gauge_refresh_seconds"):
        if getattr(config, name) < 0 or (name == "heartbeat_seconds" and config.heartbeat_seconds == 0):
            raise ValidationError(f"config [service] {name} must be positive")
    if config.history_limit < 1:
        raise ValidationError("config [service] history_limit must be at least 1")
    for kind in JOB_KINDS:
        CronSchedule.parse(config.job(kind).schedule, what=f"config [{kind}] schedule")
    if config.compaction.retries < 0:
        raise ValidationError("config [compaction] retries must be >= 0")
    if config.expire.older_than is not None:
        parse_seconds(config.expire.older_than, "config [expire] older_than")
    parse_seconds(config.orphans.older_than, "config [orphans] older_than")
    strategies = ("auto", "binpack", "sort", "zorder")
    if config.compaction.strategy not in strategies:
        raise ValidationError(f"config [compaction] strategy must be one of {strategies}")
    for ident, policy in config.tables.items():
        if policy.strategy is not None and policy.strategy not in strategies:
            raise ValidationError(f"config [table.{ident!r}] strategy must be one of {strategies}")


def is_loopback(host: str) -> bool:
    """True if every address ``host`` stands for is a loopback address (127.0.0.0/8, ::1)."""
    text = host.strip().strip("[]")
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        pass
    if not text:
        return False  # an empty host listens on every interface
    try:
        infos = socket.getaddrinfo(text, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def check_exposure(config: ServiceConfig) -> None:
    """Refuse an empty token, and serving without one on a non-loopback address unless ``insecure`` (SERVICE-29)."""
    if config.token is not None and not config.token.strip():
        raise ValidationError("config [service] token is empty: set a non-empty token, or none at all")
    if config.token is None and not config.insecure and not is_loopback(config.host):
        raise ValidationError(
            f"refusing to serve without a token on {config.host!r}, which is not a loopback address: anyone who "
            "can reach it could trigger compaction, snapshot expiry and orphan removal. Set a token "
            "(LAKEFMT_SERVICE_TOKEN, or [service] token / token_file), listen on 127.0.0.1, or pass --insecure "
            "(LAKEFMT_SERVICE_INSECURE=true) to serve without authentication anyway")


def _section(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    section = data.get(name, {})
    if not isinstance(section, Mapping):
        raise ValidationError(f"config [{name}] must be a table")
    return section


def _coerce(cls: type, name: str, value: Any, section: str) -> Any:
    """Check a TOML value against the field's type, converting strings (from the environment)."""
    hint = str(next(f.type for f in fields(cls) if f.name == name))
    where = f"config [{section}] {name}"
    optional = "None" in hint
    literal = name in ("token", "token_file")  # a token is taken as written: "none" is a token, not None
    if optional and (value is None or (isinstance(value, str) and not literal
                                       and value.strip().lower() in ("", "none"))):
        return None
    try:
        if hint.startswith("bool"):
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if hint.startswith("int"):
            if isinstance(value, (bool, float)):
                raise ValueError(value)
            return int(value)
        if hint.startswith("float"):
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if hint.startswith("tuple"):
            items = [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
                raise TypeError(value)
            return tuple(items)
        if isinstance(value, (dict, list, bool)):
            raise TypeError(value)
        return str(value)
    except (TypeError, ValueError):
        shown = "this value" if "token" in name else repr(value)  # SERVICE-11: never echo a token
        raise ValidationError(f"{where}: cannot use {shown} (expected {hint})") from None
