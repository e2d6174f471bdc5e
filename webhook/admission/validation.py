"""The validating webhook for SchedulingPolicy itself (`POST /validate`).

A policy that would not load is refused at `kubectl apply` time with every error and its location, so a
broken policy never reaches the webhooks that would have to skip it. The refusal is a Kubernetes `Invalid`
status (422) whose `details.causes` carry a field path each, which kubectl prints one per line, exactly as
for the API server's own validation errors.
"""

from collections.abc import Mapping
from typing import Any

from webhook.admission.review import build_response
from webhook.engine.configuration import gang_not_enforced
from webhook.engine.request import AdmissionRequest
from webhook.policy.compiler import KIND, PolicyCompiler
from webhook.policy.errors import PolicyError
from webhook.support.typing import JSONObject

GROUP = "placer.dev"


def validate_policy_review(review: AdmissionRequest, compiler: PolicyCompiler) -> JSONObject:
    obj = review.object
    if review.operation == "DELETE" or obj is None or review.kind != KIND:
        return build_response(review.uid, review.api_version)
    result = compiler.compile(obj, KIND)
    if not result.errors:  # loads; a rule that cannot work as written is a warning kubectl prints
        found = gang_not_enforced(result.policy) if result.policy is not None else []
        return build_response(review.uid, review.api_version, warnings=[finding.message for finding in found])
    name = result.name or review.name or "?"
    causes = [{"reason": "FieldValueInvalid", "field": field_path(error, obj), "message": _message(error)}
              for error in result.errors]
    details = "; ".join(f"{cause['field']}: {cause['message']}" for cause in causes)
    message = f'{KIND}.{GROUP} "{name}" is invalid: {len(causes)} error(s): {details}'
    return build_response(
        review.uid,
        review.api_version,
        allowed=False,
        denial=message,
        code=422,
        details={"name": name, "group": GROUP, "kind": KIND, "causes": causes},
    )


def field_path(error: PolicyError, obj: Mapping[str, Any]) -> str:
    """The error's place in the object as a Kubernetes field path (`spec.rules[1].condition`)."""
    if error.rule is None:
        return error.field or "spec"
    spec = obj.get("spec")
    rules = spec.get("rules") if isinstance(spec, dict) else None
    names = [rule.get("name") if isinstance(rule, dict) else None for rule in rules or []]
    index = names.index(error.rule) if error.rule in names else None
    prefix = f"spec.rules[{index}]" if index is not None else "spec.rules"
    if error.field is None or error.field.startswith("spec."):
        return error.field or prefix
    return f"{prefix}.{error.field}"


def _message(error: PolicyError) -> str:
    where = f"rule {error.rule}: " if error.rule else ""
    return where + error.message
