"""Data files written through the writer's output buffer (lakefmt.write.OUTPUT_BUFFER_BYTES).

The Parquet writer's bytes reach the IO's file in buffers of several MiB. Files larger
than one buffer must still roll at the target size by bytes written (WRITE-5), record
their exact size (WRITE-6) and hold exactly the rows written, locally and on S3.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

import lakefmt
from lakefmt.write import OUTPUT_BUFFER_BYTES

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("blob", pa.string())])


def _rows(n: int) -> pa.Table:
    """Rows with a random (incompressible) 2,000-character hex string each."""
    return pa.table({"id": pa.array(range(n), pa.int64()),
                     "blob": pa.array([os.urandom(1000).hex() for _ in range(n)])}, schema=SCHEMA)


def test_files_larger_than_the_buffer_roll_and_record_their_size(catalog: lakefmt.Catalog) -> None:
    target = OUTPUT_BUFFER_BYTES + 1024 * 1024
    t = catalog.create_table("ns.buffered", SCHEMA,
                             properties={"write.target-file-size-bytes": str(target),
                                         "write.parquet.row-group-rows": "1024"})
    data = _rows(20_000)  # 40 MB of values, ~20 MB after ZSTD: files of more than one buffer
    t.append(data)
    t.refresh()
    files = list(t.plan_files())
    assert len(files) >= 3, [f.file_size_bytes for f in files]
    for f in files:
        location = f"{t.location}/{f.path}"
        assert t.io.size(location) == f.file_size_bytes  # the size recorded is the size stored (WRITE-6)
        with t.io.open_input(location) as source:
            assert pq.read_metadata(source).num_rows == f.record_count
    full = sorted(files, key=lambda f: f.file_size_bytes)[1:]  # every file but the last one rolled at the target
    assert all(f.file_size_bytes >= target for f in full)
    assert max(f.file_size_bytes for f in files) > OUTPUT_BUFFER_BYTES
    got = t.scan().to_arrow().sort_by("id")
    assert got.num_rows == data.num_rows
    assert got.equals(data)
