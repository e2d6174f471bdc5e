"""Enforced policies: which of a request's policies hold it, and the refusals they give.

An Enforced policy turns a rule's placement conflict (a nodeSelector value, a required node affinity, a
scheduler or priority class the object already has, a toleration `restrict-tolerations` does not allow)
into a refusal, at the workload as well as at the Pod, so that no controller loops on refused pods. The
message follows PodNodeSelector's (plugin/pkg/admission/podnodeselector/admission.go, `(*Plugin).Admit`:
`errors.NewForbidden(resource, pod.Name, "pod node label selector conflicts with its namespace node label
selector")`, which reads `pods "x" is forbidden: ...`), and says in addition which policy and rule, which
field, what the rule wanted and what the object has.
"""

import json
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.actions.base import Conflict
from webhook.actions.restrictions import describe
from webhook.engine.outcome import Mutation
from webhook.engine.request import AdmissionRequest
from webhook.policy.model import Policy, Rule
from webhook.support.typing import JSONObject, as_map
from webhook.workloads import TemplateSlot

ENFORCE_LABEL = "placer.dev/enforce"
"""The namespace label (value "true") Placer's controller keeps on the namespaces an Enforced policy selects:
the webhook configuration's second entry (failurePolicy Fail, no objectSelector) selects them."""
NODE_USER_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
"""Who kubelets authenticate as: user `system:node:<name>` in group `system:nodes` (pkg/auth/nodeidentifier/
default.go, `defaultNodeIdentifier.NodeIdentity`, which the NodeRestriction plugin relies on). A kubelet creates
the mirror pod of each static pod, with `spec.nodeName` set to its own node."""


REFUSING_ACTIONS = frozenset({"add-node-selector", "add-node-affinity", "set-scheduler-name", "set-priority-class",
                              "restrict-tolerations"})
"""Actions whose conflicts an Enforced policy refuses (a required node affinity only: `type: required`)."""


def lint_lines(policy: Policy) -> list[str]:
    """What `placer lint` says of a policy's enforcement: which rules refuse, or that exemptions do nothing."""
    if not policy.enforced:
        lines = [f"Warning: {policy.source}: policy {policy.name}: spec.exemptions has no effect under "
                 f"enforcement {policy.enforcement}"] if policy.exemptions is not None else []
        if policy.audited:
            lines.append(f"{policy.name}: Audit: evaluated on every admission as Advisory, never applied; what it "
                         "would write goes to audit annotations, PolicyReports and metrics (promote: "
                         "spec.enforcement: Advisory)")
        return lines
    refusing = [rule.name for rule in policy.rules if rule.action.name in REFUSING_ACTIONS and not rule.override
                and rule.parameters.get("type", "required") == "required"]
    line = (f"{policy.name}: Enforced in namespaces {_selector_text(policy)}: refuses a Pod or template naming its "
            "node" + (f", and a conflict with rule(s) {', '.join(refusing)}" if refusing else "")
            + "; the opt-out label does not exempt")
    if policy.exemptions is not None:
        line += " (spec.exemptions does)"
    return [line]


def enforcing(policies: Iterable[Policy], request: AdmissionRequest) -> dict[str, str | None]:
    """Per Enforced policy among `policies`: None when it holds this request, else why it is exempt (by what
    the request's author cannot write: its namespace, its user and groups)."""
    found: dict[str, str | None] = {}
    for policy in policies:
        if not policy.enforced:
            continue
        exempt = policy.exemptions.reason(request.namespace, request.user_info) if policy.exemptions else None
        found[policy.name] = exempt
    return found


def _selector_text(policy: Policy) -> str:
    selector = policy.document.get("spec", {}).get("namespaceSelector") if policy.document else None
    return "all (namespaceSelector: {})" if not selector else json.dumps(selector, sort_keys=True)


def holding(enforced: Mapping[str, str | None]) -> frozenset[str]:
    """The names of the Enforced policies that are not exempting this request."""
    return frozenset(name for name, exempt in enforced.items() if exempt is None)


def created_by_node(user_info: Mapping[str, Any]) -> bool:
    username = user_info.get("username")
    groups = user_info.get("groups")
    return (isinstance(username, str) and username.startswith(NODE_USER_PREFIX)) or (
        isinstance(groups, list) and NODES_GROUP in groups)


def names_its_node(request: AdmissionRequest, obj: JSONObject) -> bool:
    """A Pod created with `spec.nodeName` (checked even where Placer would otherwise let the Pod pass)."""
    return (request.kind == "Pod" and not request.group and request.operation == "CREATE"
            and not request.sub_resource and bool(as_map(obj.get("spec")).get("nodeName")))


def node_name_refusal(request: AdmissionRequest, obj: JSONObject, policies: frozenset[str]) -> str | None:
    """A Pod that names its node at CREATE skips the scheduler and with it every placement rule: refused
    unless a node creates it (mirror pods of static pods).

    No controller of Kubernetes needs it: the DaemonSet controller places each daemon pod with a required
    node affinity on the node's name (`matchFields` `metadata.name`), not with `nodeName`
    (pkg/controller/daemon/util/daemonset_util.go, `ReplaceDaemonSetPodNodeNameNodeAffinity`), and the
    scheduler binds through the `pods/binding` subresource, which Placer does not see."""
    if not policies or not names_its_node(request, obj) or created_by_node(request.user_info):
        return None
    node = as_map(obj.get("spec")).get("nodeName")
    names = ", ".join(sorted(policies))
    return (f"{forbidden_prefix(request, obj)}policy {names}: spec.nodeName: wanted unset (the scheduler places "
            f"pods), found \"{node}\": only a node may create a pod bound to a node (enforcement: Enforced)")


def template_node_name(template: JSONObject, old: JSONObject | None, prefix: str,
                       policies: frozenset[str]) -> str | None:
    """A workload template that names a node makes only pods an Enforced policy refuses (no node creates
    them): refused at the workload, or its controller would try forever. On UPDATE only a node the old template
    did not name."""
    node = as_map(template.get("spec")).get("nodeName")
    if not policies or not node or (old is not None and as_map(old.get("spec")).get("nodeName") == node):
        return None
    return (f"policy {', '.join(sorted(policies))}: {prefix}spec.nodeName: wanted unset (the scheduler places "
            f"pods), found \"{node}\": every pod of this template would be refused")


def forbidden_prefix(request: AdmissionRequest, obj: JSONObject) -> str:
    """`pods "web-1" is forbidden: `, as errors.NewForbidden words it (the resource, then the name)."""
    metadata = as_map(obj.get("metadata"))
    name = request.name or metadata.get("name") or metadata.get("generateName") or ""
    resource = str(as_map(request.resource).get("resource") or request.kind.lower() + "s")
    return f'{resource} "{name}" is forbidden: '


def refusal_mutation(request: AdmissionRequest, obj: JSONObject, refusals: list[str], mutation: Mutation) -> Mutation:
    """The engine's answer for a request its Enforced policies refuse: one message with every refusal."""
    message = forbidden_prefix(request, obj) + "; ".join(dict.fromkeys(refusals)) + " (enforcement: Enforced)"
    return Mutation(warnings=list(dict.fromkeys(mutation.warnings)), traces=mutation.traces, notes=mutation.notes,
                    denial=message, refused=True)


def field_prefix(slot: TemplateSlot) -> str:
    """Where the template is in the object, as a field path prefix (`spec.template.`), or its name."""
    if slot.projection is None:
        if not slot.path:  # the object itself (a Pod)
            return ""
        parts = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in slot.path)
        return parts[1:] + "." if parts else ""
    return f"template {slot.name}: "


def refusal(policy: Policy, rule: Rule, prefix: str, conflict: Conflict) -> str:
    return (f"policy {policy.name}, rule {rule.name}: {prefix}{conflict.field}: "
            f"wanted {describe_value(conflict.wanted)}, found {describe_value(conflict.found)}")


def introduced(conflict: Conflict, original: JSONObject, old: JSONObject | None) -> bool:
    """Whether the request brings the conflicting value: always on CREATE; on UPDATE only when the old
    template did not have it already (a policy made Enforced must not block every later update)."""
    if old is None:
        return True
    before = _read(old, conflict.path)
    if conflict.member:
        return not (isinstance(before, list) and any(_same_toleration(item, conflict.found) for item in before))
    return bool(before != _read(original, conflict.path))


def _same_toleration(item: Any, found: Any) -> bool:
    return isinstance(item, dict) and describe(item) == found


def _read(template: JSONObject, path: tuple[str, ...]) -> Any:
    node: Any = template
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def describe_value(value: Any) -> str:
    """A wanted or found value in a refusal: strings quoted, a list as its choices."""
    if isinstance(value, list):
        return "one of " + ", ".join(describe_value(item) for item in value)
    return f'"{value}"' if isinstance(value, str) else repr(value)
