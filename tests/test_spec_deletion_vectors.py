"""The deletion-vector test vectors of spec/deletes.md (DV-12) and the spec's requirement IDs.

The vectors are parsed out of the spec itself, so the spec and this test cannot drift. Each
valid vector is decoded twice — by the small reference decoder below, written from DV-2 …
DV-4 with ``struct`` and ``zlib`` only, and by :mod:`lakefmt.deletion_vectors` — and
encoded by both, byte for byte (DV-3). Each corrupt vector must be refused by both.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from lakefmt import deletion_vectors
from lakefmt.errors import CorruptMetadataError

SPEC = Path(__file__).resolve().parent.parent / "spec"
DELETES = SPEC / "deletes.md"

# -- the test vectors, read from the spec -----------------------------------------------------


@dataclass(frozen=True)
class Vector:
    name: str
    row_count: int
    deleted: tuple[int, ...] | None  # None for a corrupt vector
    expected: str  # "positions", "bitmap" or "corrupt: <why>"
    blob: bytes

    @property
    def corrupt(self) -> bool:
        return self.expected.startswith("corrupt")


def spec_vectors() -> list[Vector]:
    """The rows of the table under "## Test vectors" in spec/deletes.md."""
    text = DELETES.read_text(encoding="utf-8")
    section = text.split("\n## Test vectors\n", 1)[1].split("\n## ", 1)[0]
    vectors = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 5, line
        name, rows, deleted, expected, blob = cells
        vectors.append(Vector(
            name=name.strip("`"),
            row_count=int(rows),
            deleted=None if deleted == "—" else tuple(int(p) for p in deleted.split(",")),
            expected=expected,
            blob=bytes.fromhex(blob.strip("`")),
        ))
    return vectors


VECTORS = spec_vectors()
VALID = [v for v in VECTORS if not v.corrupt]
CORRUPT = [v for v in VECTORS if v.corrupt]


def test_the_spec_has_vectors_of_both_encodings_and_a_bad_crc():
    assert {v.expected for v in VALID} == {"positions", "bitmap"}
    assert any("CRC" in v.expected for v in CORRUPT)
    assert len({v.name for v in VECTORS}) == len(VECTORS)


# -- a reference implementation of DV-2 … DV-4, independent of lakefmt ---------------------------
class Refused(Exception):
    pass


def reference_decode(blob: bytes, row_count: int) -> tuple[int, list[int]]:
    """(encoding, deleted positions) of a blob, or Refused with the failed check of DV-4."""
    if len(blob) < 28 or blob[:4] != b"LFDV":
        raise Refused("magic")
    (crc,) = struct.unpack("<I", blob[-4:])
    if zlib.crc32(blob[:-4]) != crc:
        raise Refused("CRC-32")
    encoding = blob[4]
    cardinality, rows = struct.unpack_from("<QQ", blob, 8)
    payload = blob[24:-4]
    if rows != row_count:
        raise Refused("row_count")
    if cardinality < 1:
        raise Refused("cardinality")
    if encoding == 1:
        if len(payload) != 8 * cardinality:
            raise Refused("payload size")
        positions = list(struct.unpack(f"<{cardinality}Q", payload))
        if any(b <= a for a, b in zip(positions, positions[1:])):
            raise Refused("order")
        if positions[-1] >= row_count:
            raise Refused("range")
        return 1, positions
    if encoding == 2:
        if len(payload) != (row_count + 7) // 8:
            raise Refused("payload size")
        set_bits = [8 * i + b for i, byte in enumerate(payload) for b in range(8) if byte >> b & 1]
        if set_bits and set_bits[-1] >= row_count:
            raise Refused("range")
        if len(set_bits) != cardinality:
            raise Refused("cardinality")
        return 2, set_bits
    raise Refused("encoding")


def reference_encode(deleted: list[int], row_count: int) -> bytes:
    """The one blob of DV-2 for these positions, with DV-3's choice of encoding."""
    cardinality = len(deleted)
    bitmap_bytes = (row_count + 7) // 8
    if bitmap_bytes < 8 * cardinality:
        bits = bytearray(bitmap_bytes)
        for p in deleted:
            bits[p // 8] |= 1 << (p % 8)
        encoding, payload = 2, bytes(bits)
    else:
        encoding, payload = 1, struct.pack(f"<{cardinality}Q", *sorted(deleted))
    body = b"LFDV" + bytes([encoding, 0, 0, 0]) + struct.pack("<QQ", cardinality, row_count) + payload
    return body + struct.pack("<I", zlib.crc32(body))


@pytest.mark.parametrize("vector", VALID, ids=lambda v: v.name)
def test_reference_decoder_reads_the_stated_positions(vector):
    encoding, positions = reference_decode(vector.blob, vector.row_count)
    assert positions == list(vector.deleted)
    assert encoding == {"positions": 1, "bitmap": 2}[vector.expected]
    assert reference_encode(list(vector.deleted), vector.row_count) == vector.blob


@pytest.mark.parametrize("vector", CORRUPT, ids=lambda v: v.name)
def test_reference_decoder_refuses_corrupt_vectors(vector):
    with pytest.raises(Refused):
        reference_decode(vector.blob, vector.row_count)


# -- lakefmt agrees --------------------------------------------------------------------------
def mask(deleted: tuple[int, ...], row_count: int) -> pa.BooleanArray:
    positions = set(deleted)
    return pa.array([i in positions for i in range(row_count)], pa.bool_())


@pytest.mark.parametrize("vector", VALID, ids=lambda v: v.name)
def test_lakefmt_decodes_and_encodes_the_vectors_byte_for_byte(vector):
    decoded = deletion_vectors.decode(vector.blob, vector.row_count, where=vector.name)
    assert len(decoded) == vector.row_count
    assert [i for i, d in enumerate(decoded.to_pylist()) if d] == list(vector.deleted)
    assert deletion_vectors.encode(mask(vector.deleted, vector.row_count), vector.row_count) == vector.blob


@pytest.mark.parametrize("vector", CORRUPT, ids=lambda v: v.name)
def test_lakefmt_refuses_corrupt_vectors(vector):
    with pytest.raises(CorruptMetadataError, match=re.escape(vector.name)):
        deletion_vectors.decode(vector.blob, vector.row_count, where=vector.name)


def test_lakefmt_refuses_a_cardinality_other_than_the_entrys():
    """DV-4 item 4: the blob's cardinality must be the manifest entry's."""
    vector = next(v for v in VALID if v.name == "positions-tie")
    with pytest.raises(CorruptMetadataError, match="positions-tie"):
        deletion_vectors.decode(vector.blob, vector.row_count, cardinality=len(vector.deleted) + 1,
                                where=vector.name)


# -- requirement IDs ---------------------------------------------------------------------------
DEFINITION = re.compile(r"^\s*(?:[-*]\s+|\d+\.\s+)?\*\*([A-Z]+)-(\d+)\*\*", re.MULTILINE)


def definitions(path: Path) -> list[tuple[str, int]]:
    """Requirement IDs defined in a document: bold at the start of a paragraph, bullet or item."""
    return [(area, int(n)) for area, n in DEFINITION.findall(path.read_text(encoding="utf-8"))]


def documents() -> list[Path]:
    return sorted(SPEC.glob("*.md"))


def test_every_id_is_defined_once():
    seen: dict[str, str] = {}
    for doc in documents():
        for area, n in definitions(doc):
            key = f"{area}-{n}"
            assert key not in seen, f"{key} is defined in {seen[key]} and in {doc.name}"
            seen[key] = doc.name


def test_deletes_ids_are_numbered_without_gaps():
    by_area: dict[str, list[int]] = {}
    for area, n in definitions(DELETES):
        by_area.setdefault(area, []).append(n)
    assert set(by_area) == {"DV", "ROWDEL"}
    for area, numbers in by_area.items():
        assert sorted(numbers) == list(range(1, max(numbers) + 1)), area


def readme_ranges() -> dict[str, dict[str, tuple[int, int]]]:
    """Document name -> area -> (first, last), from the README's documents table."""
    ranges: dict[str, dict[str, tuple[int, int]]] = {}
    for line in (SPEC / "README.md").read_text(encoding="utf-8").splitlines():
        row = re.match(r"^\| \[([\w.-]+\.md)\]\([\w.-]+\) \| ([^|]*) \|", line)
        if not row:
            continue
        found = re.findall(r"([A-Z]+)-(\d+) … (\d+)", row.group(2))
        ranges[row.group(1)] = {area: (int(a), int(b)) for area, a, b in found}
    return ranges


def test_readme_table_ranges_match_the_documents():
    ranges = readme_ranges()
    assert "deletes.md" in ranges
    for doc in documents():
        defined: dict[str, list[int]] = {}
        for area, n in definitions(doc):
            defined.setdefault(area, []).append(n)
        if doc.name == "README.md":
            continue  # FMT-n, the README's own (test_readme_format_ids_are_numbered_without_gaps)
        if not defined:
            assert not ranges.get(doc.name), f"the README lists IDs for {doc.name}, which defines none"
            continue
        assert doc.name in ranges, f"{doc.name} defines IDs but is not in the README's documents table"
        actual = {area: (min(ns), max(ns)) for area, ns in defined.items()}
        assert ranges[doc.name] == actual, f"README ranges for {doc.name}"


def test_readme_format_ids_are_numbered_without_gaps():
    numbers = [n for area, n in definitions(SPEC / "README.md") if area == "FMT"]
    assert sorted(numbers) == list(range(1, max(numbers) + 1))


def test_changelog_names_every_deletes_id_range():
    section = (SPEC / "CHANGELOG.md").read_text(encoding="utf-8").split("## Format version 2", 1)[1]
    for area in ("DV", "ROWDEL"):
        last = max(n for a, n in definitions(DELETES) if a == area)
        assert f"{area}-1 … {area}-{last}" in section, area
