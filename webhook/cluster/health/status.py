"""`status` of a SchedulingPolicy: what the controller says about each policy it compiled.

`Ready` says whether the policy compiled and which generation serves; `Healthy` and `recent` say what its
rules did in the last window on every replica (`policy_health`). Conditions follow metav1.Condition:
`lastTransitionTime` moves only when `status` flips, and nothing is written when the wanted status is
already there, so a status write (which comes back as a MODIFIED event) never causes another one.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from webhook.cluster.health.policy_health import HEALTHY, PolicyHealth, healthy_condition, recent_status
from webhook.engine.configuration import Finding
from webhook.policy.errors import PolicyError

READY = "Ready"
NOT_SERVING = "NotServing"
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
    rule_names: tuple[str, ...] = ()
    """The rules of the version that serves, in order (whose counts the status shows)."""
    findings: tuple[Finding, ...] = field(default=())
    """Rules of the serving version that cannot work as written (`webhook.engine.configuration`)."""


def desired_status(
    outcome: PolicyOutcome,
    current: Mapping[str, Any] | None,
    now: datetime,
    *,
    health: PolicyHealth | None = None,
    findings: Iterable[Finding] = (),
    policy: str = "",
    health_known: bool = True,
) -> dict[str, Any]:
    """The status the object should have, keeping `lastTransitionTime` where a condition did not flip.

    `health`: the policy's counts over every replica (None: no replica has counts); `findings`: the
    outcome's and those only the cluster can tell (PodGroups not served); `health_known` False: the counts
    are not read yet (a new leader), so what the status says of them stays as it is."""
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
    ready = _condition(READY, status, reason, message, previous=condition_of(current, READY), now=now,
                       generation=outcome.generation)
    previous = condition_of(current, HEALTHY)
    if outcome.serving_generation is None:  # nothing of it serves: nothing to count
        healthy = _condition(HEALTHY, "Unknown", NOT_SERVING, "the policy does not serve (see Ready)",
                             previous=previous, now=now, generation=outcome.generation)
    elif not health_known and previous is not None:
        healthy = dict(previous)
    else:
        healthy_status, healthy_reason, healthy_message = healthy_condition(policy, health,
                                                                            [*outcome.findings, *findings])
        healthy = _condition(HEALTHY, healthy_status, healthy_reason, healthy_message, previous=previous, now=now,
                             generation=outcome.generation)
    result: dict[str, Any] = {"conditions": [ready, healthy], "rules": outcome.rules}
    if health is not None:
        result["recent"] = recent_status(health)
    elif not health_known and current and "recent" in current:
        result["recent"] = current["recent"]
    if outcome.generation is not None:
        result["observedGeneration"] = outcome.generation
    return result


def _condition(kind: str, status: str, reason: str, message: str, *, previous: Mapping[str, Any] | None,
               now: datetime, generation: int | None) -> dict[str, Any]:
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 3] + "..."
    transition = (
        previous["lastTransitionTime"]
        if previous and previous.get("status") == status and previous.get("lastTransitionTime")
        else now.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    condition: dict[str, Any] = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def status_differs(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """Whether writing `desired` would change anything of what the controller owns in `current`."""
    current = current or {}
    return any(current.get(key) != desired.get(key) for key in ("observedGeneration", "rules", "recent")) or any(
        condition_of(current, kind) != condition_of(desired, kind) for kind in (READY, HEALTHY))


def condition_of(status: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    conditions = (status or {}).get("conditions")
    if not isinstance(conditions, list):
        return None
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == kind), None)


def ready_condition(status: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return condition_of(status, READY)


def _without_source(error: PolicyError) -> str:
    """The error as the status shows it: the object is the source, so the `cluster:` prefix says nothing."""
    return str(error).removeprefix(f"{error.source}: ")
