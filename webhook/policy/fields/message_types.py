"""OpenAPI schemas as protobuf message types, so that CEL's type-checker knows the fields of each variable.

cel-expr-python declares a variable's type as a CEL type, and the only CEL types with named fields are
protobuf messages (from the environment's descriptor pool): Kubernetes declares its object types to cel-go
through a type provider instead (staging/src/k8s.io/apiserver/pkg/cel/common/schemas.go, `SchemaDeclType`),
which the Python binding does not offer. So each object schema with declared properties becomes a message
of one generated proto2 file, its properties fields of the matching types:

| schema | field |
|---|---|
| object with `properties` | the message built for it (one per `$ref` definition, reused) |
| object with `additionalProperties` | `map<string, T>` |
| array | `repeated T` (an array of arrays or maps: `repeated ListValue` / `Struct`, i.e. `list(dyn)` / `map`) |
| string, integer, boolean | string, int64, bool |
| anything else | `google.protobuf.Value`, which CEL types as `dyn` |

Where Kubernetes' conversion is more precise than Placer's values, the field is `dyn`: a number (JSON has one
kind of number: Placer's value may be an int or a double), a string of format date-time, date, duration
or byte (Kubernetes types them timestamp, duration, bytes; Placer's value is the JSON string),
int-or-string, quantities (`oneOf`), free-form objects (`x-kubernetes-preserve-unknown-fields`, an object
without properties) and an object whose property names are not CEL identifiers. `dyn` accepts every
operation: such a value is checked when it is evaluated, as before.

The messages are only for type-checking: no value of them is ever built (the evaluation environment keeps
`dyn` variables, and Placer's values stay plain JSON).
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, struct_pb2

Schema = Mapping[str, Any]
PACKAGE = "placer.schema"
FILE_NAME = "placer/schema.proto"
STRUCT_FILE = struct_pb2.DESCRIPTOR.serialized_pb
"""google/protobuf/struct.proto (Value, ListValue, Struct), which the generated file imports."""
_FIELD = descriptor_pb2.FieldDescriptorProto
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VALUE = ".google.protobuf.Value"
_LIST_VALUE = ".google.protobuf.ListValue"
_STRUCT = ".google.protobuf.Struct"
_DYNAMIC_FORMATS = frozenset({"date-time", "date", "duration", "byte", "int-or-string"})
_DEPTH = 64


@dataclass(frozen=True, slots=True)
class _FieldType:
    """What a schema becomes as one protobuf field: a scalar, a message, a map or a repeated field."""

    kind: int
    """A `FieldDescriptorProto.Type`."""
    type_name: str = ""
    repeated: bool = False
    map_value: "_FieldType | None" = None

    @property
    def nestable(self) -> bool:
        """Can be the element of a repeated field or the value of a map (proto has no list of lists)."""
        return not self.repeated and self.map_value is None


_DYN = _FieldType(_FIELD.TYPE_MESSAGE, _VALUE)


class MessageBuilder:
    """Builds one FileDescriptorProto with a message for every object schema reached from the roots."""

    def __init__(self, definitions: Mapping[str, Schema]) -> None:
        self.definitions = definitions
        self.file = descriptor_pb2.FileDescriptorProto(
            name=FILE_NAME, package=PACKAGE, syntax="proto2", dependency=["google/protobuf/struct.proto"])
        self._named: dict[str, str] = {}
        """definition name -> message name (set before its fields are built: a recursive type refers to it)."""
        self._used: set[str] = set()
        self.display: dict[str, str] = {}
        """full message name -> the name messages show: a definition's last segment (`PodSpec`), or the
        path that led to an inline object (`RayCluster_spec`)."""

    def root(self, schema: Schema, label: str) -> str | None:
        """The full name of the message for `schema` (named after `label`), or None when it is `dyn`."""
        found = self._field_type(schema, label, 0)
        if found.kind != _FIELD.TYPE_MESSAGE or not found.nestable or found.type_name.startswith(".google."):
            return None
        return found.type_name.lstrip(".")

    def _field_type(self, schema: Schema, label: str, depth: int) -> _FieldType:
        if depth > _DEPTH:
            return _DYN
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self._reference(ref.rsplit("/", 1)[-1], depth)
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict) and "type" not in schema:
            return self._field_type(all_of[0], label, depth + 1)  # OpenAPI v3's described reference
        if schema.get("x-kubernetes-int-or-string") or schema.get("x-kubernetes-preserve-unknown-fields"):
            return _DYN
        types = _types(schema)
        kind = next(iter(types)) if len(types) == 1 else None
        if kind == "string":
            return _DYN if schema.get("format") in _DYNAMIC_FORMATS else _FieldType(_FIELD.TYPE_STRING)
        if kind == "integer":
            return _FieldType(_FIELD.TYPE_INT64)
        if kind == "boolean":
            return _FieldType(_FIELD.TYPE_BOOL)
        if kind == "array":
            return self._array(schema, label, depth)
        if kind == "object" or (kind is None and "properties" in schema):
            additional = schema.get("additionalProperties")
            if isinstance(additional, dict):
                value = self._field_type(additional, label + "Value", depth + 1)
                return _FieldType(_FIELD.TYPE_MESSAGE, map_value=value if value.nestable else _DYN)
            if _is_message(schema):
                return self._message(schema, label, None, depth)
        return _DYN

    def _reference(self, name: str, depth: int) -> _FieldType:
        known = self._named.get(name)
        if known is not None:
            return _FieldType(_FIELD.TYPE_MESSAGE, f".{PACKAGE}.{known}")
        target = self.definitions.get(name)
        if target is None:
            return _DYN
        label = name.rsplit(".", 1)[-1]
        if not _is_message(target):
            return self._field_type(target, label, depth + 1)
        return self._message(target, label, name, depth)

    def _array(self, schema: Schema, label: str, depth: int) -> _FieldType:
        items = schema.get("items")
        element = self._field_type(items, label + "Item", depth + 1) if isinstance(items, dict) else _DYN
        if not element.nestable:
            element = _FieldType(_FIELD.TYPE_MESSAGE, _LIST_VALUE if element.repeated else _STRUCT)
        return _FieldType(element.kind, element.type_name, repeated=True)

    def _message(self, schema: Schema, label: str, definition: str | None, depth: int) -> _FieldType:
        name = self._unique(label)
        if definition is not None:
            self._named[definition] = name
        message = self.file.message_type.add(name=name)
        self.display[f"{PACKAGE}.{name}"] = label
        properties = schema.get("properties") or {}
        for number, (prop, prop_schema) in enumerate(sorted(properties.items()), start=1):
            found = self._field_type(prop_schema if isinstance(prop_schema, dict) else {}, f"{label}_{prop}",
                                     depth + 1)
            _add_field(message, str(prop), number, found)
        return _FieldType(_FIELD.TYPE_MESSAGE, f".{PACKAGE}.{name}")

    def _unique(self, label: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", label) or "Object"
        base = base if base[0].isalpha() else "M" + base
        name, index = base, 1
        while name in self._used:
            index += 1
            name = f"{base}{index}"
        self._used.add(name)
        return name


def _add_field(message: Any, name: str, number: int, found: _FieldType) -> None:
    if found.map_value is not None:
        entry_name = _map_entry_name(name)
        entry = message.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=_FIELD.TYPE_STRING, label=_FIELD.LABEL_OPTIONAL)
        _set_type(entry.field.add(name="value", number=2, label=_FIELD.LABEL_OPTIONAL), found.map_value)
        message.field.add(name=name, number=number, type=_FIELD.TYPE_MESSAGE, label=_FIELD.LABEL_REPEATED,
                          type_name=f".{PACKAGE}.{message.name}.{entry_name}")
        return
    added = message.field.add(name=name, number=number,
                              label=_FIELD.LABEL_REPEATED if found.repeated else _FIELD.LABEL_OPTIONAL)
    _set_type(added, found)


def _set_type(field: Any, found: _FieldType) -> None:
    field.type = found.kind
    if found.type_name:
        field.type_name = found.type_name


def _map_entry_name(field_name: str) -> str:
    """The nested type protobuf requires for a map field: the field's name in CamelCase and `Entry`
    (protobuf's descriptor.cc checks it; its `ToCamelCase` drops underscores and capitalises what follows)."""
    return "".join(part[:1].upper() + part[1:] for part in field_name.split("_")) + "Entry"


def _types(schema: Schema) -> set[str]:
    declared = schema.get("type")
    types = set(declared) if isinstance(declared, list) else {declared} if isinstance(declared, str) else set()
    return types - {"null"}


def _is_message(schema: Schema) -> bool:
    """An object with declared fields, every one a name CEL can select, and no other keys allowed."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties or _types(schema) - {"object"}:
        return False
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("additionalProperties") not in (None, False):
        return False
    return all(_IDENTIFIER.match(str(name)) for name in properties)
