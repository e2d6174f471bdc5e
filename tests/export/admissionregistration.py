"""The admissionregistration.k8s.io MutatingAdmissionPolicy and MutatingAdmissionPolicyBinding schema
(v1beta1, identical in v1), written from the API reference: every field, its type, the required ones, the
enumerations, and no field that is not in the API (the API server drops unknown fields with a warning,
which would silently lose a part of the policy)."""

from typing import Any

STRING_LIST: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
QUALIFIED_NAME = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
CEL_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"

LABEL_SELECTOR: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["key", "operator"],
            "properties": {"key": {"type": "string"}, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                           "values": STRING_LIST}}},
    },
}
RULE: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "required": ["apiGroups", "apiVersions", "operations", "resources"],
    "properties": {
        "apiGroups": STRING_LIST, "apiVersions": STRING_LIST, "resources": STRING_LIST, "resourceNames": STRING_LIST,
        "operations": {"type": "array", "items": {"enum": ["CREATE", "UPDATE", "CONNECT", "*"]}},
        "scope": {"enum": ["Cluster", "Namespaced", "*"]},
    },
}
MATCH_RESOURCES: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "namespaceSelector": LABEL_SELECTOR, "objectSelector": LABEL_SELECTOR,
        "resourceRules": {"type": "array", "items": RULE}, "excludeResourceRules": {"type": "array", "items": RULE},
        "matchPolicy": {"enum": ["Exact", "Equivalent"]},
    },
}
EXPRESSION: dict[str, Any] = {"type": "object", "additionalProperties": False, "required": ["expression"],
                              "properties": {"expression": {"type": "string", "minLength": 1}}}
METADATA: dict[str, Any] = {
    "type": "object", "required": ["name"],
    "properties": {"name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253},
                   "labels": {"type": "object", "additionalProperties": {"type": "string"}}},
}


def schemas(api_version: str) -> dict[str, dict[str, Any]]:
    """The two kinds' schemas, by kind, for `admissionregistration.k8s.io/<api_version>`."""
    api = {"const": f"admissionregistration.k8s.io/{api_version}"}
    policy = {
        "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": api, "kind": {"const": "MutatingAdmissionPolicy"}, "metadata": METADATA,
            "spec": {
                "type": "object", "additionalProperties": False,
                "required": ["matchConstraints", "mutations", "reinvocationPolicy"],
                "properties": {
                    "paramKind": {"type": "object"},
                    "matchConstraints": {**MATCH_RESOURCES, "required": ["resourceRules"]},
                    "failurePolicy": {"enum": ["Ignore", "Fail"]},
                    "reinvocationPolicy": {"enum": ["Never", "IfNeeded"]},
                    "matchConditions": {"type": "array", "maxItems": 64, "items": {
                        "type": "object", "additionalProperties": False, "required": ["name", "expression"],
                        "properties": {"name": {"type": "string", "pattern": QUALIFIED_NAME},
                                       "expression": {"type": "string", "minLength": 1}}}},
                    "variables": {"type": "array", "items": {
                        "type": "object", "additionalProperties": False, "required": ["name", "expression"],
                        "properties": {"name": {"type": "string", "pattern": CEL_IDENTIFIER},
                                       "expression": {"type": "string", "minLength": 1}}}},
                    "mutations": {"type": "array", "minItems": 1, "items": {
                        "type": "object", "additionalProperties": False, "required": ["patchType"],
                        "properties": {"patchType": {"enum": ["ApplyConfiguration", "JSONPatch"]},
                                       "jsonPatch": EXPRESSION, "applyConfiguration": EXPRESSION}}},
                },
            },
        },
    }
    binding = {
        "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": api, "kind": {"const": "MutatingAdmissionPolicyBinding"}, "metadata": METADATA,
            "spec": {"type": "object", "additionalProperties": False, "required": ["policyName"],
                     "properties": {"policyName": {"type": "string", "minLength": 1}, "paramRef": {"type": "object"},
                                    "matchResources": MATCH_RESOURCES}},
        },
    }
    return {"MutatingAdmissionPolicy": policy, "MutatingAdmissionPolicyBinding": binding}
