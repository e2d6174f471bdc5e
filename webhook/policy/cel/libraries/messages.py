"""The Kubernetes CEL value types (`kubernetes.Quantity`, `net.IP`, ...) as protobuf messages.

cel-expr-python cannot carry an opaque value from a Python function, but it carries protobuf messages, and a
message type is a distinct CEL type: `type(quantity('1'))` is `kubernetes.Quantity`, `quantity('1').add(1)`
type-checks against the Quantity overloads only, and `==` compares messages field by field. Each message
holds one canonical string, so that `==` means what Kubernetes' `Equal` means (`quantity('1') ==
quantity('1000m')`, `ip('::1') == ip('0:0::1')`). The names are Kubernetes' own.
"""

from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


@dataclass(frozen=True, slots=True)
class ValueType:
    full_name: str
    field: str
    """The one string field that holds the canonical form."""


QUANTITY = ValueType("kubernetes.Quantity", "exact")
URL = ValueType("kubernetes.URL", "text")
SEMVER = ValueType("kubernetes.Semver", "version")
FORMAT = ValueType("kubernetes.NamedFormat", "name")
IP = ValueType("net.IP", "address")
CIDR = ValueType("net.CIDR", "prefix")
ALL = (QUANTITY, URL, SEMVER, FORMAT, IP, CIDR)


class Messages:
    """A descriptor pool with the Kubernetes value types, and their Python classes."""

    def __init__(self) -> None:
        self.pool = descriptor_pool.DescriptorPool()
        files: dict[str, Any] = {}
        for value_type in ALL:
            package, name = value_type.full_name.rsplit(".", 1)
            file = files.get(package)
            if file is None:
                file = descriptor_pb2.FileDescriptorProto(
                    name=f"placer/{package}.proto", package=package, syntax="proto3")
                files[package] = file
            message = file.message_type.add(name=name)
            message.field.add(name=value_type.field, number=1,
                              type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                              label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
        for file in files.values():
            self.pool.Add(file)
        self._classes = {
            value_type.full_name: message_factory.GetMessageClass(
                self.pool.FindMessageTypeByName(value_type.full_name))
            for value_type in ALL
        }

    def make(self, value_type: ValueType, canonical: str) -> Any:
        return self._classes[value_type.full_name](**{value_type.field: canonical})


def canonical_of(message: Any, value_type: ValueType) -> str:
    """The canonical string a message holds (checked to be of the expected type)."""
    if message.DESCRIPTOR.full_name != value_type.full_name:
        raise TypeError(f"expected {value_type.full_name}, got {message.DESCRIPTOR.full_name}")
    return str(getattr(message, value_type.field))


def literal(value_type: ValueType, canonical: str) -> str:
    """The CEL text that constructs the value without calling Python (for compile-time rewrites)."""
    escaped = canonical.replace("\\", "\\\\").replace("'", "\\'")
    return f"{value_type.full_name}{{{value_type.field}: '{escaped}'}}"
