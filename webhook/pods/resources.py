"""A pod's effective resource requests and limits, as the scheduler counts them.

Effective = max(sum over app containers and restartable (sidecar) init containers, the largest need of any
one init container while it runs alongside the sidecars started before it), plus pod overhead for requests.
Pod-level resources (`spec.resources`, beta and on by default since Kubernetes 1.34) replace that aggregate
for every resource they name, as the scheduler counts them; overhead is still added.

Devices a pod claims through dynamic resource allocation live in ResourceClaims, not in the pod:
`with_claimed_devices` adds them once the claims are resolved (`webhook.pods.dra`, `webhook.placement.claims`).
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.pods.dra import GPU_DEVICE_CLASSES, PodClaim, pod_claim_references
from webhook.pods.quantity import InvalidQuantityError, parse_quantity
from webhook.support.typing import JSONObject

Totals = dict[str, float]
KNOWN_QUANTITIES = 1024
"""Distinct quantity strings a cache handed to `effective_resources` keeps; past this it starts again."""


def effective_resources(spec: JSONObject, known: dict[str, float] | None = None
                        ) -> tuple[dict[str, Any], list[str]]:
    """`{requests, limits}` maps of resource name -> number, and a note per unreadable quantity; with
    `devices: {}` and, per `spec.resourceClaims[]` entry, `claims[name]` as not known, until the claims are
    resolved (`with_claimed_devices`): the shape rules see is the same with and without a cluster.

    Every quantity is parsed once, and every distinct quantity string once per pod (sidecars and replicas
    of one container repeat theirs: `1`, `500m`, `4Gi`), or once while `known` holds it: the value of each
    quantity string read so far, kept by the caller across pods (the engine keeps one per policy snapshot:
    pods ask for the same few). Runs on every admission that reads `resources`: the common pod (app
    containers only) is one sum per map.
    """
    notes: list[str] = []
    parsed = _Quantities(notes, known)
    requests: Totals = {}
    limits: Totals = {}
    for container in _containers(spec.get("containers")):
        needs = _needs(container, parsed)
        _add(requests, needs[0])
        _add(limits, needs[1])
    totals = [requests, limits]
    if spec.get("initContainers"):
        init = [(container.get("restartPolicy") == "Always", _needs(container, parsed))
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
        pod_level = _needs(spec, parsed, where="pod resources")
        totals[0].update(pod_level[0])
        totals[1].update(pod_level[1])
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        totals[0] = _sum([totals[0], parsed.of_map(overhead, "overhead")])
    unresolved = {name: PodClaim(name, kind, target, None).as_cel()
                  for name, kind, target in pod_claim_references(spec)} if "resourceClaims" in spec else {}
    return {"requests": totals[0], "limits": totals[1], "devices": {}, "claims": unresolved}, notes


def _containers(value: Any) -> Iterable[JSONObject]:
    return (item for item in value if isinstance(item, dict)) if isinstance(value, list) else ()


def _needs(container: JSONObject, parsed: "_Quantities", *, where: str = "") -> tuple[Totals, Totals]:
    """A container's (or the pod's) requests — defaulted from its limits as the API server does — and
    limits."""
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return {}, {}
    limits = parsed.of_map(resources.get("limits"), where or container)
    requests = parsed.of_map(resources.get("requests"), where or container)
    return {**limits, **requests}, limits


class _Quantities:
    """The quantities of one pod, each distinct string parsed once (or never, when `known` has it); a note per
    unreadable one."""

    __slots__ = ("_known", "notes")

    def __init__(self, notes: list[str], known: dict[str, float] | None = None) -> None:
        self.notes = notes
        self._known: dict[str, float] = known if known is not None else {}

    def of_map(self, raw: Any, where: str | JSONObject) -> Totals:
        """Parsed quantities; `where` (a place, or the container, named only when a quantity is unreadable)."""
        parsed: Totals = {}
        if not isinstance(raw, dict):
            return parsed
        known = self._known
        for name, value in raw.items():
            number = known.get(value) if type(value) is str else None
            if number is None:
                try:
                    number = parse_quantity(value)
                except InvalidQuantityError as error:
                    place = where if isinstance(where, str) else f"container {str(where.get('name', '?'))[:30]}"
                    self.notes.append(f"{place}: {str(name)[:40]}: {error}")
                    continue
                if type(value) is str:
                    if len(known) >= KNOWN_QUANTITIES:
                        known.clear()  # a stream of ever new quantities: none is kept long
                    known[value] = number
            parsed[str(name)] = number
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


def with_claimed_devices(
    resources: Mapping[str, Any], claims: Sequence[PodClaim], extended_names: Mapping[str, str] = GPU_DEVICE_CLASSES
) -> dict[str, Any]:
    """`resources` with what the pod claims through DRA (`webhook.pods.dra`) added.

    - `devices`: device class -> number of devices the pod's claims ask for (every class, known claims);
    - `claims`: pod claim name -> `{kind, name, known, devices}` (`known` false: Placer has not seen the
      template or claim, so its devices are not counted anywhere);
    - `requests` and `limits`: devices of a class in `extended_names` (device class -> extended resource
      name; by default `gpu.nvidia.com` -> `nvidia.com/gpu`, see `webhook.pods.dra.GPU_DEVICE_CLASSES`) also
      count under that name, as the device plugin's GPUs do (an extended resource's request always equals
      its limit), so GPU rules written for `nvidia.com/gpu` match DRA GPU pods unchanged.
    """
    devices: Totals = {}
    for claim in claims:
        for name, number in (claim.devices or {}).items():
            devices[name] = devices.get(name, 0.0) + float(number)
    extended: Totals = {}
    for name, total in devices.items():
        resource = extended_names.get(name)
        if resource is not None:
            extended[resource] = extended.get(resource, 0.0) + total
    result: dict[str, Any] = dict(resources)
    result["requests"] = _sum([resources.get("requests") or {}, extended])
    result["limits"] = _sum([resources.get("limits") or {}, extended])
    result["devices"] = devices
    result["claims"] = {claim.name: claim.as_cel() for claim in claims}
    return result
