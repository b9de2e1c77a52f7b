"""The schema and row count of many Parquet footers, compared as bytes (spec/compaction.md COMPACT-38).

Before a group of small inputs is read in one pass, every input's footer must have the
first input's schema and count the input's manifest ``record_count``. Parsing a footer
with pyarrow costs about 100 us (a file object, the Thrift decoder, a schema
descriptor); a footer's raw bytes are read in about 18 us. A Parquet footer is a
Thrift-compact ``FileMetaData`` whose first fields are ``version`` (1), ``schema`` (2) and
``num_rows`` (3), in that order as every writer emits them. :func:`footer_prefix` finds, in
the first input's footer, where the ``schema`` field ends; an input whose footer starts
with the very same bytes has the very same version and schema (the same bytes decode to
the same values), and its ``num_rows`` is the varint that follows
(:func:`rows_after_prefix`). A footer that differs in those bytes, or does not have the
expected layout, is reported as not matching: the caller then reads file by file, which
reads anything pyarrow reads.

Example:
    >>> first = read_footer("/data/a.parquet")
    >>> prefix = footer_prefix(first)
    >>> rows_after_prefix(read_footer("/data/b.parquet"), prefix)
    250
"""

from __future__ import annotations

import os

from lakefmt.thrift_compact import Truncated, skip, varint

MAGIC = b"PAR1"
TAIL_BYTES = 64 * 1024  # read at once from the end of a file; a larger footer takes a second read
_I64_FIELD_3 = 0x16  # field header: id delta 1, type i64 (compact protocol)


class _Malformed(Exception):
    """The bytes are not a Thrift-compact structure of the expected layout."""


def read_footer(path: str) -> bytes | None:
    """The ``FileMetaData`` bytes of the local Parquet file at ``path``; None when the file does not
    end with a plain (unencrypted) Parquet footer."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size < 12:
            return None
        tail = os.pread(fd, min(size, TAIL_BYTES), size - min(size, TAIL_BYTES))
        if tail[-4:] != MAGIC:
            return None
        length = int.from_bytes(tail[-8:-4], "little")
        if length <= 0 or length > size - 12:
            return None
        if length + 8 <= len(tail):
            return tail[-8 - length:-8]
        footer = os.pread(fd, length, size - 8 - length)
        return footer if len(footer) == length else None
    finally:
        os.close(fd)


def footer_prefix(footer: bytes) -> bytes | None:
    """The bytes of ``footer`` up to the end of its ``schema`` field, or None when it does not start
    with fields 1 (``version``) and 2 (``schema``) followed by 3 (``num_rows``)."""
    try:
        pos = _field(footer, 0, 0x15)  # version: i32
        pos = skip(footer, pos, 5)
        pos = _field(footer, pos, 0x19)  # schema: list<SchemaElement>
        end = skip(footer, pos, 9)
        _field(footer, end, _I64_FIELD_3)
    except (_Malformed, Truncated, IndexError, ValueError):
        return None
    return footer[:end]


def rows_after_prefix(footer: bytes, prefix: bytes) -> int | None:
    """``num_rows`` of a footer that starts with ``prefix`` (same version and schema), else None."""
    if not footer.startswith(prefix):
        return None
    try:
        value, _ = varint(footer, _field(footer, len(prefix), _I64_FIELD_3))
    except (_Malformed, Truncated, IndexError, ValueError):
        return None
    return (value >> 1) ^ -(value & 1)


def _field(data: bytes, pos: int, header: int) -> int:
    if data[pos] != header:
        raise _Malformed
    return pos + 1
