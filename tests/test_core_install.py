"""The core works with only its required dependencies (pyproject.toml ``dependencies``).

pyarrow does not require numpy, and pandas is an extra, so a ``pip install lakefmt``
may have neither. A subprocess hides both (as if they were not installed) and runs the
README's first steps: create, append, filtered and full scans, compaction, maintenance.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_core_runs_without_numpy_and_pandas(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys

        class Missing:  # as if numpy and pandas were not installed
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("numpy", "pandas"):
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

        sys.meta_path.insert(0, Missing())
        from datetime import datetime, timedelta, timezone
        import pyarrow as pa
        import lakefmt

        cat = lakefmt.Catalog({str(tmp_path / "wh")!r}, create=True)
        schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("k", pa.int64()), ("s", pa.string())])
        t = cat.create_table("ns.t", schema, partition_by=["day(ts)"],
                             properties={{"write.parquet.row-group-rows": "100"}})
        start = datetime(2026, 1, 1, tzinfo=timezone.utc)
        for i in range(4):
            t.append(pa.table({{"ts": [start + timedelta(minutes=j) for j in range(500)],
                                "k": list(range(i * 500, (i + 1) * 500)),
                                "s": [f"v{{j % 7}}" for j in range(500)]}}, schema=schema))
        assert t.scan(filter="k >= 10 AND k < 20 AND s = 'v3'", columns=["s"]).to_arrow().num_rows == 2  # k = 10, 17
        assert t.scan(filter="k < 1000 OR k >= 1990", columns=["k", "s"]).to_arrow().num_rows == 1010
        assert t.scan().to_arrow().num_rows == 2000
        result = t.compaction.run("sort", sort_by=["k"], min_age_seconds=0, min_input_files=2)
        assert result.files_rewritten == 4, result.summary()
        assert t.scan().to_arrow().num_rows == 2000 and len(t.plan_files()) < 4
        t.maintenance.expire_snapshots(older_than=timedelta(0), retain_last=1)
        assert t.check().ok
        assert "numpy" not in sys.modules and "pandas" not in sys.modules
        print("OK")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("OK")
