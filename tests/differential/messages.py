"""Requests built from plain trees (dicts and lists) with the codec's message classes, and
responses turned back into plain trees."""

from __future__ import annotations

from typing import Any

from protocol.messages import REQUESTS


def build(api_key: int, version: int, tree: dict[str, Any]) -> Any:
    """The request message of `api_key` at `version` whose fields are `tree` (nested dicts for
    structs, lists of dicts for struct arrays; fields left out take the schema default)."""
    cls = REQUESTS[api_key]
    return cls(version=version, **_fields(cls._struct, tree, version))


def _fields(struct: Any, tree: dict[str, Any], version: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in tree.items():
        field = struct.fields[name]
        if field.is_struct_array() and value is not None:
            out[name] = [_container(field, v) for v in value]
        elif field.is_struct() and value is not None:
            out[name] = _container(field, value)
        else:
            out[name] = value
    return out


def _container(field: Any, tree: dict[str, Any]) -> Any:
    return field.data_class(**_fields(field.data_class._struct, tree, None))


def as_tree(response: Any) -> dict[str, Any]:
    tree: dict[str, Any] = response.to_dict()
    return tree
