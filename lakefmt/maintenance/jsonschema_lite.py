"""Validate metadata JSON against spec/table-metadata.schema.json (META-2), with or without ``jsonschema``.

``lakefmt check`` must work with the core dependencies alone, so this module carries a
small validator for the JSON Schema keywords the metadata schema uses (``type``,
``const``, ``enum``, ``pattern``, ``minLength``, ``minimum``, ``maximum``,
``required``, ``properties``, ``additionalProperties``, ``items``, ``minItems``,
``maxItems``, ``contains``, ``oneOf`` and local ``$ref``). When the ``jsonschema``
package is installed it is used instead; a test keeps the two in agreement.

The schema ships inside the package (``lakefmt/table-metadata.schema.json``), identical
to the one in spec/.

Example:
    >>> errors = validate_metadata({"format-version": 2})
    >>> errors[0]
    "$: 'table-uuid' is a required property"
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from typing import Any

SCHEMA_RESOURCE = "table-metadata.schema.json"


@lru_cache(maxsize=1)
def metadata_schema() -> dict[str, Any]:
    """The JSON Schema of metadata files, loaded from the package data."""
    return json.loads(resources.files("lakefmt").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8"))


def validate_metadata(document: Any, *, use_jsonschema: bool | None = None) -> list[str]:
    """Every violation of the metadata schema, as ``"<json path>: <message>"``; empty when valid."""
    schema = metadata_schema()
    if use_jsonschema is not False:
        try:
            import jsonschema  # optional: better messages when installed
        except ImportError:
            if use_jsonschema:
                raise
        else:
            validator = jsonschema.Draft202012Validator(schema)
            return [f"{_json_path(list(e.absolute_path))}: {e.message}"
                    for e in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.path)))]
    return _Lite(schema).errors(document)


def _json_path(parts: list[Any]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


class _Lite:
    """The subset of JSON Schema 2020-12 that the metadata schema uses."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root

    def errors(self, value: Any) -> list[str]:
        out: list[str] = []
        self._check(self.root, value, [], out)
        return out

    def _resolve(self, ref: str) -> dict[str, Any]:
        if not ref.startswith("#/"):
            raise ValueError(f"only local $ref is supported, got {ref!r}")
        node: Any = self.root
        for part in ref[2:].split("/"):
            node = node[part]
        return node  # type: ignore[no-any-return]

    def _check(self, schema: dict[str, Any], value: Any, path: list[Any], out: list[str]) -> None:
        where = _json_path(path)
        if "$ref" in schema:
            self._check(self._resolve(schema["$ref"]), value, path, out)
        if "type" in schema and not _is_type(value, schema["type"]):
            out.append(f"{where}: {value!r} is not of type {schema['type']!r}")
            return
        if "const" in schema and not _same(value, schema["const"]):
            out.append(f"{where}: {schema['const']!r} was expected")
        if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
            out.append(f"{where}: {value!r} is not one of {schema['enum']!r}")
        if "oneOf" in schema:
            matches = sum(1 for option in schema["oneOf"] if not self._sub_errors(option, value, path))
            if matches != 1:
                out.append(f"{where}: {value!r} is valid under {matches} of the oneOf options, "
                           "not exactly one")
        if isinstance(value, str):
            if "minLength" in schema and len(value) < schema["minLength"]:
                out.append(f"{where}: {value!r} is too short")
            if "pattern" in schema and re.search(schema["pattern"], value) is None:
                out.append(f"{where}: {value!r} does not match {schema['pattern']!r}")
        if _is_type(value, "number"):
            if "minimum" in schema and value < schema["minimum"]:
                out.append(f"{where}: {value!r} is less than the minimum of {schema['minimum']!r}")
            if "maximum" in schema and value > schema["maximum"]:
                out.append(f"{where}: {value!r} is greater than the maximum of {schema['maximum']!r}")
        if isinstance(value, dict):
            self._check_object(schema, value, path, out)
        if isinstance(value, list):
            self._check_array(schema, value, path, out)

    def _sub_errors(self, schema: dict[str, Any], value: Any, path: list[Any]) -> list[str]:
        out: list[str] = []
        self._check(schema, value, path, out)
        return out

    def _check_object(self, schema: dict[str, Any], value: dict[str, Any], path: list[Any],
                      out: list[str]) -> None:
        for name in schema.get("required", ()):
            if name not in value:
                out.append(f"{_json_path(path)}: {name!r} is a required property")
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                self._check(properties[name], item, [*path, name], out)
            elif extra is False:
                out.append(f"{_json_path(path)}: additional property {name!r} is not allowed")
            elif isinstance(extra, dict):
                self._check(extra, item, [*path, name], out)

    def _check_array(self, schema: dict[str, Any], value: list[Any], path: list[Any], out: list[str]) -> None:
        if "minItems" in schema and len(value) < schema["minItems"]:
            out.append(f"{_json_path(path)}: {value!r} should have at least {schema['minItems']} item(s)")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"{_json_path(path)}: {value!r} should have at most {schema['maxItems']} item(s)")
        if "items" in schema:
            for i, item in enumerate(value):
                self._check(schema["items"], item, [*path, i], out)
        if "contains" in schema and not any(not self._sub_errors(schema["contains"], v, path) for v in value):
            out.append(f"{_json_path(path)}: no item matches the required 'contains' schema")


def _is_type(value: Any, name: str | list[str]) -> bool:
    if isinstance(name, list):
        return any(_is_type(value, n) for n in name)
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    raise ValueError(f"unknown JSON Schema type {name!r}")


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)
