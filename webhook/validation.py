"""The validating webhook for SchedulingPolicy itself (`POST /validate`).

A policy that would not load is refused at `kubectl apply` time with every error and its location, so a
broken policy never reaches the webhooks that would have to skip it.
"""

from webhook.policy.compiler import KIND, PolicyCompiler
from webhook.review import AdmissionRequest, build_response
from webhook.typing import JSONObject


def validate_policy_review(review: AdmissionRequest, compiler: PolicyCompiler) -> JSONObject:
    obj = review.object
    if review.operation == "DELETE" or obj is None or review.kind != KIND:
        return build_response(review.uid, review.api_version)
    result = compiler.compile(obj, KIND)
    if not result.errors:
        return build_response(review.uid, review.api_version)
    name = result.name or review.name or "?"
    details = "; ".join(str(error).removeprefix(f"{KIND}: ") for error in result.errors)
    message = f"SchedulingPolicy {name} is invalid: {len(result.errors)} error(s): {details}"
    return build_response(review.uid, review.api_version, allowed=False, denial=message, code=422)
