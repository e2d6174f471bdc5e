"""The OpenAPI schemas of the kinds a policy sees, per Kubernetes version, and how to walk a field path in them.

Three sources, one shape (named definitions plus the kinds found among them):
- offline, the schemas Kubernetes publishes, as the `kubernetes-validate` package ships them per minor
  (`kubernetes_validate/kubernetes-json-schema/v1.3x.0-local-strict/_definitions.json`);
- with a cluster, its own `/openapi/v3` documents (built-in kinds and every served CRD, as that server
  publishes them: staging/src/k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder);
- operator kinds from CustomResourceDefinition files (`spec.versions[].schema.openAPIV3Schema`).

A schema's `$ref` names a definition by its last path segment (`#/$defs/io.k8s.api.core.v1.PodSpec`,
`#/components/schemas/io.k8s.api.core.v1.PodSpec`): the names are the same in every source.
"""

import importlib.util
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.policy.fields.versions import SUPPORTED

Schema = Mapping[str, Any]
KindKey = tuple[str, str, str]
"""(API group, version, kind); the core group is ""."""

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_GVK = "x-kubernetes-group-version-kind"
_PRESERVE = "x-kubernetes-preserve-unknown-fields"
_SCALARS = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "a boolean"}


@dataclass(frozen=True, slots=True)
class SchemaSet:
    """The definitions of one Kubernetes version (or one cluster) and the kinds among them."""

    version: str
    definitions: Mapping[str, Schema]
    kinds: Mapping[KindKey, Schema] = field(default_factory=dict)

    def with_kinds(self, extra: Mapping[KindKey, Schema]) -> "SchemaSet":
        """These schemas and more kinds (CRDs read from files), which win over the same kind here."""
        return SchemaSet(self.version, self.definitions, {**self.kinds, **extra})

    def resolve(self, schema: Schema | None) -> Schema | None:
        """The schema a `$ref` (or an `allOf` of one, as OpenAPI v3 writes a described reference) names;
        None for a name this set lacks (read as dynamic)."""
        seen = 0
        while schema is not None and seen < 64:
            seen += 1
            ref = schema.get("$ref")
            if ref is None:
                parts = schema.get("allOf")
                if isinstance(parts, list) and len(parts) == 1 and isinstance(parts[0], dict):
                    schema = parts[0]
                    continue
                return schema
            schema = self.definitions.get(str(ref).rsplit("/", 1)[-1])
        return schema


def _kinds_of(definitions: Mapping[str, Schema]) -> dict[KindKey, Schema]:
    kinds: dict[KindKey, Schema] = {}
    for schema in definitions.values():
        for gvk in schema.get(_GVK) or ():
            if isinstance(gvk, dict):
                kinds[(str(gvk.get("group", "")), str(gvk.get("version", "")), str(gvk.get("kind", "")))] = schema
    return kinds


def published_schemas(version: str) -> SchemaSet:
    """The schemas Kubernetes `version` publishes, from the `kubernetes-validate` package. Read whole, with
    their descriptions: dropping those while decoding saves a quarter of the memory but costs 20 times the
    time (a Python call per schema)."""
    document = json.loads((_package_folder() / f"v{version}.0-local-strict" / "_definitions.json").read_bytes())
    definitions = document["$defs"]
    return SchemaSet(version, definitions, _kinds_of(definitions))


def _package_folder() -> Path:
    """`kubernetes_validate/kubernetes-json-schema`, found without importing the package (whose import,
    jsonschema and all, takes 0.4 s: more than reading the schemas)."""
    spec = importlib.util.find_spec("kubernetes_validate")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise FileNotFoundError("the kubernetes-validate package is not installed")
    return Path(locations[0]) / "kubernetes-json-schema"


def openapi_v3_schemas(version: str, documents: Iterable[Mapping[str, Any]]) -> SchemaSet:
    """The schemas of a cluster's `/openapi/v3/<group-version>` documents, merged."""
    definitions: dict[str, Schema] = {}
    for document in documents:
        components = document.get("components")
        schemas = components.get("schemas") if isinstance(components, dict) else None
        if isinstance(schemas, dict):
            definitions.update((name, _strip(schema)) for name, schema in schemas.items() if isinstance(schema, dict))
    return SchemaSet(version, definitions, _kinds_of(definitions))


def _strip(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {key: _strip(value) for key, value in schema.items() if key != "description"}
    if isinstance(schema, list):
        return [_strip(item) for item in schema]
    return schema


def crd_kinds(documents: Iterable[Any]) -> dict[KindKey, Schema]:
    """Kinds (one per served version) of the CustomResourceDefinitions among `documents`, with their
    `openAPIV3Schema`; a custom resource's `metadata` is always an ObjectMeta (the API server validates it
    as one whatever the schema says: apiextensions-apiserver pkg/apiserver/schema/objectmeta)."""
    kinds: dict[KindKey, Schema] = {}
    for document in documents:
        if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
            continue
        spec = document.get("spec")
        if not isinstance(spec, dict):
            continue
        group, names = str(spec.get("group", "")), spec.get("names")
        kind = names.get("kind") if isinstance(names, dict) else None
        for version in spec.get("versions") or ():
            if not isinstance(version, dict) or not isinstance(kind, str):
                continue
            schema = version.get("schema")
            root = schema.get("openAPIV3Schema") if isinstance(schema, dict) else None
            if isinstance(root, dict):
                kinds[(group, str(version.get("name", "")), kind)] = custom_resource_schema(_strip(root))
    return kinds


def custom_resource_schema(root: Schema) -> Schema:
    """A custom resource's schema with `metadata` as the ObjectMeta it always is."""
    properties = dict(root.get("properties") or {})
    properties["metadata"] = {"$ref": f"#/$defs/{OBJECT_META}"}
    return {**root, "properties": properties}


def unknown_kind_schema() -> Schema:
    """A kind whose schema is not known: any field, except that its metadata is an ObjectMeta (every
    object's is) — so `object.metadata.lables` is refused even when an operator's CRD is not at hand."""
    return {"type": "object", _PRESERVE: True,
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "metadata": {"$ref": f"#/$defs/{OBJECT_META}"}}}


class SchemaCatalog:
    """Published schemas per version, each read on first use (40-50 ms) and kept for the process's life: at
    most one per supported version, 3.4 MiB for 1.37 and 12.4 MiB for all four (measured with tracemalloc).
    A newer version is read only to say which version first has a field the target lacks."""

    def __init__(self) -> None:
        self._published: dict[str, SchemaSet] = {}

    def published(self, version: str) -> SchemaSet:
        if version not in SUPPORTED:
            raise ValueError(f"no published schemas for Kubernetes {version}")
        found = self._published.get(version)
        if found is None:
            found = self._published[version] = published_schemas(version)
        return found


# Steps of a path below a variable.
EACH = "[*]"
"""Every element of what is iterated (a comprehension's variable)."""
ANY_INDEX = "[_]"
"""An element or value selected by a computed index (`x[i]`, `x[0]`)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a step is in none of the alternatives: the names that are there, or what the value is instead."""

    known: frozenset[str] = frozenset()
    not_an_object: str | None = None
    """e.g. `a list`, `a string`: a value with no fields at all."""


Alternative = Schema | None
"""A schema a value may have; None: unknown (anything goes below it)."""


def step(schemas: SchemaSet, alternatives: list[Alternative], key: str) -> tuple[list[Alternative], Refusal]:
    """The schemas of `value.key` (or of an element, for EACH / ANY_INDEX) for each schema `value` may have.
    An empty list means no alternative has it; the refusal then says what they have."""
    found: list[Alternative] = []
    known: set[str] = set()
    not_object: str | None = None
    pending = list(alternatives)
    while pending:
        schema = schemas.resolve(pending.pop()) if pending[-1] is not None else pending.pop()
        if schema is None:
            found.append(None)
            continue
        choices = schema.get("oneOf") or schema.get("anyOf")
        if isinstance(choices, list) and "properties" not in schema and "type" not in schema:
            pending.extend(choice for choice in choices if isinstance(choice, dict))
            continue
        outcome = _one_step(schema, key)
        if isinstance(outcome, Refusal):
            known |= outcome.known
            not_object = not_object or outcome.not_an_object
        else:
            found.append(outcome)
    return found, Refusal(frozenset(known), None if known else not_object)


def _types(schema: Schema) -> set[str]:
    declared = schema.get("type")
    types = set(declared) if isinstance(declared, list) else {declared} if isinstance(declared, str) else set()
    return types - {"null"}


def _one_step(schema: Schema, key: str) -> Alternative | Refusal:
    types = _types(schema)
    if schema.get("x-kubernetes-int-or-string"):
        return Refusal(not_an_object="an int-or-string")
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    if key in (EACH, ANY_INDEX):
        if "array" in types:
            items = schema.get("items")
            return items if isinstance(items, dict) else None
        if key == ANY_INDEX and isinstance(additional, dict) and not properties:
            return additional
        if types and types <= set(_SCALARS):
            return Refusal(not_an_object=_SCALARS[sorted(types)[0]])
        return None  # a map's keys, or an object iterated: not followed
    if isinstance(properties, dict) and properties:
        if key in properties:
            below = properties[key]
            return below if isinstance(below, dict) else None
        if isinstance(additional, dict):
            return additional
        if additional is True or schema.get(_PRESERVE):
            return None
        return Refusal(known=frozenset(properties))
    if isinstance(additional, dict):
        return additional
    if "array" in types:
        return Refusal(not_an_object="a list")
    if types and types <= set(_SCALARS):
        return Refusal(not_an_object=_SCALARS[sorted(types)[0]])
    return None  # an object without declared fields: free-form
