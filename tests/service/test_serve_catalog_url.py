"""``lakefmt serve`` owns a catalog file: given a catalog server's URL as its warehouse or catalog file, it
refuses to start as a usage error, having opened and written nothing (spec/catalog-http.md CATHTTP-15)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import lakefmt
from lakefmt.cli import EXIT_USER_ERROR, main
from tests.conftest import Cli
from tests.service.conftest import small_files_table

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

REFUSAL = "cannot itself use a catalog server (CATHTTP-15)"


def tree(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """A warehouse holding one table; the working folder is ``tmp_path`` (no ./lakefmt.toml is found)."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("LAKEFMT_")]:
        monkeypatch.delenv(name)
    small_files_table(lakefmt.Catalog(str(tmp_path / "warehouse"), create=True), "ops.events", appends=1, rows=10)
    return Cli(tmp_path / "warehouse", capsys)


def assert_refused(code: int, out: str, err: str, url: str, what: str) -> None:
    assert code == EXIT_USER_ERROR == 2, err
    assert out == "" and "Traceback" not in err
    assert err.startswith(f"error: lakefmt serve was given the catalog server {url} as its {what}: "), err
    assert REFUSAL in err and "--catalog-path <catalog file>" in err


@pytest.mark.parametrize(("args", "url", "what"), [
    (["--warehouse", "http://127.0.0.1:9"], "http://127.0.0.1:9", "warehouse"),
    (["--catalog", "HTTPS://catalog.internal:8765/"], "HTTPS://catalog.internal:8765/", "catalog file"),
    (["--catalog-path", "http://127.0.0.1:9", "--port", "0"], "http://127.0.0.1:9", "catalog file"),
    (["--warehouse", "http://127.0.0.1:9", "--demo"], "http://127.0.0.1:9", "warehouse"),  # --demo would create
], ids=["warehouse", "catalog", "catalog-path", "demo"])
def test_serve_refuses_a_catalog_server_url(cli: Cli, tmp_path: Path, args: list[str], url: str, what: str):
    """CATHTTP-15: refused before the URL is contacted and before any catalog is opened or created."""
    # spec: CATHTTP-15
    before = tree(tmp_path)
    assert_refused(*cli("serve", *args), url=url, what=what)
    assert tree(tmp_path) == before


def test_serve_refuses_a_catalog_server_url_from_its_config_file(cli: Cli, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]):
    """CATHTTP-15: the URL may come from the configuration file as well as the command line."""
    config = tmp_path / "serve.toml"
    config.write_text('[service]\nwarehouse = "http://127.0.0.1:9"\nport = 0\n')
    before = tree(tmp_path)
    capsys.readouterr()
    code = main(["serve", "--config", str(config)])
    assert_refused(code, *capsys.readouterr(), url="http://127.0.0.1:9", what="warehouse")
    assert tree(tmp_path) == before
