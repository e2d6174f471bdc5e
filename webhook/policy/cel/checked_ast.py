"""The checked syntax tree of a compiled CEL expression, read and rebuilt at the protobuf wire level.

cel-expr-python serializes a compiled expression as a `google.protobuf.Any` holding a `cel.expr.CheckedExpr`
and compiles such bytes back (`Env.deserialize`) without parsing or checking again. That is enough to run
one sub-expression of a policy on its own — the step-wise evaluation of an expression that exceeds the
runtime's iteration budget (`stepwise`) — without a CEL parser in Python and without the `cel.expr` Python
protos (not on PyPI): the few fields it needs are read by number (cel/expr/syntax.proto, checked.proto).
"""

import struct
from dataclasses import dataclass
from functools import cached_property
from typing import Any

Field = tuple[int, int, int | bytes]
"""(field number, wire type, value): an integer for varints, bytes for everything else."""

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5

# cel.expr.Expr
_EXPR_ID, _IDENT, _SELECT, _CALL, _LIST, _STRUCT, _COMPREHENSION = 2, 4, 5, 6, 7, 8, 9
_KINDS = {3: "const", _IDENT: "ident", _SELECT: "select", _CALL: "call", _LIST: "list", _STRUCT: "struct",
          _COMPREHENSION: "comprehension"}
# cel.expr.CheckedExpr
_CHECKED_EXPR = 4
_SOURCE_INFO, _POSITIONS = 5, 4


class AstError(ValueError):
    """Bytes that are not the CheckedExpr cel-expr-python writes (a runtime upgrade changed the format)."""


def _varint(data: bytes, index: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if index >= len(data):
            raise AstError("truncated varint")
        byte = data[index]
        index += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, index


def decode(data: bytes) -> list[Field]:
    """The fields of one message, in order; nested messages stay bytes until asked for."""
    fields: list[Field] = []
    index = 0
    while index < len(data):
        key, index = _varint(data, index)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == _VARINT:
            value, index = _varint(data, index)
        elif wire == _BYTES:
            length, index = _varint(data, index)
            value, index = data[index:index + length], index + length
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            value, index = data[index:index + size], index + size
        else:
            raise AstError(f"unsupported wire type {wire}")
        fields.append((number, wire, value))
    return fields


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def encode(fields: list[Field]) -> bytes:
    out = bytearray()
    for number, wire, value in fields:
        out += _encode_varint(number << 3 | wire)
        if isinstance(value, int):
            out += _encode_varint(value)
        elif wire == _BYTES:
            out += _encode_varint(len(value)) + value
        else:
            out += value
    return bytes(out)


def _message(number: int, payload: bytes) -> Field:
    return (number, _BYTES, payload)


def _text(fields: list[Field], number: int) -> str:
    for found, _, value in fields:
        if found == number and isinstance(value, bytes):
            return value.decode()
    return ""


def _child(fields: list[Field], number: int) -> "Expr | None":
    for found, _, value in fields:
        if found == number and isinstance(value, bytes):
            return Expr.parse(value)
    return None


def _children(fields: list[Field], number: int) -> list["Expr"]:
    return [Expr.parse(value) for found, _, value in fields if found == number and isinstance(value, bytes)]


NO_LITERAL = object()
"""The `literal` of a node that is not a null, bool, int, double or string constant."""


@dataclass(frozen=True)
class Expr:
    """One node: its id, its kind and the fields of its kind's message (e.g. Call: target, function, args).
    Children are parsed once, on first use, and kept: a step-wise evaluation visits the same nodes for every
    element of a loop."""

    raw: bytes
    id: int
    kind: str
    body: list[Field]

    @staticmethod
    def parse(raw: bytes) -> "Expr":
        node_id, kind, body = 0, "", []
        for number, _, value in decode(raw):
            if number == _EXPR_ID and isinstance(value, int):
                node_id = value
            elif number in _KINDS and isinstance(value, bytes):
                kind, body = _KINDS[number], decode(value)
        return Expr(raw, node_id, kind or "const", body)

    # ident
    @cached_property
    def name(self) -> str:
        return _text(self.body, 1)

    # select: its operand is `target`
    @cached_property
    def field(self) -> str:
        return _text(self.body, 2)

    @cached_property
    def test_only(self) -> bool:
        return any(number == 3 and value == 1 for number, _, value in self.body)

    # call
    @cached_property
    def function(self) -> str:
        return _text(self.body, 2)

    @cached_property
    def target(self) -> "Expr | None":
        return _child(self.body, 1)

    @cached_property
    def args(self) -> list["Expr"]:
        return _children(self.body, 3)

    # comprehension (cel.expr.Expr.Comprehension)
    @cached_property
    def loop(self) -> tuple["Expr", "Expr", "Expr", "Expr", "Expr"]:
        """iter_range, accu_init, loop_condition, loop_step, result."""
        parts = [_child(self.body, number) for number in (2, 4, 5, 6, 7)]
        if any(part is None for part in parts):
            raise AstError("a comprehension without all its parts")
        return tuple(part for part in parts if part is not None)  # type: ignore[return-value]

    @cached_property
    def iter_vars(self) -> tuple[str, str]:
        """The iteration variable and, for a two-variable comprehension, the second one (else "")."""
        return _text(self.body, 1), _text(self.body, 8)

    @cached_property
    def accu_var(self) -> str:
        return _text(self.body, 3)

    @cached_property
    def operands(self) -> list["Expr"]:
        """The sub-expressions a strict node (call, select, list, struct) evaluates before itself;
        comprehensions are not strict and have none."""
        found: list[Expr] = []
        for number, _, value in self.body:
            if not isinstance(value, bytes):
                continue
            if (self.kind == "call" and number in (1, 3)) or (self.kind in ("select", "list") and number == 1):
                found.append(Expr.parse(value))
            elif self.kind == "struct" and number == 2:  # an entry: its map key (3) and value (4)
                found.extend(Expr.parse(v) for n, _, v in decode(value) if n in (3, 4) and isinstance(v, bytes))
        return found

    @cached_property
    def identifiers(self) -> frozenset[str]:
        """Every identifier name read anywhere under this node (variables, iteration and accumulator names)."""
        if self.kind == "ident":
            return frozenset({self.name})
        children = list(self.loop) if self.kind == "comprehension" else self.operands
        return frozenset().union(*(child.identifiers for child in children))

    @cached_property
    def literal(self) -> Any:
        """The value of a null, bool, int, double or string constant; NO_LITERAL for anything else."""
        if self.kind != "const":
            return NO_LITERAL
        for number, _, value in self.body:
            if number == 1:
                return None
            if number == 2:
                return bool(value)
            if number == 3 and isinstance(value, int):
                return value - (1 << 64) if value >= 1 << 63 else value
            if number == 5 and isinstance(value, bytes):
                return struct.unpack("<d", value)[0]
            if number == 6 and isinstance(value, bytes):
                return value.decode()
        return NO_LITERAL

    def with_operands(self, replacements: dict[bytes, bytes]) -> bytes:
        """This node's bytes with operands replaced (by their bytes), e.g. by identifiers bound to values."""
        body: list[Field] = []
        for number, wire, value in self.body:
            replaced = value
            if isinstance(value, bytes) and self.kind == "struct" and number == 2:
                entry = [(n, w, replacements.get(v, v) if isinstance(v, bytes) and n in (3, 4) else v)
                         for n, w, v in decode(value)]
                replaced = encode(entry)
            elif isinstance(value, bytes):
                replaced = replacements.get(value, value)
            body.append((number, wire, replaced))
        kind_number = next(number for number, kind in _KINDS.items() if kind == self.kind)
        return encode([(_EXPR_ID, _VARINT, self.id), _message(kind_number, encode(body))])


FRESH_IDS = 1 << 40
"""Ids from here up name no node of a checked tree (the checker numbers from 1), nor its reference or type
entries: nodes built for step-wise evaluation take them."""


def identifier(node_id: int, name: str) -> bytes:
    """The bytes of an identifier expression."""
    return encode([(_EXPR_ID, _VARINT, node_id), _message(_IDENT, encode([_message(1, name.encode())]))])


@dataclass(frozen=True, slots=True)
class CheckedAst:
    """A serialized compiled expression, taken apart so that any of its sub-expressions can be compiled alone."""

    envelope: list[Field]
    """The `Any` fields; the one numbered 2 is the CheckedExpr."""
    checked: list[Field]

    @staticmethod
    def parse(serialized: bytes) -> "CheckedAst":
        envelope = decode(serialized)
        payloads = [value for number, _, value in envelope if number == 2 and isinstance(value, bytes)]
        if not payloads:
            raise AstError("no CheckedExpr in the serialized expression")
        return CheckedAst(envelope, decode(payloads[0]))

    def root(self) -> Expr:
        for number, _, value in self.checked:
            if number == _CHECKED_EXPR and isinstance(value, bytes):
                return Expr.parse(value)
        raise AstError("CheckedExpr without an expression")

    def offsets(self) -> dict[int, int]:
        """Each node's offset in the source, in code points (SourceInfo.positions, field 4 of SourceInfo,
        itself field 5 of CheckedExpr): where a load-time message points."""
        found: dict[int, int] = {}
        for number, _, value in self.checked:
            if number != _SOURCE_INFO or not isinstance(value, bytes):
                continue
            for field_number, _, entry in decode(value):
                if field_number != _POSITIONS or not isinstance(entry, bytes):
                    continue
                pair = {n: v for n, _, v in decode(entry) if isinstance(v, int)}
                found[pair.get(1, 0)] = pair.get(2, 0)
        return found

    def with_root(self, raw_expr: bytes) -> bytes:
        """Serialized bytes of this checked expression with another root (a sub-expression, or a rebuilt node):
        the reference and type maps are kept, so the runtime resolves functions and overloads as checked."""
        checked = [(n, w, raw_expr if n == _CHECKED_EXPR else v) for n, w, v in self.checked]
        return encode([(n, w, encode(checked) if n == 2 else v) for n, w, v in self.envelope])

