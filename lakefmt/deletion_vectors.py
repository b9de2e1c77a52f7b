"""Deletion vectors: which rows of a data file are deleted (spec/deletes.md, DV-1..DV-8).

A deletion vector is a set of 0-based row positions of one data file. It is stored as
a *blob* inside a deletion-vector file (``data/deletes/dv-{unique}.bin``, LAYOUT-12);
a manifest entry points at its blob by path, offset and length (MAN-2 column 14). One
file holds the blobs of every vector one commit attempt writes, so a delete that
touches a thousand data files writes one small file.

Blob layout (little-endian; DV-2): ``b"LFDV"``, the encoding (1 = sorted uint64
positions, 2 = bitmap), three zero bytes, the cardinality and the data file's row
count as uint64, the payload, and a CRC-32 of everything before it.

In memory a vector is a ``pyarrow.BooleanArray`` of the file's length, True where the
row is deleted. A bitmap payload *is* the data buffer of such an array (Arrow stores
booleans as bits, least significant first), so both directions are buffer copies and
need no numpy: reading a vector costs a CRC and, for the positions encoding, one pass
over the positions.

Example:
    >>> blob = encode(pa.array([False, True, False]), 3)
    >>> decode(blob, 3, where="test").to_pylist()
    [False, True, False]
"""

from __future__ import annotations

import struct
import threading
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from lakefmt.errors import CorruptMetadataError, MissingFileError

if TYPE_CHECKING:
    from lakefmt.io import FileIO
    from lakefmt.manifest import DataFile

MAGIC = b"LFDV"
POSITIONS = 1
BITMAP = 2
_HEADER = struct.Struct("<4sB3xQQ")  # magic, encoding, padding, cardinality, row count
_CRC = struct.Struct("<I")
FOLDER = "data/deletes"


@dataclass(frozen=True)
class DeletionVector:
    """Where a data file's deletion vector is stored, and how many rows it deletes (MAN-2 column 14).

    ``path`` is relative to the table location (LAYOUT-2); ``offset`` and ``length`` locate
    the blob inside that file.
    """

    path: str
    offset: int
    length: int
    cardinality: int


def encode(deleted: pa.BooleanArray | pa.ChunkedArray, row_count: int) -> bytes:
    """The blob of a vector (DV-2): ``deleted`` has one entry per row, True where deleted.

    The bitmap encoding is chosen when it is smaller than the positions (DV-3).
    """
    mask = _plain(deleted)
    if len(mask) != row_count:
        raise ValueError(f"a deletion vector of {len(mask)} rows for a file of {row_count} rows")
    cardinality = int(pc.sum(mask).as_py() or 0)
    if cardinality == 0:
        raise ValueError("a deletion vector deletes at least one row (DV-2)")
    bitmap_bytes = (row_count + 7) // 8
    if bitmap_bytes < 8 * cardinality:
        encoding, payload = BITMAP, _bitmap_bytes(mask, bitmap_bytes)
    else:
        encoding = POSITIONS
        payload = pc.indices_nonzero(mask).cast(pa.uint64()).buffers()[1].to_pybytes()[:8 * cardinality]
    body = _HEADER.pack(MAGIC, encoding, cardinality, row_count) + payload
    return body + _CRC.pack(zlib.crc32(body))


def decode(blob: bytes, row_count: int, *, cardinality: int | None = None, where: str) -> pa.BooleanArray:
    """The deleted-row mask of a blob, after every check of DV-4; ``where`` names it in errors.

    Raises:
        CorruptMetadataError: bad magic, CRC, encoding, row count, cardinality, order or range.
    """
    def corrupt(why: str) -> CorruptMetadataError:
        return CorruptMetadataError(f"deletion vector {where} is corrupt: {why} (DV-4)")

    if len(blob) < _HEADER.size + _CRC.size:
        raise corrupt(f"{len(blob)} bytes is shorter than a header")
    magic, encoding, stored_cardinality, stored_rows = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise corrupt(f"magic {magic!r}, expected {MAGIC!r}")
    (crc,) = _CRC.unpack_from(blob, len(blob) - _CRC.size)
    if zlib.crc32(blob[:-_CRC.size]) != crc:
        raise corrupt("CRC-32 mismatch")
    if stored_rows != row_count:
        raise corrupt(f"written for {stored_rows} rows, the data file has {row_count}")
    if cardinality is not None and stored_cardinality != cardinality:
        raise corrupt(f"holds {stored_cardinality} positions, the manifest entry records {cardinality}")
    if stored_cardinality == 0 or stored_cardinality > row_count:
        raise corrupt(f"cardinality {stored_cardinality} outside 1..{row_count}")
    payload = blob[_HEADER.size:-_CRC.size]
    if encoding == BITMAP:
        if len(payload) != (row_count + 7) // 8:
            raise corrupt(f"bitmap of {len(payload)} bytes for {row_count} rows")
        if row_count % 8 and payload[-1] >> (row_count % 8):
            raise corrupt("bits set past the last row")
        mask = pa.BooleanArray.from_buffers(pa.bool_(), row_count, [None, pa.py_buffer(payload)])
        if int(pc.sum(mask).as_py() or 0) != stored_cardinality:
            raise corrupt("bitmap population differs from the cardinality")
        return mask
    if encoding == POSITIONS:
        if len(payload) != 8 * stored_cardinality:
            raise corrupt(f"{len(payload)} payload bytes for {stored_cardinality} positions")
        positions = pa.Array.from_buffers(pa.uint64(), stored_cardinality, [None, pa.py_buffer(payload)])
        if stored_cardinality > 1 and not pc.all(pc.greater(positions[1:], positions[:-1])).as_py():
            raise corrupt("positions are not strictly ascending")
        if positions[-1].as_py() >= row_count:
            raise corrupt(f"position {positions[-1].as_py()} is not below the row count {row_count}")
        return mask_of(positions, row_count)
    raise corrupt(f"unknown encoding {encoding}")


def mask_of(positions: pa.Array | list[int], row_count: int) -> pa.BooleanArray:
    """A deleted-row mask of ``row_count`` rows with ``positions`` set (positions < row_count)."""
    bits = bytearray((row_count + 7) // 8)
    for p in (positions.to_pylist() if isinstance(positions, pa.Array) else positions):
        bits[p >> 3] |= 1 << (p & 7)
    return pa.BooleanArray.from_buffers(pa.bool_(), row_count, [None, pa.py_buffer(bytes(bits))])


def positions(mask: pa.BooleanArray | pa.ChunkedArray) -> pa.UInt64Array:
    """The deleted positions of a mask, ascending."""
    return pc.indices_nonzero(_plain(mask))


def union(a: pa.BooleanArray | None, b: pa.BooleanArray | None) -> pa.BooleanArray | None:
    """Rows deleted by either vector (ROWDEL-3): positions of an immutable file never change meaning."""
    if a is None or b is None:
        return b if a is None else a
    return _plain(pc.or_(_plain(a), _plain(b)))


def cardinality(mask: pa.BooleanArray | None) -> int:
    return 0 if mask is None else int(pc.sum(mask).as_py() or 0)


def _plain(mask: pa.BooleanArray | pa.ChunkedArray) -> pa.BooleanArray:
    """One chunk, no nulls (a null never marks a row deleted)."""
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks() if mask.num_chunks != 1 else mask.chunk(0)
    if mask.null_count:
        mask = pc.fill_null(mask, False)
    return mask


def _bitmap_bytes(mask: pa.BooleanArray, nbytes: int) -> bytes:
    """The mask's bits as a fresh, zero-padded bitmap of ``nbytes`` bytes."""
    if mask.offset % 8:
        mask = pc.and_(mask, pa.scalar(True))  # a computed array starts at bit 0
    data = mask.buffers()[1].to_pybytes()[mask.offset // 8:mask.offset // 8 + nbytes]
    tail = len(mask) % 8
    if tail:
        data = data[:-1] + bytes([data[-1] & ((1 << tail) - 1)])
    return data


# -- reading vectors of planned files ---------------------------------------------------
_CACHE_BYTES = 64 * 1024 * 1024
_cache: OrderedDict[tuple[str, int], pa.BooleanArray] = OrderedDict()
_cache_size = 0
_cache_lock = threading.Lock()


def read_deleted(io: FileIO, table_location: str, data_file: DataFile) -> pa.BooleanArray | None:
    """The deleted-row mask of a data file, or None when it has no vector (READ-14).

    Vector files are immutable (LAYOUT-4), so masks are cached by blob location.

    Raises:
        CorruptMetadataError: the vector file is missing, short or corrupt (READ-10, DV-4).
    """
    ref = data_file.deletion_vector
    if ref is None:
        return None
    location = f"{table_location}/{ref.path}"
    key = (location, ref.offset)
    with _cache_lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    try:
        with io.open_input(location) as f:
            f.seek(ref.offset)
            blob = f.read(ref.length)
    except FileNotFoundError as exc:
        raise MissingFileError(f"deletion vector file {location} of data file {data_file.path} is missing "
                               "(READ-10)") from exc
    if len(blob) != ref.length:
        raise CorruptMetadataError(f"deletion vector file {location} is shorter than the entry of data file "
                                   f"{data_file.path} records (offset {ref.offset}, length {ref.length}) (DV-4)")
    mask = decode(blob, data_file.record_count, cardinality=ref.cardinality,
                  where=f"{location}@{ref.offset} of data file {data_file.path}")
    _remember(key, mask)
    return mask


def live_mask(io: FileIO, table_location: str, data_file: DataFile) -> pa.BooleanArray | None:
    """True for each live row of a data file, or None when every row is live."""
    deleted = read_deleted(io, table_location, data_file)
    return None if deleted is None else pc.invert(deleted)


def clear_cache() -> None:
    """Forget the vectors read or written by this process (for benchmarks, or after files were replaced by hand)."""
    global _cache_size
    with _cache_lock:
        _cache.clear()
        _cache_size = 0


def _remember(key: tuple[str, int], mask: pa.BooleanArray) -> None:
    global _cache_size
    size = mask.nbytes
    with _cache_lock:
        if key in _cache:
            return
        _cache[key] = mask
        _cache_size += size
        while _cache_size > _CACHE_BYTES and len(_cache) > 1:
            _, old = _cache.popitem(last=False)
            _cache_size -= old.nbytes


# -- writing vectors --------------------------------------------------------------------
class DeletionVectorWriter:
    """Collects the vectors of one commit attempt into one deletion-vector file (LAYOUT-12)."""

    def __init__(self, io: FileIO, table_location: str, token: str | None = None) -> None:
        self.io = io
        self.table_location = table_location
        unique = f"{token}-{uuid.uuid4().hex[:16]}" if token else uuid.uuid4().hex
        self.path = f"{FOLDER}/dv-{unique}.bin"
        self._blobs: list[bytes] = []
        self._size = 0
        self.written: str | None = None

    def add(self, data_file: DataFile, deleted: pa.BooleanArray | pa.ChunkedArray) -> DeletionVector:
        """Add the vector of ``data_file`` (True = deleted); where it will be stored."""
        blob = encode(deleted, data_file.record_count)
        _, _, count, _ = _HEADER.unpack_from(blob)
        ref = DeletionVector(self.path, self._size, len(blob), count)
        self._blobs.append(blob)
        self._size += len(blob)
        _remember((f"{self.table_location}/{self.path}", ref.offset), _plain(deleted))
        return ref

    def close(self) -> str | None:
        """Write the file; its absolute location, or None when no vector was added."""
        if not self._blobs:
            return None
        self.written = f"{self.table_location}/{self.path}"
        self.io.write_bytes(self.written, b"".join(self._blobs))
        return self.written
