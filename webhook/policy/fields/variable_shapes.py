"""The schema of each CEL variable a rule reads, for the field checks (`field_check`).

`object` / `oldObject` are the object under admission: any of the kinds Placer admits (`webhook.workloads`),
each with its own schema. `namespaceObject` is a core/v1 Namespace. `pod`, `workload` and `resources` are
Placer's own values (built by `webhook.engine.activation`): their shapes are written here, reusing the
published definitions (PodSpec, ObjectMeta's maps) where they hold Kubernetes values. `request` is the
admission.k8s.io/v1 AdmissionRequest (staging/src/k8s.io/api/admission/v1/types.go, AdmissionRequest) less
`object` and `oldObject`, as Placer binds it (`webhook.admission.review.AdmissionRequest.as_cel`); the API server
publishes no OpenAPI for it (it is never served), so its fields are listed here.
"""

from collections.abc import Iterable, Mapping

from webhook.policy.fields.operator_schemas import OPERATOR_KINDS
from webhook.policy.fields.schemas import KindKey, Schema, SchemaSet, unknown_kind_schema

_STRING: Schema = {"type": "string"}
_STRINGS: Schema = {"type": "object", "additionalProperties": _STRING}
_NUMBERS: Schema = {"type": "object", "additionalProperties": {"type": "number"}}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/$defs/{name}"}


def _closed(**properties: Schema) -> Schema:
    return {"type": "object", "properties": properties}


_GROUP_VERSION_KIND = _closed(group=_STRING, version=_STRING, kind=_STRING)
_GROUP_VERSION_RESOURCE = _closed(group=_STRING, version=_STRING, resource=_STRING)

POD: Schema = _closed(
    metadata=_closed(labels=_STRINGS, annotations=_STRINGS),
    spec=_ref("io.k8s.api.core.v1.PodSpec"),
)
"""`pod`: the template's (or bare Pod's) labels and annotations, and its spec."""

WORKLOAD: Schema = _closed(
    kind=_STRING, apiVersion=_STRING, name=_STRING, namespace=_STRING, replicas={"type": "integer"},
    labels=_STRINGS, annotations=_STRINGS,
)
RESOURCES: Schema = _closed(
    requests=_NUMBERS, limits=_NUMBERS, devices=_NUMBERS,
    claims={"type": "object", "additionalProperties": _closed(
        kind=_STRING, name=_STRING, known={"type": "boolean"}, devices=_NUMBERS)},
)
"""`resources`: effective requests and limits, and the devices claimed through DRA (per device class, and per
claim of the pod), as `webhook/pods/dra.py` builds them."""
REQUEST: Schema = _closed(
    uid=_STRING,
    kind=_GROUP_VERSION_KIND,
    resource=_GROUP_VERSION_RESOURCE,
    subResource=_STRING,
    requestKind=_GROUP_VERSION_KIND,
    requestResource=_GROUP_VERSION_RESOURCE,
    requestSubResource=_STRING,
    name=_STRING,
    namespace=_STRING,
    operation=_STRING,
    userInfo=_closed(username=_STRING, uid=_STRING, groups={"type": "array", "items": _STRING},
                     extra={"type": "object", "additionalProperties": {"type": "array", "items": _STRING}}),
    dryRun={"type": "boolean"},
    options={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
)
NAMESPACE_KIND: KindKey = ("", "v1", "Namespace")

Labelled = list[tuple[str, Schema | None]]
"""The schemas a variable's value may have, each with a label for messages (a kind, or the variable)."""


def roots(schemas: SchemaSet, kinds: Iterable[tuple[str, str, tuple[str, ...]]],
          crds: Mapping[KindKey, Schema], served: frozenset[tuple[str, str]] | None) -> dict[str, Labelled]:
    """The schemas of every variable. `kinds`: (group, kind, versions) Placer admits; `crds`: kinds read
    from CRD files; `served`: with a cluster, the (group, version) it serves (a kind of any other is never
    admitted there, so it is not seen), else None (offline: an operator kind is described by
    `operator_schemas`, a version no operator serves is not seen, any other kind whose schema is unknown is
    dynamic)."""
    objects: Labelled = []
    described = {(group, kind) for group, _, kind in OPERATOR_KINDS}
    for group, kind, versions in kinds:
        for version in versions:
            key = (group, version, kind)
            schema = crds.get(key) or schemas.kinds.get(key)
            if schema is None and served is not None and (group, version) not in served:
                continue
            schema = schema or OPERATOR_KINDS.get(key)
            if schema is None and served is None and (group, kind) in described:
                continue
            objects.append((kind, schema if schema is not None else unknown_kind_schema()))
    namespace = schemas.kinds.get(NAMESPACE_KIND)
    return {
        "object": objects,
        "oldObject": objects,
        "namespaceObject": [("Namespace", namespace)],
        "pod": [("pod", POD)],
        "workload": [("workload", WORKLOAD)],
        "resources": [("resources", RESOURCES)],
        "request": [("request", REQUEST)],
    }
