"""Request and response bodies of the catalog over HTTP, as pydantic models (spec/catalog-http.md).

As :mod:`lakefmt.service.models` does for the service's API, they type every field once for
the OpenAPI document, and FastAPI validates requests against them (CATHTTP-3: a body that
breaks them is answered 400).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lakefmt.service.models import TABLE_PATTERN, ErrorBody

NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"  # CAT-2, checked again with lakefmt.names
METADATA_FILE = r"^(/|[a-z][a-z0-9+.-]*://)[^\x00-\x1f]*/metadata/v[0-9]{6,}-[^/\\\x00-\x1f]+\.metadata\.json$"  # LAYOUT-9
FIRST_METADATA = r"^(/|[a-z][a-z0-9+.-]*://)[^\x00-\x1f]*/metadata/v0{5,}1-[^/\x00-\x1f]+\.metadata\.json$"  # LAYOUT-9


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)  # lax: JSON's 12.0 is the integer 12


class ErrorAnswer(BaseModel):
    error: str = Field(description="the lakefmt error class, e.g. NoSuchTableError")
    message: str


class CommitAnswer(BaseModel):
    """A commit's outcome (CATHTTP-10): committed, or why not."""

    committed: bool
    version: int | None = Field(None, description="the table's version after the commit")
    replayed: bool | None = Field(None, description="this commit had already been applied (CATHTTP-9)")
    reason: str | None = Field(None, description="moved, write-lease-lost or already-committed")
    current: str | None = Field(None, description="moved: the table's current metadata location")
    batch_id: int | None = Field(None, description="already-committed: the writer's last committed batch id")
    turn: str | None = Field(None, description="moved, asked with want_turn: the table's turn, now this client's")
    turn_seconds: float | None = Field(None, description="how long the turn is held for the client (CATHTTP-22)")
    last_committed: int | None = None
    error: str | None = None
    message: str | None = None


class NamespaceBody(Body):
    namespace: str = Field(pattern=NAME)
    properties: dict[str, str] = Field(default_factory=dict)


class CreateTableBody(Body):
    name: str = Field(pattern=NAME)
    table_uuid: str = Field(min_length=1, max_length=64)
    metadata_location: str = Field(pattern=FIRST_METADATA, description="absolute; written before the request")


class RegisterBody(Body):
    name: str = Field(pattern=NAME)
    metadata_location: str = Field(pattern=METADATA_FILE, description="absolute: a metadata file of any version")


class RenameBody(Body):
    from_: str = Field(alias="from", pattern=TABLE_PATTERN, description="namespace.table")
    to: str = Field(pattern=TABLE_PATTERN, description="namespace.table")


class WriterBatchBody(Body):
    writer_id: str = Field(min_length=1, max_length=256, description="printable (PROGRESS-2)")
    batch_id: int = Field(ge=0, json_schema_extra={"format": "int64"})


class CommitBody(Body):
    expected: str = Field(min_length=1, description="the metadata location the commit was based on")
    new: str = Field(min_length=1, description="the new metadata file, written before the request")
    operation: str = Field(min_length=1)
    snapshot_id: int | None = Field(None, json_schema_extra={"format": "int64"})
    summary: dict[str, Any] = Field(default_factory=dict)
    writer_batch: WriterBatchBody | None = None
    lease_token: str | None = None
    turn: str | None = Field(None, description="the table's turn this client holds, if any (CATHTTP-22)")
    want_turn: bool = Field(False, description="if refused `moved`, hand this client the table's turn (CATHTTP-22)")


class TurnAnswer(BaseModel):
    """A commit turn taken before building a commit (CATHTTP-25)."""

    turn: str
    turn_seconds: float
    current: str = Field(description="the table's current metadata location, to build the commit on")
    waited: bool = Field(description="whether another request held or waited for the turn (contention)")


class TurnBody(Body):
    turn: str = Field(min_length=1, description="a turn given by a refused commit (CATHTTP-22)")


class LeaseKeys(Body):
    table_uuid: str
    kind: str = Field(min_length=1)
    keys: list[str]
    owner: str = Field(min_length=1)


class AcquireBody(LeaseKeys):
    ttl: float = Field(gt=0, allow_inf_nan=False, description="seconds")


class RenewBody(Body):
    table_uuid: str
    kind: str = Field(min_length=1)
    key: str
    owner: str = Field(min_length=1)
    ttl: float = Field(gt=0, allow_inf_nan=False, description="seconds")


class TableAnswer(BaseModel):
    table_uuid: str
    metadata_location: str
    version: int


class LeaseHolderAnswer(BaseModel):
    owner: str
    expires_at: float = Field(description="seconds since the epoch; live while later than now (CAT-9)")


class CommitRow(BaseModel):
    identifier: str
    version: int
    old_metadata_location: str | None
    new_metadata_location: str
    committed_at: str = Field(description="ISO 8601, UTC")
    operation: str
    snapshot_id: int | None
    summary: dict[str, Any]


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    out: dict[int | str, dict[str, Any]] = {
        400: {"model": ErrorAnswer, "description": "The request breaks this binding (ValidationError, ...)"},
        401: {"model": ErrorBody, "description": "Missing or wrong bearer token"},
        403: {"model": ErrorAnswer, "description": "The served catalog is read-only"},
        500: {"model": ErrorAnswer, "description": "Internal error"},
        503: {"model": ErrorAnswer, "description": "The catalog lock stayed held (CatalogLockTimeoutError)"}}
    for status in statuses:
        out[status] = {"model": ErrorAnswer, "description": {404: "Not found", 409: "Refused"}[status]}
    return out
