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
        pos = _skip(footer, pos, 5)
        pos = _field(footer, pos, 0x19)  # schema: list<SchemaElement>
        end = _skip(footer, pos, 9)
        _field(footer, end, _I64_FIELD_3)
    except (_Malformed, IndexError):
        return None
    return footer[:end]


def rows_after_prefix(footer: bytes, prefix: bytes) -> int | None:
    """``num_rows`` of a footer that starts with ``prefix`` (same version and schema), else None."""
    if not footer.startswith(prefix):
        return None
    try:
        value, _ = _varint(footer, _field(footer, len(prefix), _I64_FIELD_3))
    except (_Malformed, IndexError):
        return None
    return (value >> 1) ^ -(value & 1)


def _field(data: bytes, pos: int, header: int) -> int:
    if data[pos] != header:
        raise _Malformed
    return pos + 1


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise _Malformed


def _skip(data: bytes, pos: int, kind: int) -> int:
    """The position after a value of compact type ``kind`` starting at ``pos``."""
    if kind in (1, 2):  # a boolean field carries its value in its header
        return pos
    if kind == 3:
        return pos + 1
    if kind in (4, 5, 6):
        return _varint(data, pos)[1]
    if kind == 7:
        return pos + 8
    if kind == 8:
        length, pos = _varint(data, pos)
        return pos + length
    if kind in (9, 10):
        head = data[pos]
        pos += 1
        count, element = head >> 4, head & 0x0F
        if count == 15:
            count, pos = _varint(data, pos)
        for _ in range(count):
            pos = pos + 1 if element in (1, 2) else _skip(data, pos, element)
        return pos
    if kind == 11:
        count, pos = _varint(data, pos)
        if count == 0:
            return pos
        types = data[pos]
        pos += 1
        for _ in range(count):
            pos = _skip(data, pos, types >> 4)
            pos = _skip(data, pos, types & 0x0F)
        return pos
    if kind == 12:
        while True:
            head = data[pos]
            pos += 1
            if head == 0:
                return pos
            if head >> 4 == 0:
                pos = _varint(data, pos)[1]  # a field id of its own (zigzag i16)
            pos = _skip(data, pos, head & 0x0F)
    raise _Malformed
