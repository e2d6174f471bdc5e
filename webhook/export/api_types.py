"""The types kube-apiserver declares for a MutatingAdmissionPolicy's expressions, as protobuf messages that
cel-expr-python's checker types field by field.

The API server's compiler (`createEnvForOpts` and `BuildRequestType`, `BuildNamespaceType` in
staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/compile.go) declares:

- `object`, `oldObject` (and `params` when the policy has a `paramKind`, which an export never writes): `dyn`;
- `namespaceObject`: an object type `kubernetes.Namespace` (metadata, spec, status, with the fields below);
- `request`: an object type `kubernetes.AdmissionRequest` (kind, resource, userInfo, operation, ...);
- for a mutation (`hasPatchTypes`): the type `JSONPatch` (staging/src/k8s.io/apiserver/pkg/cel/mutation/
  jsonpatch.go: `op`, `from`, `path` strings and `value` dyn), which a JSONPatch mutation must return a list of.

Each becomes a message of the same name and fields here: a string field is typed `string`, a repeated one
`list(...)`, a map field `map(...)`, a Timestamp `timestamp` and a `google.protobuf.Value` `dyn`, so that
`namespaceObject.metadata.labels` is `map(string, string)` as in the API server, and `[namespaceObject.
metadata.name, object.kind]` mixes `string` and `dyn` as it does there. `request.userInfo.extra`
(`map(string, list(string))`, which no protobuf field type is) is declared as a variable of that name, which
the checker resolves before the field (`QUALIFIED_OVERRIDES`).
"""

from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel as cel_runtime
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory, struct_pb2, timestamp_pb2

Field = descriptor_pb2.FieldDescriptorProto

JSON_PATCH = "JSONPatch"
NAMESPACE = "kubernetes.Namespace"
ADMISSION_REQUEST = "kubernetes.AdmissionRequest"

STRING, INT, BOOL = "string", "int", "bool"
TIMESTAMP = ".google.protobuf.Timestamp"
DYN = ".google.protobuf.Value"
STRINGS = "repeated string"
STRING_MAP = "map<string, string>"

_KUBERNETES_MESSAGES: dict[str, tuple[tuple[str, str], ...]] = {
    # BuildNamespaceType
    "NamespaceMetadata": (
        ("name", STRING), ("generateName", STRING), ("namespace", STRING), ("labels", STRING_MAP),
        ("annotations", STRING_MAP), ("UID", STRING), ("creationTimestamp", TIMESTAMP),
        ("deletionGracePeriodSeconds", INT), ("deletionTimestamp", TIMESTAMP), ("generation", INT),
        ("resourceVersion", STRING), ("finalizers", STRINGS)),
    "NamespaceSpec": (("finalizers", STRINGS),),
    "NamespaceCondition": (("status", STRING), ("type", STRING), ("lastTransitionTime", TIMESTAMP),
                           ("message", STRING), ("reason", STRING)),
    "NamespaceStatus": (("conditions", "repeated .kubernetes.NamespaceCondition"), ("phase", STRING)),
    "Namespace": (("metadata", ".kubernetes.NamespaceMetadata"), ("spec", ".kubernetes.NamespaceSpec"),
                  ("status", ".kubernetes.NamespaceStatus")),
    # BuildRequestType
    "GroupVersionKind": (("group", STRING), ("version", STRING), ("kind", STRING)),
    "GroupVersionResource": (("group", STRING), ("version", STRING), ("resource", STRING)),
    "UserInfo": (("username", STRING), ("uid", STRING), ("groups", STRINGS), ("extra", DYN)),
    "AdmissionRequest": (
        ("kind", ".kubernetes.GroupVersionKind"), ("resource", ".kubernetes.GroupVersionResource"),
        ("subResource", STRING), ("requestKind", ".kubernetes.GroupVersionKind"),
        ("requestResource", ".kubernetes.GroupVersionResource"), ("requestSubResource", STRING),
        ("name", STRING), ("namespace", STRING), ("operation", STRING), ("userInfo", ".kubernetes.UserInfo"),
        ("dryRun", BOOL), ("options", DYN)),
}
_JSON_PATCH_FIELDS = (("op", STRING), ("from", STRING), ("path", STRING), ("value", DYN))

QUALIFIED_OVERRIDES = {
    "request.userInfo.extra": cel_runtime.Type.Map(cel_runtime.Type.STRING,
                                                   cel_runtime.Type.List(cel_runtime.Type.STRING)),
}
"""Fields whose type no protobuf field has, declared as qualified variables (the checker resolves the
longest declared name first, as cel-go's `checkSelect` does)."""

_SCALARS = {STRING: Field.TYPE_STRING, INT: Field.TYPE_INT64, BOOL: Field.TYPE_BOOL}


@dataclass(frozen=True, slots=True)
class ApiTypes:
    """The messages, added to `pool` (which must be the one the CEL environment is given)."""

    pool: Any

    @staticmethod
    def add_to(pool: descriptor_pool.DescriptorPool) -> "ApiTypes":
        for dependency in (struct_pb2, timestamp_pb2):
            try:
                pool.FindFileByName(dependency.DESCRIPTOR.name)
            except KeyError:
                pool.AddSerializedFile(dependency.DESCRIPTOR.serialized_pb)
        dependencies = [struct_pb2.DESCRIPTOR.name, timestamp_pb2.DESCRIPTOR.name]
        kubernetes = descriptor_pb2.FileDescriptorProto(
            name="placer/export/kubernetes_admission.proto", package="kubernetes", syntax="proto3",
            dependency=dependencies)
        for name, fields in _KUBERNETES_MESSAGES.items():
            _message(kubernetes.message_type.add(name=name), fields, f".kubernetes.{name}")
        patch = descriptor_pb2.FileDescriptorProto(
            name="placer/export/json_patch.proto", syntax="proto3", dependency=dependencies)
        _message(patch.message_type.add(name=JSON_PATCH), _JSON_PATCH_FIELDS, f".{JSON_PATCH}")
        pool.Add(kubernetes)
        pool.Add(patch)
        return ApiTypes(pool)

    def message(self, full_name: str, value: Any) -> Any:
        """A message of type `full_name` from a JSON value (what the API server binds: fields the type does
        not declare are left out)."""
        cls = message_factory.GetMessageClass(self.pool.FindMessageTypeByName(full_name))
        return json_format.ParseDict(value, cls(), ignore_unknown_fields=True)


def _message(message: descriptor_pb2.DescriptorProto, fields: tuple[tuple[str, str], ...], full_name: str) -> None:
    for number, (name, kind) in enumerate(fields, start=1):
        if kind == STRING_MAP:
            entry = message.nested_type.add(name=f"{name[0].upper()}{name[1:]}Entry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=Field.TYPE_STRING, label=Field.LABEL_OPTIONAL)
            entry.field.add(name="value", number=2, type=Field.TYPE_STRING, label=Field.LABEL_OPTIONAL)
            message.field.add(name=name, number=number, type=Field.TYPE_MESSAGE, label=Field.LABEL_REPEATED,
                              type_name=f"{full_name}.{entry.name}")
            continue
        element = kind.removeprefix("repeated ")
        label = Field.LABEL_REPEATED if element != kind else Field.LABEL_OPTIONAL
        if element in _SCALARS:
            message.field.add(name=name, number=number, type=_SCALARS[element], label=label)
        else:
            message.field.add(name=name, number=number, type=Field.TYPE_MESSAGE, label=label, type_name=element)
