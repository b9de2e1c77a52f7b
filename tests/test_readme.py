"""The README's Python API example runs as written (so the front page cannot drift from the code)."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.compute as pc

from tests.conftest import downlinks

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_opens_with_the_two_commands():
    block = re.search(r"```bash\n(.*?)```", README.read_text(), re.DOTALL)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["pip install -e . && lakefmt demo", "pip install -e '.[dev]' && python -m pytest"]


def test_readme_python_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Catalog("warehouse") is relative to the working directory
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)[0]
    data = downlinks(3000)
    names = {"arrow_table": data,
             "new_rows_of_mission_2": downlinks(100, seed=4).filter(pc.field("mission_id") == 2),
             "corrections": data.slice(0, 50),
             "source": downlinks(40, seed=8)}
    exec(compile(code, str(README), "exec"), names)  # noqa: S102 - our own README
    assert names["rows"].num_rows > 0
    t = names["t"]
    assert t.metadata.format_version == 2  # the first deletion vector upgraded the table (FMT-4)
    assert names["report"].proven
    assert t.scan(filter="payload_id = 7").to_arrow().num_rows == 0
    assert (tmp_path / "warehouse" / "catalog.duckdb").exists()
