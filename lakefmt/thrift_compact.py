"""Reading and writing the few pieces of Thrift's compact protocol that Parquet page headers and
footers need (spec/reading.md READ-15, spec/compaction.md COMPACT-38).

pyarrow parses a Parquet file's footer and page headers but exposes neither the page headers of
a column chunk nor a footer's raw layout. :mod:`lakefmt.parquet_pages` walks page headers (a
few integer fields each) and writes headers of pages of nulls; :mod:`lakefmt.compaction.footer_bytes`
compares footers up to the end of their schema. Both need only varints, zigzag integers, field
headers and skipping values of any type, which is all this module holds: a full Thrift library
would decode every field of every header, and walking a chunk's headers here costs about 8 us a
page.

Example:
    >>> values, end = read_struct(header_bytes, 0, {1: None, 3: None})
    >>> values[3]  # compressed_page_size
    180012
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["Truncated", "i32_field", "read_struct", "skip", "skip_element", "uvarint", "varint"]


class Truncated(Exception):
    """The value runs past the bytes given."""


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it."""
    if pos < len(buf) and buf[pos] < 0x80:  # one byte: most field values and lengths in a page header
        return buf[pos], pos + 1
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise Truncated
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def read_struct(buf: bytes, pos: int, wanted: Mapping[int, Any] | None) -> tuple[dict[int, Any], int]:
    """The integer fields named in ``wanted`` of the struct at ``pos`` (nested: ``wanted[id]``
    names the fields of a struct field), and the position after the struct."""
    values: dict[int, Any] = {}
    last = 0
    while True:
        if pos >= len(buf):
            raise Truncated
        head = buf[pos]
        pos += 1
        if head == 0:
            return values, pos
        kind = head & 0x0F
        if head >> 4:
            field = last + (head >> 4)
        else:
            raw, pos = varint(buf, pos)
            field = (raw >> 1) ^ -(raw & 1)
        last = field
        if wanted is not None and field in wanted:
            if kind in (5, 6):
                raw, pos = varint(buf, pos)
                values[field] = (raw >> 1) ^ -(raw & 1)
                continue
            if kind == 12:
                values[field], pos = read_struct(buf, pos, wanted[field])
                continue
        pos = skip(buf, pos, kind)


def skip(buf: bytes, pos: int, kind: int) -> int:
    """The position after a value of compact type ``kind`` at ``pos`` (a struct field's value: a
    boolean is in its field header); ValueError for a type the protocol does not have."""
    if kind in (1, 2):  # a boolean field's value is its type
        return pos
    if kind == 3:
        return pos + 1
    if kind in (4, 5, 6):  # a varint: skipped without decoding it
        end = len(buf)
        while pos < end:
            pos += 1
            if buf[pos - 1] < 0x80:
                return pos
        raise Truncated
    if kind == 7:
        return pos + 8
    if kind == 8:
        n, pos = varint(buf, pos)
        return pos + n
    if kind in (9, 10):
        if pos >= len(buf):
            raise Truncated
        head = buf[pos]
        pos += 1
        size, element = head >> 4, head & 0x0F
        if size == 15:
            size, pos = varint(buf, pos)
        for _ in range(size):
            pos = skip_element(buf, pos, element)
            if pos > len(buf):
                raise Truncated
        return pos
    if kind == 11:
        size, pos = varint(buf, pos)
        if size:
            if pos >= len(buf):
                raise Truncated
            kinds = buf[pos]
            pos += 1
            for _ in range(size):
                pos = skip_element(buf, skip_element(buf, pos, kinds >> 4), kinds & 0x0F)
                if pos > len(buf):
                    raise Truncated
        return pos
    if kind == 12:
        return read_struct(buf, pos, None)[1]
    raise ValueError(f"unknown Thrift compact type {kind}")


def skip_element(buf: bytes, pos: int, kind: int) -> int:
    """:func:`skip` for an element of a list, set or map, where a boolean takes a byte."""
    return pos + 1 if kind in (1, 2) else skip(buf, pos, kind)  # a boolean element takes a byte


def uvarint(n: int) -> bytes:
    """The varint of ``n`` (at least 0)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def i32_field(delta: int, value: int) -> bytes:
    """A field header of type i32 whose id is ``delta`` after the previous field's, and its value."""
    return bytes([(delta << 4) | 5]) + uvarint((value << 1) ^ (value >> 31))
