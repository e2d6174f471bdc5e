"""`status` of a SchedulingPolicy: what the controller says about each policy it compiled.

Conditions follow metav1.Condition: `lastTransitionTime` moves only when `status` flips, and nothing is
written when the wanted status is already there, so a status write (which comes back as a MODIFIED event)
never causes another one.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from webhook.policy.errors import PolicyError

READY = "Ready"
MESSAGE_LIMIT = 32768
"""metav1.Condition.message maxLength."""


@dataclass(frozen=True, slots=True)
class PolicyOutcome:
    """The compile result of one SchedulingPolicy object, and what serves for it."""

    generation: int | None
    rules: int
    """Rules compiled (0 when the policy did not compile)."""
    errors: Sequence[PolicyError]
    serving_generation: int | None
    """The generation that serves: this one, an earlier good one, or None."""


def desired_status(outcome: PolicyOutcome, current: Mapping[str, Any] | None, now: datetime) -> dict[str, Any]:
    """The status the object should have, keeping `lastTransitionTime` when the condition did not flip."""
    if not outcome.errors:
        status, reason = "True", "Compiled"
        message = f"{outcome.rules} rule(s) compiled and serving"
    else:
        status, reason = "False", "CompileError"
        details = "; ".join(_without_source(error) for error in outcome.errors)
        if outcome.serving_generation is not None:
            serving = f"generation {outcome.serving_generation} keeps serving"
        else:
            serving = "this policy does not serve"
        message = f"{len(outcome.errors)} error(s), {serving}: {details}"
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 3] + "..."
    previous = ready_condition(current)
    transition = (
        previous["lastTransitionTime"]
        if previous and previous.get("status") == status and previous.get("lastTransitionTime")
        else now.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    condition: dict[str, Any] = {
        "type": READY,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
    }
    result: dict[str, Any] = {"conditions": [condition], "rules": outcome.rules}
    if outcome.generation is not None:
        condition["observedGeneration"] = outcome.generation
        result["observedGeneration"] = outcome.generation
    return result


def status_differs(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    current = current or {}
    if current.get("observedGeneration") != desired.get("observedGeneration"):
        return True
    if current.get("rules") != desired.get("rules"):
        return True
    return ready_condition(current) != ready_condition(desired)


def ready_condition(status: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    conditions = (status or {}).get("conditions")
    if not isinstance(conditions, list):
        return None
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == READY), None)


def _without_source(error: PolicyError) -> str:
    """The error as the status shows it: the object is the source, so the `cluster:` prefix says nothing."""
    return str(error).removeprefix(f"{error.source}: ")
