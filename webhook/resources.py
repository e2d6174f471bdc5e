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
    """`{requests, limits}` maps of resource name -> number, and a note per unreadable quantity.

    Every quantity is parsed once. Runs on every admission that reads `resources`: the common pod (app
    containers only) is one sum per map.
    """
    notes: list[str] = []
    requests: Totals = {}
    limits: Totals = {}
    for container in _containers(spec.get("containers")):
        needs = _needs(container, notes)
        _add(requests, needs[0])
        _add(limits, needs[1])
    totals = [requests, limits]
    if spec.get("initContainers"):
        init = [(container.get("restartPolicy") == "Always", _needs(container, notes))
                for container in _containers(spec.get("initContainers"))]
        for index in (0, 1):
            sidecars: Totals = {}
            peak: Totals = {}
            for restartable, needs in init:
                if restartable:
                    sidecars = _sum([sidecars, needs[index]])
                else:
                    peak = _max(peak, _sum([sidecars, needs[index]]))
            totals[index] = _max(_sum([totals[index], sidecars]), peak)
    if "resources" in spec:
        pod_level = _needs(spec, notes, where="pod resources")
        totals[0].update(pod_level[0])
        totals[1].update(pod_level[1])
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        totals[0] = _sum([totals[0], _parse_map(overhead, "overhead", notes)])
    return {"requests": totals[0], "limits": totals[1]}, notes


def _containers(value: Any) -> Iterable[JSONObject]:
    return (item for item in value if isinstance(item, dict)) if isinstance(value, list) else ()


def _needs(container: JSONObject, notes: list[str], *, where: str = "") -> tuple[Totals, Totals]:
    """A container's (or the pod's) requests — defaulted from its limits as the API server does — and
    limits."""
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return {}, {}
    limits = _parse_map(resources.get("limits"), where or container, notes)
    requests = _parse_map(resources.get("requests"), where or container, notes)
    return {**limits, **requests}, limits


def _parse_map(raw: Any, where: str | JSONObject, notes: list[str]) -> Totals:
    """Parsed quantities; `where` (a place, or the container, named only when a quantity is unreadable)."""
    parsed: Totals = {}
    if not isinstance(raw, dict):
        return parsed
    for name, value in raw.items():
        try:
            parsed[str(name)] = parse_quantity(value)
        except InvalidQuantityError as error:
            place = where if isinstance(where, str) else f"container {str(where.get('name', '?'))[:30]}"
            notes.append(f"{place}: {str(name)[:40]}: {error}")
    return parsed


def _add(total: Totals, item: Totals) -> None:
    for name, value in item.items():
        total[name] = total.get(name, 0.0) + value


def _sum(items: Iterable[Totals]) -> Totals:
    total: Totals = {}
    for item in items:
        _add(total, item)
    return total


def _max(left: Totals, right: Totals) -> Totals:
    merged = dict(left)
    for name, value in right.items():
        merged[name] = max(merged.get(name, value), value)
    return merged
