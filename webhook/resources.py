"""A pod's effective resource requests and limits, as the scheduler counts them.

Effective = max(sum over app containers and restartable (sidecar) init containers, the largest need of any
one init container while it runs alongside the sidecars started before it), plus pod overhead for requests.
Pod-level resources (`spec.resources`, beta and on by default since Kubernetes 1.34) replace that aggregate
for every resource they name, as the scheduler counts them; overhead is still added.
"""

from collections.abc import Iterable
from typing import Any

from webhook.quantity import InvalidQuantityError, parse_quantity
from webhook.typing import JSONObject

Totals = dict[str, float]


def effective_resources(spec: JSONObject) -> tuple[dict[str, Totals], list[str]]:
    """`{requests, limits}` maps of resource name -> number, and a note per unreadable quantity."""
    notes: list[str] = []
    # every quantity is parsed once: (requests, limits) of each container and of the pod
    app = [_needs(container, notes) for container in _containers(spec.get("containers"))]
    init = [(container.get("restartPolicy") == "Always", _needs(container, notes))
            for container in _containers(spec.get("initContainers"))]
    pod_level = _needs(spec, notes, where="pod resources")
    result: dict[str, Totals] = {}
    for index, kind in enumerate(("requests", "limits")):
        sidecars: Totals = {}
        peak: Totals = {}
        for restartable, needs in init:
            if restartable:
                sidecars = _sum([sidecars, needs[index]])
            else:
                peak = _max(peak, _sum([sidecars, needs[index]]))
        total = _max(_sum([_sum(needs[index] for needs in app), sidecars]), peak)
        total.update(pod_level[index])
        if kind == "requests":
            overhead = spec.get("overhead")
            if isinstance(overhead, dict):
                total = _sum([total, _parse_map(overhead, "overhead", notes)])
        result[kind] = total
    return result, notes


def _containers(value: Any) -> Iterable[JSONObject]:
    return (item for item in value if isinstance(item, dict)) if isinstance(value, list) else ()


def _needs(container: JSONObject, notes: list[str], *, where: str = "") -> tuple[Totals, Totals]:
    """A container's (or the pod's) requests — defaulted from its limits as the API server does — and
    limits."""
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return {}, {}
    where = where or f"container {str(container.get('name', '?'))[:30]}"
    limits = _parse_map(resources.get("limits"), where, notes)
    requests = _parse_map(resources.get("requests"), where, notes)
    return {**limits, **requests}, limits


def _parse_map(raw: Any, where: str, notes: list[str]) -> Totals:
    parsed: Totals = {}
    if not isinstance(raw, dict):
        return parsed
    for name, value in raw.items():
        try:
            parsed[str(name)] = parse_quantity(value)
        except InvalidQuantityError as error:
            notes.append(f"{where}: {str(name)[:40]}: {error}")
    return parsed


def _sum(items: Iterable[Totals]) -> Totals:
    total: Totals = {}
    for item in items:
        for name, value in item.items():
            total[name] = total.get(name, 0.0) + value
    return total


def _max(left: Totals, right: Totals) -> Totals:
    merged = dict(left)
    for name, value in right.items():
        merged[name] = max(merged.get(name, value), value)
    return merged
