"""An Enforced policy's exemptions, judged on a stored workload as its admission judges them.

Admission exempts a request (the policy acts as Advisory for it: `webhook.policy.exemptions`) by its
namespace, or by who sends it. A stored workload's namespace is judged exactly. Who created it is not recorded
by Kubernetes; what is, is Placer's exemption seal (`webhook.engine.exemption_seal`): an exempt request's
templates carry a keyed digest of their spec that only Placer can compute, and a workload whose every pod
template carries one that verifies was written by an exempt user or group, as its admission found. With the
key (`--exemption-key`, or the Secret Placer keeps), such a workload is exempt here too. An exempt workload's
results for the policy are `skip`, naming the exemption; one neither exempt nor sealed is judged as anyone's.
"""

from collections.abc import Iterable, Mapping, Sequence

from webhook.cluster.reports.results import RuleResult
from webhook.engine.exemption_seal import Seals
from webhook.policy.model import Policy
from webhook.support.typing import JSONObject
from webhook.workloads import WorkloadKind


def exempt_policies(policies: Iterable[Policy], namespace: str, obj: JSONObject, kind: WorkloadKind | None,
                    seals: Seals | None) -> dict[str, str]:
    """Per Enforced policy that exempts this workload: the exemption, named."""
    found = {}
    seal = _sealed(obj, namespace, kind, seals)
    for policy in policies:
        if not policy.enforced or policy.exemptions is None:
            continue
        reason = policy.exemptions.reason(namespace, {})
        if reason is None and seal and (policy.exemptions.users or policy.exemptions.groups):
            reason = "its pod templates carry Placer's exemption seal: an exempt user or group wrote them"
        if reason is not None:
            found[policy.name] = f"exempt from the Enforced policy {policy.name}: {reason}"
    return found


def judged_as_exempt(results: Sequence[RuleResult], exempt: Mapping[str, str]) -> tuple[RuleResult, ...]:
    """`results` with each rule of an exempt policy `skip`, the exemption named."""
    return tuple(RuleResult(result.policy, result.rule, "skip", exempt[result.policy])
                 if result.policy in exempt else result for result in results)


def _sealed(obj: JSONObject, namespace: str, kind: WorkloadKind | None, seals: Seals | None) -> bool:
    """Every pod template of the workload carries a seal that verifies against its own spec."""
    if seals is None or kind is None:
        return False
    templates = [raw for slot in kind.templates(obj) if (raw := slot.read(obj)) is not None]
    return bool(templates) and all(seals.verifies(namespace, template) for template in templates)
