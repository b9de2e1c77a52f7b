"""How ``lakefmt serve`` starts, as a real process: authentication is never off by accident, and ``/docs``
needs no internet (spec/service.md SERVICE-19, SERVICE-29)."""

from __future__ import annotations

import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

import lakefmt
from tests.service.conftest import TOKEN, serve_command, serve_env, small_files_table

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
swagger_ui_path = pytest.importorskip("swagger_ui_bundle").swagger_ui_path


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    catalog = lakefmt.Catalog(str(tmp_path / "wh"), create=True)
    small_files_table(catalog, "ops.events", appends=2, rows=60)
    return tmp_path / "wh"


def tree(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def refused(warehouse: Path, *args: str, env: dict[str, str]) -> str:
    """Run `lakefmt serve` that must refuse to start; returns its stderr. Nothing in the warehouse changes."""
    before = tree(warehouse)
    done = subprocess.run(serve_command(warehouse, *args), check=False, env=serve_env(env), capture_output=True,
                          text=True, timeout=120, cwd=str(warehouse.parent))
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.startswith("error: "), done.stderr
    assert tree(warehouse) == before  # refused before the catalog was opened: no instance row, no job
    return done.stderr


def test_an_empty_token_refuses_to_start(warehouse):
    """SERVICE-29: LAKEFMT_SERVICE_TOKEN="" is a configuration error, not 'authentication off'."""
    err = refused(warehouse, env={"LAKEFMT_SERVICE_TOKEN": ""})
    assert "token is empty (LAKEFMT_SERVICE_TOKEN)" in err and "unset it" in err


def test_every_interface_without_a_token_refuses_to_start(warehouse):
    """SERVICE-29: 0.0.0.0 without a token is refused, naming the ways out."""
    err = refused(warehouse, "--host", "0.0.0.0", env={})
    assert "refusing to serve without a token on '0.0.0.0'" in err
    assert "LAKEFMT_SERVICE_TOKEN" in err and "--insecure" in err


def test_insecure_starts_on_every_interface_with_a_warning(warehouse, start_service):
    """SERVICE-29: --insecure serves without a token on 0.0.0.0, and says so in a warning line."""
    proc = start_service(warehouse, args=["--host", "0.0.0.0", "--insecure"], token=None)
    [warning] = proc.events("service.insecure")
    assert warning["level"] == "warning" and "WITHOUT AUTHENTICATION on 0.0.0.0" in warning["message"]
    assert proc.events("service.started")[0]["auth"] is False
    port = proc.events("service.listening")[0]["port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/status", timeout=30) as resp:
        assert resp.status == 200  # no token asked
    assert proc.terminate() == 0


def test_loopback_without_a_token_starts_with_a_warning(warehouse, start_service):
    proc = start_service(warehouse, token=None)
    [warning] = proc.events("service.unauthenticated")
    assert warning["level"] == "warning" and "LAKEFMT_SERVICE_TOKEN" in warning["message"]
    assert not proc.events("service.insecure")
    assert proc.http.get("/api/v1/status", token=None)[0] == 200
    assert proc.terminate() == 0


def test_docs_load_nothing_from_another_host(warehouse, start_service):
    """SERVICE-19: /docs and every script, style sheet and icon it references are served locally, no token."""
    proc = start_service(warehouse)
    assert not proc.events("service.unauthenticated")  # a token is set
    status, page = proc.http.get("/docs", token=None)
    assert status == 200 and "SwaggerUIBundle" in page
    assert not re.search(r"(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", page), page  # no CDN, no other host
    refs = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert len(refs) == 3 and all(ref.startswith("/docs/assets/") for ref in refs), refs
    for ref in refs:
        with urllib.request.urlopen(proc.url + ref, timeout=30) as resp:  # no Authorization header
            body, ctype = resp.read(), resp.headers["Content-Type"]
        assert resp.status == 200 and body == (Path(swagger_ui_path) / ref.rsplit("/", 1)[1]).read_bytes(), ref
        assert len(body) > (100_000 if ref.endswith((".js", ".css")) else 100), ref
        assert ctype.split(";")[0] in ("text/javascript", "application/javascript", "text/css", "image/png"), ctype
    assert "url: '/openapi.json'" in page and proc.http.get("/openapi.json", token=None)[0] == 200
    assert TOKEN not in page
    assert proc.terminate() == 0
