"""Registering a table through the catalog server (spec/catalog-http.md CATHTTP-16; spec/catalog.md CAT-20):
the server's app on a loopback port over a real catalog file, reached by ``lakefmt.Catalog(url)``, the
command line and raw requests. A refused registration changes nothing in the catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakefmt
from lakefmt.catalog_client import RemoteCatalog
from tests.conftest import Cli, rows
from tests.service.conftest import TOKEN
from tests.service.test_catalog_api import SCHEMA, P, catalog_state, serve  # noqa: F401 - serve: a fixture

ROWS = [(1, "a"), (2, "b"), (3, "c")]


def dropped_table(catalog: lakefmt.Catalog) -> tuple[lakefmt.Table, str]:
    """A table of three commits (version 3), dropped from the catalog with its files kept (CAT-8)."""
    t = catalog.create_table("ops.events", schema=SCHEMA)
    t.append(pa.table({"id": [1, 2], "name": ["a", "b"]}, schema=SCHEMA), idempotency=("ingest", 4))
    t.append(pa.table({"id": [3], "name": ["c"]}, schema=SCHEMA), idempotency=("ingest", 7))
    catalog.drop_table("ops.events")
    return t, t.metadata_location


def test_a_client_registers_a_table_through_the_server(serve: Any, tmp_path: Path,  # noqa: F811
                                                       capsys: pytest.CaptureFixture[str]):
    """CATHTTP-16: the server reads the metadata file and registers it as CAT-20 says; the client gets a table
    it reads and writes; the command line's ``register`` takes the server's URL too."""
    # spec: CATHTTP-16
    served = serve()
    local = served.catalog
    t, location = dropped_table(local)
    remote = RemoteCatalog(served.http.url, token=TOKEN)

    table = remote.register_table("arch.events", location)
    assert (table.name, table.metadata_location, table.metadata.table_uuid) == (
        "arch.events", location, t.metadata.table_uuid)
    [registered] = local.commit_log("arch.events")
    assert (registered.operation, registered.version, registered.old_metadata_location,
            registered.new_metadata_location, registered.snapshot_id) == (
        "register", 3, None, location, t.metadata.current_snapshot_id)
    assert "arch" in local.list_namespaces()  # created with the table
    assert rows(remote.load_table("arch.events").scan().to_arrow()) == ROWS
    with pytest.raises(lakefmt.AlreadyCommittedError):  # the writer's batch survived the round trip
        table.append(pa.table({"id": [9], "name": ["z"]}, schema=SCHEMA), idempotency=("ingest", 7))
    table.append(pa.table({"id": [4], "name": ["d"]}, schema=SCHEMA), idempotency=("ingest", 8))
    assert rows(local.load_table("arch.events").scan().to_arrow()) == [*ROWS, (4, "d")]

    remote.drop_table("arch.events")
    cli = Cli(tmp_path / "unused", capsys)
    assert cli.ok("register", "--warehouse", served.http.url, "--token", TOKEN, "cli.events", location) == (
        f"registered cli.events at {location}\n")
    assert local.current_metadata_location("cli.events") == location
    assert rows(local.load_table("cli.events").scan().to_arrow()) == ROWS


def test_refused_registrations_change_nothing(serve: Any, tmp_path: Path):  # noqa: F811
    """CATHTTP-16 with CATHTTP-3: each refusal names the lakefmt error the local catalog raises, with the
    status the binding gives it, and the catalog's rows stay as they were."""
    # spec: CATHTTP-16
    served = serve()
    http, local = served.http, served.catalog
    t, location = dropped_table(local)
    local.register_table("ops.events", location)
    garbage = Path(t.location, "metadata", "v000009-garbage.metadata.json")
    garbage.write_text("{}")
    before = catalog_state(local)

    for body, status, error in [
            ({"name": "other", "metadata_location": "ops/events/metadata/v000003-x.metadata.json"},  # relative
             400, "ValidationError"),
            ({"name": "other", "metadata_location": location.replace("/metadata/", "/meta/")}, 400, "ValidationError"),
            ({"name": "other", "metadata_location": location, "purge": True}, 400, "ValidationError"),
            ({"name": "bad-name", "metadata_location": location}, 400, "InvalidNameError"),
            ({"name": "other", "metadata_location": "s3://bucket/t/metadata/v000001-x.metadata.json"},
             409, "ValidationError"),
            ({"name": "other", "metadata_location": location.replace(".metadata.json", "0.metadata.json")},
             409, "CorruptMetadataError"),  # missing
            ({"name": "other", "metadata_location": str(garbage)}, 409, "CorruptMetadataError"),
            ({"name": "events", "metadata_location": location}, 409, "TableExistsError"),  # the name is taken
            ({"name": "other", "metadata_location": location}, 409, "TableExistsError")]:  # LAYOUT-11
        got = http.post(P + "/namespaces/ops/register", body)
        assert (got[0], got[1]["error"]) == (status, error), (body, got)
    status, body = http.post(P + "/namespaces/ops/register", {"name": "other", "metadata_location": location})
    assert "already registered as ops.events" in body["message"] and "LAYOUT-11" in body["message"]
    assert catalog_state(local) == before

    remote = RemoteCatalog(served.http.url, token=TOKEN)
    with pytest.raises(lakefmt.TableExistsError, match="table ops.events already exists"):
        remote.register_table("ops.events", location)
    with pytest.raises(lakefmt.CorruptMetadataError):
        remote.register_table("ops.other", str(garbage))
    with pytest.raises(lakefmt.ValidationError, match=r"not a metadata file location.*\(LAYOUT-9\)"):
        remote.register_table("ops.other", str(tmp_path / "x.json"))
    with pytest.raises(lakefmt.ValidationError, match="is not on the warehouse's store"):
        remote.register_table("ops.other", "s3://bucket/t/metadata/v000001-x.metadata.json")
    with pytest.raises(lakefmt.ValidationError, match="run `lakefmt recover` on the catalog server's machine"):
        RemoteCatalog.recover(served.http.url)  # recovery rebuilds the catalog file: it has no endpoint
    assert catalog_state(local) == before


def test_a_read_only_server_refuses_to_register(serve: Any, tmp_path: Path):  # noqa: F811
    """CATHTTP-16 with CAT-18: 403 ReadOnlyCatalogError, nothing written."""
    # spec: CATHTTP-16
    writable = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    _, location = dropped_table(writable)
    before = catalog_state(writable)
    served = serve(lakefmt.Catalog(str(tmp_path / "wh"), read_only=True), router_only=True)
    status, body = served.http.post(P + "/namespaces/ops/register", {"name": "events", "metadata_location": location})
    assert (status, body["error"]) == (403, "ReadOnlyCatalogError")
    with pytest.raises(lakefmt.ReadOnlyCatalogError):
        RemoteCatalog(served.http.url, token=TOKEN).register_table("ops.events", location)
    assert catalog_state(writable) == before
