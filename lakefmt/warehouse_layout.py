"""Tables found in a warehouse by their layout, without a catalog (spec/layout.md LAYOUT-9, LAYOUT-10).

A table created in a warehouse lives in ``<warehouse>/<namespace>/<table>-<h>`` and its
metadata files are ``metadata/v{version:06d}-{unique}.metadata.json``. Names allow no
``-`` (CAT-2), so the folder names give back the namespace and the table name the table
was created with (CAT-21). The catalog uses this to refuse recreating a missing catalog
file over existing tables (CAT-19); recovery uses it to register them again.

Example:
    >>> parse_table_folder("s3://bucket/wh/artemis/downlinks-3f9a0c21b7d4")
    ('artemis', 'downlinks', '3f9a0c21b7d4')
"""

from __future__ import annotations

import posixpath
import re
from collections import defaultdict

from lakefmt.errors import ValidationError
from lakefmt.io import FileIO

_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_TABLE_FOLDER = re.compile(rf"(?P<name>{_NAME})-(?P<h>[0-9a-f]{{12}})")
_NAMESPACE_FOLDER = re.compile(_NAME)
_METADATA_FILE = re.compile(r"v(?P<version>[0-9]{6,})-[^/]+\.metadata\.json")


def metadata_version(metadata_location: str) -> int:
    """The version in a metadata file's name (LAYOUT-9).

    Raises:
        ValidationError: the name is not ``v{version:06d}-{unique}.metadata.json``.
    """
    name = posixpath.basename(metadata_location.replace("\\", "/"))
    match = _METADATA_FILE.fullmatch(name)
    if match is None or "/metadata/" not in metadata_location.replace("\\", "/"):
        raise ValidationError(f"{metadata_location} is not a metadata file location: expected "
                              "<table location>/metadata/v<version>-<unique>.metadata.json (LAYOUT-9)")
    return int(match["version"])


def parse_table_folder(table_location: str) -> tuple[str, str, str] | None:
    """``(namespace, table, h)`` from ``<warehouse>/<namespace>/<table>-<h>`` (LAYOUT-10), or None."""
    parts = table_location.replace("\\", "/").rstrip("/").rsplit("/", 2)
    if len(parts) != 3:
        return None
    match = _TABLE_FOLDER.fullmatch(parts[2])
    if match is None or _NAMESPACE_FOLDER.fullmatch(parts[1]) is None:
        return None
    return parts[1], match["name"], match["h"]


def find_metadata_files(io: FileIO, warehouse: str) -> dict[str, list[str]]:
    """Metadata files under ``<warehouse>/*/*/metadata/``, grouped by table location.

    A folder that is not a table location of LAYOUT-10 is still returned; the caller
    decides what to do with a name it cannot parse.
    """
    root = io.fs_path(warehouse).rstrip("/")
    found: dict[str, list[str]] = defaultdict(list)
    for path in io.fs.glob(f"{root}/*/*/metadata/v*.metadata.json"):
        location = _to_location(io, str(path))
        if _METADATA_FILE.fullmatch(posixpath.basename(location)) is None:
            continue
        found[location.rsplit("/metadata/", 1)[0]].append(location)
    return dict(found)


def _to_location(io: FileIO, path: str) -> str:
    """A path as the filesystem lists it, spelled as a lakefmt location (absolute, with its scheme)."""
    if io.scheme == "file" or "://" in path:
        return path
    return f"{io.scheme}://{path.lstrip('/')}"
