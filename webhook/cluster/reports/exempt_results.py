"""An Enforced policy's exemptions, judged on a stored workload as its admission judges them.

Admission exempts a request (the policy acts as Advisory for it: `webhook.policy.exemptions`) by its
namespace, its object's labels, or who sends it. A stored workload has a namespace and labels: those are
judged exactly. Who created it is what its admission recorded (`webhook.engine.exemption_marks`), counted
only while the policy still exempts that user or group. An exempt workload's results for the policy are
`skip`, naming the exemption; one its admission did not record as exempt is judged as anyone's.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.cluster.reports.results import RuleResult
from webhook.engine.exemption_marks import recorded_exemptions
from webhook.policy.model import Policy
from webhook.support.typing import JSONObject, as_map


def exempt_policies(policies: Iterable[Policy], namespace: str, obj: JSONObject) -> dict[str, str]:
    """Per Enforced policy that exempts this workload: the exemption, named."""
    labels: Mapping[str, Any] = as_map(as_map(obj.get("metadata")).get("labels"))
    recorded = recorded_exemptions(obj)
    found = {}
    for policy in policies:
        if not policy.enforced or policy.exemptions is None:
            continue
        reason = policy.exemptions.reason(namespace, labels, {})
        if reason is None and policy.name in recorded and _still_exempts(policy, recorded[policy.name]):
            reason = f"{recorded[policy.name]} (recorded when it was admitted)"
        if reason is not None:
            found[policy.name] = f"exempt from the Enforced policy {policy.name}: {reason}"
    return found


def judged_as_exempt(results: Sequence[RuleResult], exempt: Mapping[str, str]) -> tuple[RuleResult, ...]:
    """`results` with each rule of an exempt policy `skip`, the exemption named."""
    return tuple(RuleResult(result.policy, result.rule, "skip", exempt[result.policy])
                 if result.policy in exempt else result for result in results)


def _still_exempts(policy: Policy, reason: str) -> bool:
    """`user alice is exempt` / `group platform-admins is exempt`: that user or group is still exempt."""
    exemptions = policy.exemptions
    if exemptions is None:
        return False
    kind, _, rest = reason.partition(" ")
    name = rest.removesuffix(" is exempt")
    return name in (exemptions.users if kind == "user" else exemptions.groups if kind == "group" else ())
