"""The record of an exemption by user or group, on the workload it was admitted for.

An Enforced policy exempts a request by who sends it (`spec.exemptions.users`, `groups`): a stored object
does not say who created it (no field of an object records its author), so the reports judging it later
(`webhook.cluster.reports.compliance`) could not tell an exempt workload from one that escaped the boundary.
The admission that exempts it says so on the object's own metadata, `placer.dev/exempt: "<policy>: group
platform-admins is exempt"`, next to Placer's other marks; an admission that exempts nothing takes a mark
away, so a write by anyone not exempt removes one they copied. The mark only informs the reports: admission
always judges the request's own author.
"""

from collections.abc import Mapping

from webhook.support.typing import JSONObject, as_map

EXEMPT_ANNOTATION = "placer.dev/exempt"
_BY_AUTHOR = ("user ", "group ")


def exemption_marks(obj: JSONObject, exempting: Mapping[str, str | None]) -> dict[tuple[str, str], str | None]:
    """The mark to put on (or take off) the object, for `marks_patch`: the Enforced policies exempting this
    request by its author, with why; nothing when the object already carries exactly that."""
    reasons = [f"{policy}: {reason}" for policy, reason in sorted(exempting.items())
               if reason is not None and reason.startswith(_BY_AUTHOR)]
    current = as_map(as_map(obj.get("metadata")).get("annotations")).get(EXEMPT_ANNOTATION)
    wanted = "; ".join(reasons) or None
    return {} if current == wanted else {("annotations", EXEMPT_ANNOTATION): wanted}


def recorded_exemptions(obj: JSONObject) -> dict[str, str]:
    """Per policy, the exemption by author the object's admission recorded."""
    text = as_map(as_map(obj.get("metadata")).get("annotations")).get(EXEMPT_ANNOTATION)
    found = {}
    for entry in str(text or "").split("; "):
        policy, separator, reason = entry.partition(": ")
        if separator and policy and reason.startswith(_BY_AUTHOR):
            found[policy] = reason
    return found
