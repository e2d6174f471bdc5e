"""What the API server does with exported MutatingAdmissionPolicies, for tests: bindings and resource rules
matched, match conditions, variables, then each mutation's JSON Patch applied in order, each on the result
of the previous (KEP-3962). Expressions are the exported ones, as written, compiled as the target Kubernetes
version compiles them (`webhook.export.kubernetes_env`: only the libraries that version has, the types the
API server declares: `object`, `oldObject`, `request`, `namespaceObject`, each variable as the type of its
expression, `JSONPatch` in mutations; nothing of Placer's, so `pod`, `workload`, `resources`, `cel.bind` do
not compile), each also held to the literal homogeneity and the return types Kubernetes enforces. A
mutation's `JSONPatch` values become JSON Patch operations as the API server writes them (a `value` in JSON,
where an integer and the same double are one number)."""

from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch
from google.protobuf import json_format

from webhook.actions.base import selector_matches
from webhook.export.api_types import ADMISSION_REQUEST, NAMESPACE
from webhook.export.kubernetes_env import NO_VARIABLES, Kind, KubernetesCel, Variables
from webhook.export.versions import DEFAULT_TARGET, KubernetesVersion
from webhook.policy.cel import environment as cel

RESOURCES = {"Pod": "pods", "Deployment": "deployments", "ReplicaSet": "replicasets", "StatefulSet": "statefulsets",
             "DaemonSet": "daemonsets", "Job": "jobs", "CronJob": "cronjobs"}


class PolicyFailed(Exception):
    """failurePolicy Fail and an expression failed: the API server rejects the request."""


class MapRuntime:
    def __init__(self, target: KubernetesVersion = DEFAULT_TARGET) -> None:
        self.kubernetes = KubernetesCel(target)
        self._compiled: dict[tuple[Variables, Kind, str], cel.Program] = {}
        self.errors: list[str] = []
        """Every expression that failed (ignored under failurePolicy Ignore), for a test's message."""

    def compile(self, source: str, kind: Kind, variables: Variables = NO_VARIABLES) -> cel.Program:
        key = (variables, kind, source)
        program = self._compiled.get(key)
        if program is None:
            refusal = self.kubernetes.refusal(source, kind, variables)
            assert refusal is None, f"{refusal}: {source[:300]}"
            program = self._compiled[key] = cel.compile_expression(self.environment(source, kind, variables), source)
        return program

    def environment(self, source: str, kind: Kind, variables: Variables = NO_VARIABLES) -> Any:
        """The environment `source` is compiled and run in, as the export checks it."""
        return self.kubernetes.environment_for(source, NO_VARIABLES if kind is Kind.MATCH_CONDITION else variables)

    def declared(self, spec: Mapping[str, Any]) -> Variables:
        """The policy's variables with the types the API server declares them with, in order."""
        variables = NO_VARIABLES
        for variable in spec.get("variables") or []:
            variables, refusal = self.kubernetes.declare(variables, variable["name"], variable["expression"])
            assert refusal is None, f"variable {variable['name']}: {refusal}"
        return variables

    def admit(self, objects: Sequence[Mapping[str, Any]], obj: dict[str, Any], *, request: Mapping[str, Any],
              namespace: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> dict[str, Any]:
        policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "MutatingAdmissionPolicy"}
        for binding in (o for o in objects if o["kind"] == "MutatingAdmissionPolicyBinding"):
            policy = policies[binding["spec"]["policyName"]]
            if self._selected(policy, binding, obj, request, namespace):
                obj = self._run(policy["spec"], obj, request, namespace, old)
        return obj

    def _selected(self, policy: Mapping[str, Any], binding: Mapping[str, Any], obj: Mapping[str, Any],
                  request: Mapping[str, Any], namespace: Mapping[str, Any]) -> bool:
        resource = RESOURCES.get(str(obj.get("kind")))
        if not any(resource in rule["resources"] and request["operation"] in rule["operations"]
                   for rule in policy["spec"]["matchConstraints"]["resourceRules"]):
            return False
        match = binding["spec"].get("matchResources") or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return (selector_matches(match.get("namespaceSelector") or {}, namespace["metadata"].get("labels") or {})
                and selector_matches(match.get("objectSelector") or {}, labels))

    def _run(self, spec: Mapping[str, Any], obj: dict[str, Any], request: Mapping[str, Any],
             namespace: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
        fail = spec.get("failurePolicy", "Fail") == "Fail"
        base = self._bound(obj, old, request, namespace)
        for condition in spec.get("matchConditions") or []:
            environment = self.environment(condition["expression"], Kind.MATCH_CONDITION)
            result = cel.evaluate(self.compile(condition["expression"], Kind.MATCH_CONDITION),
                                  cel.activation(environment, base))
            if result.value is False:
                return obj
            if result.value is not True:
                self.errors.append(f"{condition['name']}: {result.error or result.missing}")
                if fail:
                    raise PolicyFailed(f"match condition {condition['name']}: {result.error or result.missing}")
                return obj
        declared = self.declared(spec)
        for mutation in spec["mutations"]:
            data = {**base, "object": obj}
            data.update(self._variables(spec, declared, data))
            source = mutation["jsonPatch"]["expression"]
            result = cel.evaluate(self.compile(source, Kind.MUTATION, declared),
                                  cel.activation(self.environment(source, Kind.MUTATION, declared), data))
            if not isinstance(result.value, list):
                self.errors.append(f"{result.error or result.missing}: {mutation['jsonPatch']['expression'][:200]}")
                if fail:
                    raise PolicyFailed(result.error or result.missing or "not a list of patch operations")
                continue
            obj = jsonpatch.apply_patch(obj, [operation(patch) for patch in result.value])
        return obj

    def _bound(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None, request: Mapping[str, Any],
               namespace: Mapping[str, Any]) -> dict[str, Any]:
        """The variables as the API server binds them (`newActivation`, plugin/cel/activation.go): `request`
        converted to unstructured, so a user without extra has no `extra` key (`authenticationv1.UserInfo`
        tags it omitempty; `CreateAdmissionRequest`, plugin/cel/condition.go): reading it unguarded fails,
        `has()` says false."""
        user = dict(request.get("userInfo") or {})
        extra = user.pop("extra", None) or {}
        if extra:
            user["extra"] = extra
        types = self.kubernetes.api_types
        base = {"object": obj, "oldObject": old,
                "request": types.message(ADMISSION_REQUEST, {**request, "userInfo": user}),
                "namespaceObject": types.message(NAMESPACE, namespace)}
        if extra:
            base["request.userInfo.extra"] = extra
        return base

    def _variables(self, spec: Mapping[str, Any], declared: Variables, base: Mapping[str, Any]) -> dict[str, Any]:
        """Each variable in order (bound as `variables.<name>`), seeing those before it; one that fails is
        absent (reading it fails)."""
        values: dict[str, Any] = {}
        seen = NO_VARIABLES
        for variable, (name, cel_type) in zip(spec.get("variables") or [], declared.declared, strict=True):
            program = self.compile(variable["expression"], Kind.VARIABLE, seen)
            environment = self.environment(variable["expression"], Kind.VARIABLE, seen)
            result = cel.evaluate(program, cel.activation(environment, {**base, **values}))
            if result.error is None and result.missing is None:
                values[f"variables.{name}"] = result.value
            seen = seen.add(name, cel_type)
        return values


def operation(patch: Any) -> dict[str, Any]:
    """A `JSONPatch` value as the JSON Patch operation the API server applies (its `value` as JSON: the
    protobuf Value that carries it here keeps numbers as doubles; JSON has one number type)."""
    written: dict[str, Any] = json_format.MessageToDict(patch, preserving_proto_field_name=True)
    if "value" in written:
        written["value"] = _numbers(written["value"])
    return written


def _numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_numbers(item) for item in value]
    if isinstance(value, dict):
        return {key: _numbers(item) for key, item in value.items()}
    return value
