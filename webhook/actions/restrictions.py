"""`restrict-tolerations`: the tolerations a pod may carry, with PodTolerationRestriction's whitelist semantics.

A toleration lets a pod onto tainted nodes, so in a shared cluster it is a key to another tenant's pool (or
the GPU nodes). Kubernetes' PodTolerationRestriction admission plugin
(plugin/pkg/admission/podtolerationrestriction/admission.go, `(*Plugin).Validate`) refuses a pod whose
tolerations are not all covered by its namespace's whitelist, using `VerifyAgainstWhitelist`
(pkg/util/tolerations/tolerations.go): each toleration of the pod must have some whitelist entry that
tolerates a superset of it, `IsSuperset` (pkg/util/tolerations/merge/merge.go). `covers` below is that
function; this action applies it to the pod or template, and reports each toleration outside the list as
a refusable conflict: refused by an Enforced policy, a warning under Advisory.

Always allowed, whatever the list says:
- the tolerations the selected policies' own `add-toleration` rules add (`ActionContext.placer_tolerations`);
- the API server's defaults: the DefaultTolerationSeconds plugin
  (plugin/pkg/admission/defaulttolerationseconds/admission.go, `(*Plugin).Admit`) gives every Pod
  `node.kubernetes.io/not-ready` and `node.kubernetes.io/unreachable` with operator Exists, effect NoExecute
  and tolerationSeconds 300 (its flags may set another number, so any tolerationSeconds passes);
- on a Pod its DaemonSet made, the tolerations the DaemonSet controller adds to every daemon pod
  (pkg/controller/daemon/util/daemonset_util.go, `AddOrUpdateDaemonPodTolerations`), so that the controller
  never loops on pods it cannot create.
"""

from collections.abc import Mapping
from typing import Any

from webhook.actions.base import ActionContext, ActionSpec, Param
from webhook.support.typing import JSONObject, as_map
from webhook.workloads import controller_reference

RESTRICT_TOLERATIONS = "restrict-tolerations"
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
API_SERVER_DEFAULTS: tuple[JSONObject, ...] = tuple(
    {"key": key, "operator": "Exists", "value": "", "effect": "NoExecute"} for key in (NOT_READY, UNREACHABLE)
)
DAEMON_POD_TOLERATIONS: tuple[JSONObject, ...] = (
    *API_SERVER_DEFAULTS,
    *({"key": f"node.kubernetes.io/{name}", "operator": "Exists", "value": "", "effect": "NoSchedule"}
      for name in ("disk-pressure", "memory-pressure", "pid-pressure", "unschedulable", "network-unavailable")),
)


def restrict_tolerations(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    """Report every toleration of the template that nothing allowed covers; changes nothing."""
    tolerations = as_map(template.get("spec")).get("tolerations")
    if not isinstance(tolerations, list):
        return False
    allowed = [*params["allowed"], *API_SERVER_DEFAULTS, *context.placer_tolerations]
    owner = controller_reference(template)
    if owner is not None and owner.get("kind") == "DaemonSet":
        allowed.extend(DAEMON_POD_TOLERATIONS)
    for toleration in tolerations:
        if not isinstance(toleration, dict) or any(covers(entry, toleration) for entry in allowed):
            continue
        context.conflict(
            f"toleration {describe(toleration)} is not allowed (allowed: {allowed_text(params['allowed'])})",
            field="spec.tolerations", wanted=[describe(entry) for entry in params["allowed"]],
            found=describe(toleration), path=("spec", "tolerations"), member=True,
        )
    return False


def covers(entry: Mapping[str, Any], toleration: Mapping[str, Any]) -> bool:
    """Whether the allowed `entry` tolerates a superset of what `toleration` does (merge.go `IsSuperset`).

    An entry with an empty key and operator Exists covers every key; an empty effect every effect; an
    entry with effect NoExecute and tolerationSeconds covers only tolerations bounded by as many seconds;
    Exists covers any value, Equal (or no operator) only an Equal toleration with the same value."""
    key, effect = str(toleration.get("key") or ""), str(toleration.get("effect") or "")
    operator = str(toleration.get("operator") or "Equal")
    entry_key, entry_effect = str(entry.get("key") or ""), str(entry.get("effect") or "")
    entry_operator = str(entry.get("operator") or "Equal")
    if key != entry_key and (entry_key or entry_operator != "Exists"):
        return False
    if effect != entry_effect and entry_effect:
        return False
    limit = entry.get("tolerationSeconds")
    if entry_effect == "NoExecute" and limit is not None:
        seconds = toleration.get("tolerationSeconds")
        if not isinstance(seconds, int) or seconds > limit:
            return False
    if entry_operator == "Exists":
        return True
    return operator == "Equal" and str(toleration.get("value") or "") == str(entry.get("value") or "")


def describe(toleration: Mapping[str, Any]) -> str:
    """`key=value:Effect`, `key:Effect` for Exists (the form `kubectl taint` uses), `*` for an empty key."""
    key = str(toleration.get("key") or "") or "*"
    value = str(toleration.get("value") or "")
    text = f"{key}={value}" if value else key
    effect = str(toleration.get("effect") or "")
    return f"{text}:{effect}" if effect else text


def allowed_text(allowed: list[Mapping[str, Any]]) -> str:
    return ", ".join(describe(entry) for entry in allowed)


SPECS = (
    ActionSpec(
        name=RESTRICT_TOLERATIONS,
        apply=restrict_tolerations,
        params=(Param("allowed", "tolerations", required=True),),
    ),
)
