"""Arrow arrays and scalars of Python values, built from buffers (manifests, partition values, literals).

``pa.array`` and ``pa.scalar`` on Python values, and compute functions given a Python
number, first ask pyarrow's pandas shim whether the value is a pandas object, and the shim
imports pandas to answer when pandas is installed: 0.15-0.4 s, which every process that
appends, writes a manifest or evaluates a filter would pay for nothing. :func:`array` and
:func:`scalar` build the same arrays from buffers for the types lakefmt's metadata and
filters use (null, boolean, integers, floats, strings, binary, dates, times, timestamps,
durations, structs of dicts, lists, maps); a value of any other type or kind goes through
``pa.array``, which gives the same result.

Example:
    >>> array([1, None, 3], pa.int64()).to_pylist()
    [1, None, 3]
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from itertools import accumulate, repeat
from operator import is_
from typing import Any

import pyarrow as pa

_INT_CODES = {(8, True): "b", (16, True): "h", (32, True): "i", (64, True): "q",
              (8, False): "B", (16, False): "H", (32, False): "I", (64, False): "Q"}


class _Unsupported(Exception):
    """A value or type this module does not build: ``pa.array`` builds it instead."""


def array(values: Sequence[Any], type: pa.DataType) -> pa.Array:
    """``pa.array(values, type)``, without importing pandas for the types listed above."""
    try:
        return _build(list(values), type)
    except (_Unsupported, struct.error, OverflowError, UnicodeEncodeError):
        return pa.array(values, type)  # also raises pyarrow's error for a value that does not fit


def scalar(value: Any, type: pa.DataType) -> pa.Scalar:
    """``pa.scalar(value, type)``, without importing pandas for the types listed above."""
    return array([value], type)[0]


def table(columns: Mapping[str, Sequence[Any]], schema: pa.Schema) -> pa.Table:
    """``pa.Table.from_pydict(columns, schema=schema)``: a list of Python values per field of ``schema``."""
    return pa.Table.from_arrays([array(columns[f.name], f.type) for f in schema], schema=schema)


def _of_kinds(values: list[Any], kinds: tuple[type, ...]) -> bool:
    """Whether every value is None or an instance of ``kinds``; the exact types are checked first, in C."""
    exact = set(map(type, values))
    exact.discard(type(None))
    return exact <= set(kinds) or all(v is None or isinstance(v, kinds) for v in values)


def _has_none(values: list[Any]) -> bool:
    """Whether any value is None, by identity (no value's ``__eq__`` is called), in C."""
    return any(map(is_, values, repeat(None)))


def _validity(values: list[Any]) -> pa.Buffer | None:
    if not _has_none(values):
        return None
    bits = bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        if v is not None:
            bits[i >> 3] |= 1 << (i & 7)
    return pa.py_buffer(bytes(bits))


def _mask(values: list[Any]) -> pa.Array | None:
    """A boolean array, true where the value is None (the ``mask`` of the nested builders)."""
    if not _has_none(values):
        return None
    return _build([v is None for v in values], pa.bool_())


def _packed(code: str, values: list[Any], kinds: tuple[type, ...]) -> pa.Buffer:
    if not _of_kinds(values, kinds):
        raise _Unsupported
    if _has_none(values):
        values = [0 if v is None else v for v in values]
    return pa.py_buffer(struct.pack(f"<{len(values)}{code}", *values))


def _offsets(lengths: list[int], large: bool) -> pa.Buffer:
    return pa.py_buffer(struct.pack(f"<{len(lengths) + 1}{'q' if large else 'i'}", 0, *accumulate(lengths)))


def _build(values: list[Any], t: pa.DataType) -> pa.Array:
    n = len(values)
    if pa.types.is_null(t):
        return pa.nulls(n)
    if pa.types.is_boolean(t):
        if not _of_kinds(values, (bool,)):
            raise _Unsupported
        bits = bytearray((n + 7) // 8)
        for i, v in enumerate(values):
            if v:
                bits[i >> 3] |= 1 << (i & 7)
        return pa.Array.from_buffers(t, n, [_validity(values), pa.py_buffer(bytes(bits))])
    if pa.types.is_integer(t):
        code = _INT_CODES[(t.bit_width, pa.types.is_signed_integer(t))]
        return pa.Array.from_buffers(t, n, [_validity(values), _packed(code, values, (int,))])
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        code = "f" if pa.types.is_float32(t) else "d"
        return pa.Array.from_buffers(t, n, [_validity(values), _packed(code, values, (float,))])
    if pa.types.is_date32(t) or pa.types.is_time32(t):  # day or time numbers (TYPE-2)
        return pa.Array.from_buffers(t, n, [_validity(values), _packed("i", values, (int,))])
    if pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_duration(t) or pa.types.is_date64(t):
        return pa.Array.from_buffers(t, n, [_validity(values), _packed("q", values, (int,))])
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        text = pa.types.is_string(t) or pa.types.is_large_string(t)
        kind = (str,) if text else (bytes, bytearray, memoryview)
        if not _of_kinds(values, kind):
            raise _Unsupported
        if text:
            encoded = [b"" if v is None else v.encode() for v in values] if _has_none(values) else [
                v.encode() for v in values]
        else:
            encoded = [b"" if v is None else bytes(v) for v in values]
        large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        return pa.Array.from_buffers(t, n, [_validity(values), _offsets([len(b) for b in encoded], large),
                                            pa.py_buffer(b"".join(encoded))])
    if pa.types.is_struct(t):
        if not _of_kinds(values, (dict, Mapping)):  # dict: the exact type, checked in C
            raise _Unsupported
        fields = [t.field(i) for i in range(t.num_fields)]
        if not fields:
            raise _Unsupported
        # Under a null struct each child holds its type's zero value, as pa.array builds it.
        children = []
        for f in fields:
            zero, name = _zero(f.type), f.name
            children.append(_build([zero if v is None else v.get(name) for v in values], f.type))
        return pa.StructArray.from_arrays(children, fields=fields, mask=_mask(values))
    if pa.types.is_map(t):
        pairs = [None if v is None else list(v.items() if isinstance(v, Mapping) else v) for v in values]
        if not all(p is None or all(isinstance(kv, tuple) and len(kv) == 2 for kv in p) for p in pairs):
            raise _Unsupported
        flat = [kv for p in pairs if p is not None for kv in p]
        offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, _offsets([0 if p is None else len(p)
                                                                           for p in pairs], False)])
        return pa.MapArray.from_arrays(offsets, _build([k for k, _ in flat], t.key_type),
                                       _build([v for _, v in flat], t.item_type), type=t, mask=_mask(values))
    if pa.types.is_list(t):
        if not all(v is None or isinstance(v, (list, tuple)) for v in values):
            raise _Unsupported
        offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, _offsets([0 if v is None else len(v)
                                                                           for v in values], False)])
        flat = [x for v in values if v is not None for x in v]
        return pa.ListArray.from_arrays(offsets, _build(flat, t.value_type), type=t, mask=_mask(values))
    raise _Unsupported


def _zero(t: pa.DataType) -> Any:
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_floating(t):
        return 0.0
    if pa.types.is_integer(t) or pa.types.is_temporal(t):
        return 0
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ""
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return b""
    if pa.types.is_list(t) or pa.types.is_map(t):
        return []
    if pa.types.is_struct(t):
        return {}
    raise _Unsupported


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of no rows of ``schema``, like ``schema.empty_table()``, which imports pandas the
    first time (about 0.25 s, pyarrow 26) in a process that has not."""
    return pa.Table.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)
