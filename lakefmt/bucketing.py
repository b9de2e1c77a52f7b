"""Bucket hashing for the ``bucket[N]`` transform (spec/partitioning.md, PART-4).

Iceberg's definition bit for bit: MurmurHash3 x86 32-bit (seed 0) of the value's
bucket serialization (ints, dates, times and timestamps as 8-byte little-endian
longs, strings as UTF-8, binary as is, decimals as minimal big-endian unscaled
bytes); the bucket is ``(hash & 0x7FFFFFFF) % N``.

Hashing uses the ``mmh3`` library (``mmh3.hash(data, 0, signed=True)`` is that
variant). Variable-width values (strings, binary, decimals) are hashed once per
distinct value: the array is dictionary-encoded in Arrow, ``mmh3`` hashes the
dictionary, and the hashes are taken back to the rows.

Fixed-width values (the 8-byte little-endian longs) keep a vectorized
MurmurHash3 in ``pyarrow.compute`` uint32 arithmetic, for a measured reason:
on 1,000,000 random int64 values it takes 0.024 s of CPU, against 0.21 s for
``mmh3.hash`` called per value (the Python loop and the packing dominate, not
the hash). The spec's test vectors check both paths against each other.
"""

from __future__ import annotations

import struct
from typing import Any

import mmh3
import pyarrow as pa
import pyarrow.compute as pc

from lakefmt import arrow_values
from lakefmt.conversions import to_bytes, to_physical
from lakefmt.errors import SchemaError
from lakefmt.types import LakeType

_C1, _C2, _M32 = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
_FIXED_WIDTH = ("int", "long", "date", "time", "timestamp", "timestamptz")


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit of ``data``, as a signed 32-bit int (like Guava/Iceberg)."""
    return mmh3.hash(data, seed, signed=True)


def bucket_hash(value: Any, source: LakeType) -> int:
    """The signed 32-bit Iceberg bucket hash of one physical value (PART-4)."""
    name = source.name
    if name in _FIXED_WIDTH:
        return murmur3_32(struct.pack("<q", value))
    if name == "string":
        return murmur3_32(value.encode("utf-8"))
    if name == "binary":
        return murmur3_32(bytes(value))
    if name == "decimal":
        return murmur3_32(to_bytes(source, value))
    raise SchemaError(f"cannot bucket a {source} value")


def _u32(value: int) -> pa.Scalar:
    return arrow_values.scalar(value, pa.uint32())  # not pa.scalar: that imports pandas


def _rotl_array(x: pa.Array, r: int) -> pa.Array:
    return pc.bit_wise_or(pc.shift_left(x, _u32(r)), pc.shift_right(x, _u32(32 - r)))


def _mix_block(h: pa.Array | None, k: pa.Array) -> pa.Array:
    k = pc.multiply(_rotl_array(pc.multiply(k, _u32(_C1)), 15), _u32(_C2))
    h = k if h is None else pc.bit_wise_xor(h, k)
    return pc.add(pc.multiply(_rotl_array(h, 13), _u32(5)), _u32(0xE6546B64))


def _murmur3_long_array(values: pa.Array) -> pa.Array:
    """Vectorized murmur3 of each int64 value's 8-byte little-endian form (uint32 result)."""
    u = values.cast(pa.uint64(), safe=False)
    low = pc.bit_wise_and(u, arrow_values.scalar(_M32, pa.uint64())).cast(pa.uint32())
    high = pc.shift_right(u, arrow_values.scalar(32, pa.uint64())).cast(pa.uint32())
    h = pc.bit_wise_xor(_mix_block(_mix_block(None, low), high), _u32(8))
    h = pc.bit_wise_xor(h, pc.shift_right(h, _u32(16)))
    h = pc.multiply(h, _u32(0x85EBCA6B))
    h = pc.bit_wise_xor(h, pc.shift_right(h, _u32(13)))
    h = pc.multiply(h, _u32(0xC2B2AE35))
    return pc.bit_wise_xor(h, pc.shift_right(h, _u32(16)))


def _distinct_hashes(dictionary: pa.Array, source: LakeType) -> pa.Array:
    """mmh3 hashes of the distinct values of a dictionary-encoded array, one per value."""
    name = source.name
    if name == "string":  # mmh3 hashes a str as its UTF-8 bytes
        values = dictionary.to_pylist()
    elif name == "binary":
        values = dictionary.cast(pa.large_binary()).to_pylist()
    elif name == "decimal":
        values = [to_bytes(source, to_physical(source, v)) for v in dictionary.to_pylist()]
    else:
        raise SchemaError(f"cannot bucket a {source} value")
    return arrow_values.array([mmh3.hash(v, 0, signed=True) for v in values], pa.int32())


def hash_array(arr: pa.Array | pa.ChunkedArray, source: LakeType) -> pa.Array:
    """Vectorized :func:`bucket_hash`: signed int32 hashes, null for null (PART-4)."""
    name = source.name
    if name in ("int", "date"):
        return _murmur3_long_array(arr.cast(pa.int32()).cast(pa.int64())).cast(pa.int32(), safe=False)
    if name in ("long", "time", "timestamp", "timestamptz"):
        return _murmur3_long_array(arr.cast(pa.int64())).cast(pa.int32(), safe=False)
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    encoded = pc.dictionary_encode(arr)
    return pc.take(_distinct_hashes(encoded.dictionary, source), encoded.indices)


def bucket_array(hashes: pa.Array, n: int) -> pa.Array:
    mask, count = arrow_values.scalar(0x7FFFFFFF, pa.int64()), arrow_values.scalar(n, pa.int64())
    positive = pc.bit_wise_and(hashes.cast(pa.int64()), mask)
    return pc.subtract(positive, pc.multiply(pc.divide(positive, count), count)).cast(pa.int32())
