"""Validate metadata JSON against spec/table-metadata.schema.json (META-2) with ``fastjsonschema``.

The schema ships inside the package (``lakefmt/table-metadata.schema.json``), identical
to the one in spec/. It is compiled once, on first use (about 0.1 s), so that importing
lakefmt or running a command that never checks a table does not pay for it.
``fastjsonschema`` reports the first violation it finds; ``lakefmt check`` reports it
under META-2 and goes on with the checks that do not need a valid document.

Example:
    >>> validate_metadata({"format-version": 2})
    ["data must contain ['current-schema-id', ...] properties"]
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from typing import Any

import fastjsonschema

SCHEMA_RESOURCE = "table-metadata.schema.json"


@lru_cache(maxsize=1)
def metadata_schema() -> dict[str, Any]:
    """The JSON Schema of metadata files, loaded from the package data."""
    return json.loads(resources.files("lakefmt").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _validator() -> Callable[[Any], Any]:
    return fastjsonschema.compile(copy.deepcopy(metadata_schema()))  # compile() rewrites $refs in place


def validate_metadata(document: Any) -> list[str]:
    """The first violation of the metadata schema (as ``[message]``); empty when ``document`` is valid."""
    try:
        _validator()(document)
    except fastjsonschema.JsonSchemaValueException as exc:
        return [exc.message]
    return []
