"""What the API server does with exported MutatingAdmissionPolicies, for tests: bindings and resource rules
matched, match conditions, variables, then each mutation's JSON Patch applied in order, each on the result
of the previous (KEP-3962). Expressions are the exported ones in the plain dialect (`mutations.PLAIN`:
patch operations as maps, since this CEL runtime has no `JSONPatch` type), compiled in the environment of the
target Kubernetes version (`webhook.export.kubernetes_env`: only the libraries that version has, and the
variables of these policies: `object`, `oldObject`, `request`, `namespaceObject`, `variables`; nothing of
Placer's, so `pod`, `workload`, `resources`, `cel.bind` do not compile), each also held to the literal
homogeneity Kubernetes enforces."""

from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch

from webhook.actions.base import selector_matches
from webhook.export.kubernetes_env import KubernetesCel
from webhook.export.versions import DEFAULT_TARGET, KubernetesVersion
from webhook.policy.cel import environment as cel

RESOURCES = {"Pod": "pods", "Deployment": "deployments", "ReplicaSet": "replicasets", "StatefulSet": "statefulsets",
             "DaemonSet": "daemonsets", "Job": "jobs", "CronJob": "cronjobs"}


class PolicyFailed(Exception):
    """failurePolicy Fail and an expression failed: the API server rejects the request."""


class MapRuntime:
    def __init__(self, target: KubernetesVersion = DEFAULT_TARGET) -> None:
        self.kubernetes = KubernetesCel(target)
        self.environment = self.kubernetes.environment
        self._compiled: dict[str, cel.Program] = {}
        self.errors: list[str] = []
        """Every expression that failed (ignored under failurePolicy Ignore), for a test's message."""

    def compile(self, source: str) -> cel.Program:
        program = self._compiled.get(source)
        if program is None:
            refusal = self.kubernetes.refusal(source)
            assert refusal is None, f"{refusal}: {source[:300]}"
            program = self._compiled[source] = cel.compile_expression(self.environment, source)
        return program

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
        base = {"object": obj, "oldObject": old, "request": request, "namespaceObject": namespace}
        for condition in spec.get("matchConditions") or []:
            result = cel.evaluate(self.compile(condition["expression"]), cel.activation(self.environment, base))
            if result.value is False:
                return obj
            if result.value is not True:
                self.errors.append(f"{condition['name']}: {result.error or result.missing}")
                if fail:
                    raise PolicyFailed(f"match condition {condition['name']}: {result.error or result.missing}")
                return obj
        for mutation in spec["mutations"]:
            data = {**base, "object": obj, "variables": self._variables(spec, {**base, "object": obj})}
            result = cel.evaluate(self.compile(mutation["jsonPatch"]["expression"]),
                                  cel.activation(self.environment, data))
            if not isinstance(result.value, list):
                self.errors.append(f"{result.error or result.missing}: {mutation['jsonPatch']['expression'][:200]}")
                if fail:
                    raise PolicyFailed(result.error or result.missing or "not a list of patch operations")
                continue
            obj = jsonpatch.apply_patch(obj, result.value)
        return obj

    def _variables(self, spec: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
        """Each variable in order, seeing those before it; one that fails is absent (reading it fails)."""
        values: dict[str, Any] = {}
        for variable in spec.get("variables") or []:
            result = cel.evaluate(self.compile(variable["expression"]),
                                  cel.activation(self.environment, {**base, "variables": dict(values)}))
            if result.error is None and result.missing is None:
                values[variable["name"]] = result.value
        return values
