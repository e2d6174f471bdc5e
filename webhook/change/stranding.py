"""Why a pod template's pods would have nowhere to run, named by its cause: `no node has node-pool=gpu2`,
`taint dedicated=gpu:NoSchedule not tolerated`, `no node with node-pool=gpu has room for cpu 64`.

The scheduler's node filters that depend only on the pod and the node (`webhook.placement.node_fit`: node
name, taints, nodeSelector, required node affinity, cordoned nodes) and whether a node's allocatable holds one
pod's requests (NodeResourcesFit with nothing else running: `gang_capacity.pods_that_fit`) are applied in
the order that names the cause an operator acts on: first which nodes the pod asks for (its name, labels and
affinity), then which of those it may not use (cordoned, tainted), then which have room. The scheduler runs
the taint filter before the label ones (kubernetes pkg/scheduler/apis/config/v1/default_plugins.go), so its
event counts a tainted node without the label as "untolerated taint"; here that node counts as not asked
for, and the reason is the missing label. What runs on the nodes now is not counted: "can never", not
"cannot now".
"""

from collections import Counter
from collections.abc import Mapping
from typing import Any

from webhook.placement.gang_capacity import describe_requests, pods_that_fit
from webhook.placement.node_fit import UNSCHEDULABLE_TAINT, Nodes, required_terms, term_matches, tolerates
from webhook.pods.resources import effective_resources
from webhook.support.typing import as_map

REJECTING_EFFECTS = ("NoSchedule", "NoExecute")


def why_nowhere(spec: Mapping[str, Any], nodes: Nodes) -> str | None:
    """Why no node can ever run a pod with `spec`, or None when one can."""
    requested, why = _asked_for(spec, nodes)
    if why is not None:
        return why
    which = _which(spec, len(requested))
    tolerations = [t for t in spec.get("tolerations") or [] if isinstance(t, dict)]
    usable = [(name, facts) for name, facts in requested
              if not facts.get("unschedulable") or any(tolerates(t, UNSCHEDULABLE_TAINT) for t in tolerations)]
    if not usable:
        return f"{which} cordoned"
    untolerated: Counter[str] = Counter()
    tolerated = []
    for name, facts in usable:
        taint = next((taint for taint in facts.get("taints") or [] if taint.get("effect") in REJECTING_EFFECTS
                      and not any(tolerates(t, taint) for t in tolerations)), None)
        if taint is None:
            tolerated.append((name, facts))
        else:
            value = f"={taint['value']}" if taint.get("value") else ""
            untolerated[f"taint {taint.get('key')}{value}:{taint.get('effect')} not tolerated"] += 1
    if not tolerated:
        return "; ".join(reason + (f" ({count} nodes)" if len(untolerated) > 1 else "")
                         for reason, count in untolerated.most_common())
    requests = pod_requests(spec)
    if not any(not facts.get("allocatable") or pods_that_fit(requests, as_map(facts.get("allocatable")))
               for _, facts in tolerated):  # a Node manifest without status: its room is not known
        return f"{_which(spec, len(tolerated), usable=True)} room for {describe_requests(requests)}"
    return None


def pod_requests(spec: Mapping[str, Any]) -> dict[str, float]:
    """One pod's requests as the scheduler counts them (sum over containers, max with each init container)."""
    totals, _ = effective_resources(dict(spec))
    return {name: float(value) for name, value in as_map(totals.get("requests")).items()}


def _asked_for(spec: Mapping[str, Any], nodes: Nodes) -> tuple[Nodes, str | None]:
    """The nodes the pod asks for by name, labels and required affinity; or why there is none."""
    if not nodes:
        return [], "the cluster has no node"
    candidates = nodes
    node_name = spec.get("nodeName")
    if isinstance(node_name, str) and node_name:
        candidates = [(name, facts) for name, facts in nodes if name == node_name]
        if not candidates:
            return [], f"no node is named {node_name}"
    selector = {str(k): str(v) for k, v in as_map(spec.get("nodeSelector")).items()}
    for key, value in selector.items():
        if not any(as_map(facts.get("labels")).get(key) == value for _, facts in candidates):
            return [], f"no node has {key}={value}"
    candidates = [(name, facts) for name, facts in candidates
                  if all(as_map(facts.get("labels")).get(k) == v for k, v in selector.items())]
    if not candidates:
        return [], f"no node has {_pairs(selector, ' and ')} together"
    terms = required_terms(spec)
    if terms is not None:
        candidates = [(name, facts) for name, facts in candidates
                      if any(term_matches(term, name, as_map(facts.get("labels"))) for term in terms)]
        if not candidates:
            within = f" with {_pairs(selector, ', ')}" if selector else ""
            return [], f"no node{within} matches the required node affinity ({describe_terms(terms)})"
    return candidates, None


def _which(spec: Mapping[str, Any], count: int, *, usable: bool = False) -> str:
    """`every node with node-pool=gpu (3) is`, `the only node with node-pool=gpu is`; `usable`: `no node with
    node-pool=gpu has` (among those whose taints the pods tolerate, which the reasons before have ruled on)."""
    selector = {str(k): str(v) for k, v in as_map(spec.get("nodeSelector")).items()}
    what = f" with {_pairs(selector, ', ')}" if selector else (
        " the pods may use" if required_terms(spec) is not None else "")
    if usable:
        return f"no node{what} has"
    return f"the only node{what} is" if count == 1 else f"every node{what} ({count}) is"


def _pairs(selector: Mapping[str, str], joiner: str) -> str:
    return joiner.join(f"{key}={value}" for key, value in selector.items())


def describe_terms(terms: list[Mapping[str, Any]]) -> str:
    """Required nodeSelectorTerms as `node-pool In [gpu2]; zone NotIn [a]` (terms ORed with ` or `)."""
    shown = []
    for term in terms:
        parts = [f"{item.get('key')} {item.get('operator')}"
                 + (f" [{', '.join(str(v) for v in item.get('values') or [])}]" if item.get("values") else "")
                 for item in [*(term.get("matchExpressions") or []), *(term.get("matchFields") or [])]]
        shown.append(", ".join(parts) or "an empty term")
    return " or ".join(shown)
