"""Data source options: which table, in which catalog, and how to read or write it (spec/spark.md, SPARK-1).

Spark hands a Python data source its options as strings in a case-insensitive map.
:class:`TableRef` is the plain, picklable part that names a table: executors get it
(never a :class:`~lakefmt.Table`, a catalog connection or a Spark object) and open
only the warehouse's file IO from it.

=====================  ======================================================================
option                 meaning
=====================  ======================================================================
``path`` / ``table``   ``namespace.table`` (``load(...)``/``save(...)`` set ``path``)
``catalog``            the warehouse location (alias ``warehouse``), or a catalog server's URL
``token``              the catalog server's bearer token (default ``$LAKEFMT_CATALOG_TOKEN``)
``catalog-path``       the DuckDB catalog file (default ``<warehouse>/catalog.duckdb``; not with a server)
``storage.<key>``      one fsspec storage option, e.g. ``storage.endpoint_url``
``storage-options``    all storage options as one JSON object
``snapshot-id``        read this snapshot (time travel)
``as-of``              read the snapshot current at this ISO-8601 time or epoch milliseconds
``columns``            comma-separated columns to read (Spark does not push projections)
``filter``             a lakefmt filter (spec/expressions.md) applied while planning and reading
``split-size``         bytes of data files per input partition (default 128 MiB)
``open-cost``          bytes a file counts for when packing partitions (default 4 MiB)
``min-partitions``     split small scans into at least this many partitions (default: the driver's cores)
``writer-id``          streaming: the stable id of the writer (default: the streaming query id)
``target-file-size``   writes: roll data files at this many bytes (default ``write.target-file-size-bytes``)
``lease-seconds``      lifetime of a job's write-intent lease (default ``write.lease-seconds``)
``buffer-size``        bytes a write task buffers before sorting and writing files (default 256 MiB)
=====================  ======================================================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from lakefmt.errors import ValidationError
from lakefmt.io import FileIO

if TYPE_CHECKING:
    from lakefmt.catalog import Catalog
    from lakefmt.table import Table

MiB = 1024 * 1024
DEFAULT_SPLIT_SIZE = 128 * MiB
DEFAULT_OPEN_COST = 4 * MiB
DEFAULT_BUFFER_SIZE = 256 * MiB
TEST_OPTION_PREFIX = "lakefmt.test."


@dataclass(frozen=True)
class TableRef:
    """A table named by plain data: warehouse, catalog file, storage options, identifier.

    With a catalog server (``catalog_url``), ``warehouse`` is the one the server names, resolved
    on the driver, so executors reach the files without asking the server.
    """

    warehouse: str
    identifier: str
    catalog_path: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    catalog_url: str | None = None
    token: str | None = field(default=None, repr=False)

    @staticmethod
    def from_options(options: Mapping[str, str]) -> TableRef:
        opts = lowered(options)
        identifier = opts.get("table") or opts.get("path")
        if not identifier:
            raise ValidationError("say which table: .load('namespace.table') / .save('namespace.table') "
                                  "or .option('table', 'namespace.table')")
        warehouse = opts.get("catalog") or opts.get("warehouse")
        if not warehouse:
            raise ValidationError("say which catalog: .option('catalog', '<warehouse location>')")
        storage: dict[str, Any] = {}
        if opts.get("storage-options"):
            storage.update(json.loads(opts["storage-options"]))
        for key, value in opts.items():
            if key.startswith("storage."):
                storage[key[len("storage."):]] = value
        if warehouse.lower().startswith(("http://", "https://")):  # a catalog server (spec/catalog-http.md)
            ref = TableRef(warehouse, identifier, opts.get("catalog-path"), storage, warehouse, opts.get("token"))
            return replace(ref, warehouse=ref.catalog().warehouse)
        return TableRef(warehouse, identifier, opts.get("catalog-path"), storage)

    def catalog(self) -> Catalog:
        from lakefmt.catalog import Catalog  # driver side only; executors never open the catalog

        if self.catalog_url is not None:
            return Catalog(self.catalog_url, catalog_path=self.catalog_path, storage_options=self.storage_options,
                           token=self.token)
        return Catalog(self.warehouse, catalog_path=self.catalog_path, storage_options=self.storage_options)

    def load(self) -> Table:
        return self.catalog().load_table(self.identifier)

    def io(self) -> FileIO:
        """The warehouse's file IO: all an executor needs to read and write table files."""
        return FileIO(self.warehouse, self.storage_options)


def lowered(options: Mapping[str, str]) -> dict[str, str]:
    """Options with lower-case keys (Spark's map is case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def int_option(options: Mapping[str, str], name: str, default: int) -> int:
    raw = lowered(options).get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError(f"option {name!r} must be an integer, got {raw!r}") from None
    if value < 0:
        raise ValidationError(f"option {name!r} must be >= 0, got {raw!r}")
    return value


def as_of_option(options: Mapping[str, str]) -> datetime | None:
    """The ``as-of`` option: ISO-8601 text (naive means UTC) or epoch milliseconds."""
    raw = lowered(options).get("as-of")
    if not raw:
        return None
    if raw.lstrip("-").isdigit():
        return datetime.fromtimestamp(int(raw) / 1000, timezone.utc)
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise ValidationError(f"option 'as-of' must be ISO-8601 or epoch milliseconds, got {raw!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def columns_option(options: Mapping[str, str]) -> list[str] | None:
    raw = lowered(options).get("columns")
    if not raw:
        return None
    return [c.strip() for c in raw.split(",") if c.strip()]


def test_hooks(options: Mapping[str, str]) -> dict[str, str]:
    """Options that make tests fail on purpose at named points (``lakefmt.test.*``)."""
    return {k[len(TEST_OPTION_PREFIX):]: v for k, v in lowered(options).items() if k.startswith(TEST_OPTION_PREFIX)}
