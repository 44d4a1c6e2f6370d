"""A strict pre-pass over a request body, driven by the codec's schema (sans-I/O).

kafka-python's generated decoders are lenient where Kafka's are strict: any
negative length reads as null, even in a field the schema says is never null,
an array count below -1 reads as an empty list, and a count is trusted before
the bytes behind it are seen. This walk reads the body exactly as Kafka's
generated ``read`` methods do and raises ``SchemaError`` for

- null (-1) in a field whose ``nullableVersions`` do not cover the version
  ("non-nullable field X was serialized as null");
- any other negative length or count;
- an array count, string or bytes length larger than the bytes that remain
  ("Tried to allocate a collection of size N, but there are only M bytes
  remaining"), so nothing is allocated for a lying count;
- a compact string longer than 0x7fff, a varint longer than 5 bytes, a tagged
  field whose size runs past the end or that its type does not fill exactly.

It returns the position after the last field; only then is the body decoded.
A plan per (message, version) is built once from the schema and cached.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

MAX_STRING_LENGTH = 0x7FFF
_FIXED_SIZES = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8, "float64": 8,
                "bool": 1, "uuid": 16, "bitfield": 4}
_VARIABLE = {"string", "bytes", "records"}


class SchemaError(ValueError):
    """The body does not follow its schema (Kafka would fail to parse it)."""


@dataclass(frozen=True, slots=True)
class Fixed:
    name: str
    size: int


@dataclass(frozen=True, slots=True)
class Blob:
    """A string, bytes or records field."""

    name: str
    is_string: bool
    nullable: bool


@dataclass(frozen=True, slots=True)
class Array:
    name: str
    nullable: bool
    element: Node


@dataclass(frozen=True, slots=True)
class Struct:
    name: str
    nullable: bool  # a nested (non-array) struct with a null-marker byte
    fields: tuple[Node, ...]
    tagged: dict[int, Node] | None  # None when the version is not flexible


Node = Fixed | Blob | Array | Struct


class SchemaField(Protocol):
    """A field of kafka-python's schema (kafka/protocol/schemas/fields), as the plan reads it:
    kafka-python has no types there."""

    @property
    def name(self) -> str: ...
    @property
    def type_str(self) -> str: ...
    @property
    def tag(self) -> int: ...  # read only of a tagged field (None on the others)
    @property
    def fields(self) -> Mapping[str, SchemaField]: ...
    @property
    def array_of(self) -> SchemaField: ...
    def untagged_fields(self, version: int) -> Iterable[SchemaField]: ...
    def for_version_q(self, version: int) -> bool: ...
    def tagged_field_q(self, version: int) -> bool: ...
    def nullable_for_version_q(self, version: int) -> bool: ...
    def is_array(self) -> bool: ...
    def is_struct(self) -> bool: ...
    def is_struct_array(self) -> bool: ...


def plan_for(struct_field: SchemaField, version: int, flexible: bool) -> Struct:
    """The plan of a top-level message struct (kafka-python's ``cls._struct``)."""
    return _struct_plan(struct_field, version, flexible, nullable=False)


def _struct_plan(field: SchemaField, version: int, flexible: bool, nullable: bool) -> Struct:
    fields = tuple(_node(f, version, flexible) for f in field.untagged_fields(version))
    tagged = None
    if flexible:
        tagged = {
            int(f.tag): _node(f, version, flexible)
            for f in field.fields.values()
            if f.for_version_q(version) and f.tagged_field_q(version)
        }
    return Struct(field.name, nullable, fields, tagged)


def _node(field: SchemaField, version: int, flexible: bool) -> Node:
    nullable = bool(field.nullable_for_version_q(version))
    if field.is_struct_array() or field.is_array():
        element = field.array_of
        if element.is_struct():
            inner: Node = _struct_plan(element, version, flexible, nullable=False)
        else:
            inner = _simple(element, nullable=False)
        return Array(field.name, nullable, inner)
    if field.is_struct():
        return _struct_plan(field, version, flexible, nullable)
    return _simple(field, nullable)


def _simple(field: SchemaField, nullable: bool) -> Node:
    type_str = field.type_str
    if type_str in _FIXED_SIZES:
        return Fixed(field.name, _FIXED_SIZES[type_str])
    if type_str in _VARIABLE:
        return Blob(field.name, type_str == "string", nullable)
    raise ValueError(f"field {field.name}: unknown type {type_str}")


Checker = Callable[[memoryview, int, int], int]


def compile_checker(plan: Struct, flexible: bool) -> Checker:
    """A function ``check(buf, pos, end) -> end of the struct`` generated from ``plan``
    (one pass, no allocation; a Python loop only for arrays of structs)."""
    gen = _Gen(flexible)
    gen.struct(plan, "    ", top=True)
    source = "def _check(buf, pos, end):\n" + "\n".join(gen.lines) + "\n    return pos\n"
    scope: dict[str, Any] = dict(gen.globs)
    exec(compile(source, f"<strict:{plan.name}>", "exec"), scope)  # noqa: S102 - our own generated code
    checker: Checker = scope["_check"]
    return checker


def check_body(checker: Checker, body: memoryview) -> int:
    """Walk ``body``; the position after the last field, or SchemaError."""
    end = checker(body, 0, len(body))
    if end > len(body):
        raise SchemaError(f"fields need {end} bytes but the body has {len(body)}")
    return end


def _fail(message: str) -> None:
    raise SchemaError(message)


def _short(what: str, need: int, pos: int, end: int) -> None:
    raise SchemaError(f"{what} needs {need} bytes but only {max(end - pos, 0)} remain")


def _uvarint(buf: memoryview, pos: int, end: int, what: str) -> tuple[int, int]:
    value = 0
    for shift in range(0, 35, 7):
        if pos >= end:
            raise SchemaError(f"{what}: varint runs past the end")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value > 0xFFFFFFFF:
                break
            return value, pos
    raise SchemaError(f"{what}: varint is longer than 5 bytes")


def _tagged(buf: memoryview, pos: int, end: int, known: dict[int, Checker], name: str) -> int:
    count, pos = _uvarint(buf, pos, end, f"{name} tagged fields")
    if count > end - pos:
        raise SchemaError(f"{name}: {count} tagged fields but only {end - pos} bytes remain")
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end, f"{name} tag")
        size, pos = _uvarint(buf, pos, end, f"{name} tag {tag} size")
        if size > end - pos:
            _short(f"{name} tag {tag}", size, pos, end)
        check = known.get(tag)
        if check is not None and check(buf, pos, pos + size) != pos + size:
            raise SchemaError(f"{name} tag {tag}: {size} bytes do not hold exactly one value")
        pos += size
    return pos


class _Gen:
    """Emits the checking code for one plan (kafka-python's codegen, made strict)."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.lines: list[str] = []
        self.globs: dict[str, Any] = {
            "unpack_from": struct.unpack_from, "_fail": _fail, "_short": _short,
            "_uvarint": _uvarint, "_tagged": _tagged,
        }
        self._n = 0

    def var(self, prefix: str) -> str:
        self._n += 1
        return f"_{prefix}{self._n}"

    def emit(self, indent: str, line: str) -> None:
        self.lines.append(indent + line)

    def node(self, node: Node, indent: str) -> None:
        if isinstance(node, Fixed):
            self.emit(indent, f"pos += {node.size}")
        elif isinstance(node, Blob):
            self.blob(node, indent)
        elif isinstance(node, Array):
            self.array(node, indent)
        else:
            self.struct(node, indent, top=False)

    def length(self, name: str, wide: bool, indent: str) -> str:
        """Read a length/count into a fresh variable; -1 is null, below -1 refused."""
        n = self.var("n")
        if self.flexible:
            self.emit(indent, "if pos < end and buf[pos] < 0x80:")
            self.emit(indent, f"    {n} = buf[pos]")
            self.emit(indent, "    pos += 1")
            self.emit(indent, "else:")
            self.emit(indent, f"    {n}, pos = _uvarint(buf, pos, end, {name!r})")
            self.emit(indent, f"{n} -= 1")
            self.emit(indent, f"if {n} > 0x7FFFFFFF: _fail({name!r} + ': invalid length ' + str({n}))")
        else:
            size, fmt = (4, ">i") if wide else (2, ">h")
            self.emit(indent, f"if pos + {size} > end: _short({name!r}, {size}, pos, end)")
            self.emit(indent, f"{n} = unpack_from({fmt!r}, buf, pos)[0]")
            self.emit(indent, f"pos += {size}")
        self.emit(indent, f"if {n} < -1: _fail({name!r} + ': invalid length ' + str({n}))")
        return n

    def null(self, n: str, name: str, nullable: bool, indent: str) -> None:
        self.emit(indent, f"if {n} == -1:")
        if nullable:
            self.emit(indent, "    pass")
        else:
            self.emit(indent, f"    _fail('non-nullable field {name} was serialized as null')")

    def blob(self, node: Blob, indent: str) -> None:
        n = self.length(node.name, not node.is_string, indent)
        self.null(n, node.name, node.nullable, indent)
        self.emit(indent, "else:")
        inner = indent + "    "
        if node.is_string:
            self.emit(inner, f"if {n} > {MAX_STRING_LENGTH}: "
                             f"_fail('string field {node.name} had invalid length ' + str({n}))")
        self.emit(inner, f"if {n} > end - pos: _short({node.name!r}, {n}, pos, end)")
        self.emit(inner, f"pos += {n}")

    def array(self, node: Array, indent: str) -> None:
        n = self.length(node.name, True, indent)
        self.null(n, node.name, node.nullable, indent)
        self.emit(indent, "else:")
        inner = indent + "    "
        self.emit(inner, f"if {n} > end - pos: _fail('tried to allocate a collection of size ' + str({n}) + "
                         f"' for {node.name}, but there are only ' + str(end - pos) + ' bytes remaining')")
        element = node.element
        if isinstance(element, Fixed):
            self.emit(inner, f"pos += {n} * {element.size}")
            return
        self.emit(inner, f"for _ in range({n}):")
        self.node(element, inner + "    ")
        self.emit(inner + "    ", f"if pos > end: _fail({node.name!r} + ' runs past the end of the body')")

    def struct(self, node: Struct, indent: str, top: bool) -> None:
        if node.nullable and not top:
            self.emit(indent, f"if pos + 1 > end: _short({node.name!r}, 1, pos, end)")
            self.emit(indent, "pos += 1")
            self.emit(indent, "if buf[pos - 1] != 0xFF:")
            indent += "    "
        self.emit(indent, "pass")
        for field in node.fields:
            self.node(field, indent)
        if node.tagged is not None:
            known = self.var("known")
            self.globs[known] = {
                tag: compile_checker(_as_struct(field), True) for tag, field in node.tagged.items()
            }
            self.emit(indent, "if pos < end and buf[pos] == 0: pos += 1")
            self.emit(indent, f"else: pos = _tagged(buf, pos, end, {known}, {node.name!r})")


def _as_struct(field: Node) -> Struct:
    """A tagged field's value, checked as a struct holding just that field."""
    return Struct(field.name, False, (field,), None)
