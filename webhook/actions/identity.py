"""Where each action's own value sits in a pod template: the place a rule writes to, found again later.

Actions only add: a value already in a rule's place is kept (a user's value wins), so a template keeps
whatever a rule wrote under an earlier version of the policy. To tell whether that value is still the one
the rule writes now (`webhook.engine.value_drift`), each action names its places by what identifies its
value, the same identity its own "already there?" check uses, loosened to what a policy edit keeps:

- `add-node-selector`, `add-labels`, `add-annotations`: the key;
- `set-scheduler-name`, `set-priority-class`: the field (the default scheduler counts as unset);
- `add-toleration`: the toleration with the same key, operator, value and effect, else the last with the key;
- `add-topology-spread`: the constraint with the same topologyKey and whenUnsatisfiable, else the last with
  the topologyKey;
- `add-node-affinity`: required, in each term the last requirement on the key (requirements are ANDed into
  every term); preferred, the last term holding a single requirement on the key;
- `add-pod-affinity`, `add-pod-anti-affinity`: the last term of the rule's type on the topologyKey;
- `add-gang-labels`: the flavour's group, queue and size keys, and the scheduler's name.

Actions without places (`restrict-tolerations` writes nothing; `pin-to-volume-node` runs on Pods, judged on
their owner; a native gang's `schedulingGroup`; YuniKorn's task groups) are not compared.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.actions.base import child_map
from webhook.actions.scheduling import DEFAULT_SCHEDULER
from webhook.actions.tolerations import toleration_from
from webhook.gang.flavours import FLAVOURS
from webhook.gang.native import NATIVE
from webhook.support.json_copy import copy_json
from webhook.support.typing import JSONObject


@dataclass(frozen=True, slots=True)
class Place:
    """One value of a rule in a template: `container[key]`, named `slot` in messages."""

    slot: str
    container: Any
    """The dict or list holding the value."""
    key: str | int

    @property
    def value(self) -> Any:
        return self.container[self.key]

    def replace(self, value: Any) -> None:
        self.container[self.key] = value


Locate = Callable[[JSONObject, Mapping[str, Any]], list[Place]]


@dataclass(frozen=True, slots=True)
class Identity:
    """How to find an action's values, and the parts of a template it writes (`metadata.labels`,
    `spec.tolerations`; a scalar of `spec` needs `spec` itself, which is copied one level deep)."""

    locate: Locate
    writes: tuple[tuple[str, ...], ...]
    by_parameters: Callable[[Mapping[str, Any]], bool] | None = None
    """Given the parameters, whether what the action writes depends on them alone (not on the template nor
    the workload), so that one answer serves every template."""
    """Paths of what the action may change: the last part of a longer path is copied whole, a map alone on
    its path (`spec`) one level deep."""


def places(action: str, template: JSONObject, params: Mapping[str, Any]) -> list[Place]:
    """The values `action` with `params` would own in `template`, where there are any."""
    identity = IDENTITIES.get(action)
    return identity.locate(template, params) if identity is not None else []


def comparable(action: str) -> bool:
    """Whether the action's value can be found again in a template."""
    return action in IDENTITIES


def by_parameters(action: str, params: Mapping[str, Any]) -> bool:
    """Whether what the action writes depends on `params` alone (see Identity.by_parameters)."""
    decides = IDENTITIES[action].by_parameters
    return decides is not None and decides(params)


def _always(params: Mapping[str, Any]) -> bool:
    return True


def _selector_given(params: Mapping[str, Any]) -> bool:
    """A spread or pod term with its own labelSelector: the workload's own pods are not looked at."""
    return bool(params.get("labelSelector"))


def scratch_copy(action: str, template: JSONObject) -> JSONObject:
    """A copy of `template` the action may change freely: the maps on the way to what it writes copied one
    level, and what it writes copied one level too (its entries shared: actions append to lists and set
    keys of maps, they change no entry) or, for `spec.affinity`, whole (requirements are ANDed into each
    existing term). The rest, containers and volumes first, is shared."""
    copied = dict(template)
    for path in IDENTITIES[action].writes:
        source, target = template, copied
        for depth, key in enumerate(path):
            found = source.get(key)
            shared = target.get(key) is found
            if depth == len(path) - 1 and key == "affinity":
                target[key] = copy_json(found)
                break
            if isinstance(found, dict):
                if shared:
                    target[key] = dict(found)
                source, target = found, target[key]
            else:
                if isinstance(found, list):
                    target[key] = list(found)
                break
    return copied


def remove(found: Iterable[Place]) -> None:
    """Take the values out of their templates (list entries from the last, so indices stay right)."""
    for place in sorted(found, key=lambda place: place.key if isinstance(place.key, int) else -1, reverse=True):
        if isinstance(place.container, list) and isinstance(place.key, int):
            del place.container[place.key]
        else:
            place.container.pop(place.key, None)


def _keyed(*path: str, label: str) -> Locate:
    def locate(template: JSONObject, params: Mapping[str, Any]) -> list[Place]:
        held = child_map(template, *path)
        if held is None:
            return []
        return [Place(f"{label}[{key}]", held, key) for key in params if key in held]
    return locate


def _field(name: str, *, unset: tuple[Any, ...] = ()) -> Locate:
    def locate(template: JSONObject, params: Mapping[str, Any]) -> list[Place]:
        spec = child_map(template, "spec")
        if spec is None or spec.get(name) is None or spec.get(name) in unset:
            return []
        return [Place(name, spec, name)]
    return locate


def _last(items: Any, matches: Callable[[Any], bool]) -> int | None:
    if not isinstance(items, list):
        return None
    found = [index for index, item in enumerate(items) if isinstance(item, dict) and matches(item)]
    return found[-1] if found else None


def _first_exact_else_last(items: Any, exact: Callable[[Any], bool], loose: Callable[[Any], bool]) -> int | None:
    index = _last(items, exact)
    return index if index is not None else _last(items, loose)


def _toleration(template: JSONObject, params: Mapping[str, Any]) -> list[Place]:
    wanted = toleration_from(params)
    tolerations = (child_map(template, "spec") or {}).get("tolerations")
    key = str(wanted.get("key") or "")

    def identity(item: Any) -> tuple[str, str, str, str]:
        return (str(item.get("key") or ""), str(item.get("operator") or "Equal"), str(item.get("value") or ""),
                str(item.get("effect") or ""))

    index = _first_exact_else_last(tolerations, lambda item: identity(item) == identity(wanted),
                                   lambda item: str(item.get("key") or "") == key)
    return [] if index is None else [Place(f"tolerations[{key or '*'}]", tolerations, index)]


def _spread(template: JSONObject, params: Mapping[str, Any]) -> list[Place]:
    constraints = (child_map(template, "spec") or {}).get("topologySpreadConstraints")
    key, when = params["topologyKey"], params["whenUnsatisfiable"]
    index = _first_exact_else_last(
        constraints, lambda item: (item.get("topologyKey"), item.get("whenUnsatisfiable")) == (key, when),
        lambda item: item.get("topologyKey") == key)
    return [] if index is None else [Place(f"topologySpreadConstraints[{key}]", constraints, index)]


def _node_affinity(template: JSONObject, params: Mapping[str, Any]) -> list[Place]:
    key = params["key"]
    node_affinity = child_map(template, "spec", "affinity", "nodeAffinity")
    if node_affinity is None:
        return []
    if params["type"] == "required":
        terms = (child_map(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
            "nodeSelectorTerms")
        found = []
        for number, term in enumerate(terms if isinstance(terms, list) else []):
            items = term.get("matchExpressions") if isinstance(term, dict) else None
            index = _last(items, lambda item: item.get("key") == key)
            if index is not None:
                found.append(Place(f"nodeAffinity.required.nodeSelectorTerms[{number}][{key}]", items, index))
        return found
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")

    def single(item: Any) -> bool:
        expressions = (item.get("preference") or {}).get("matchExpressions") or []
        return len(expressions) == 1 and isinstance(expressions[0], dict) and expressions[0].get("key") == key

    index = _last(preferred, single)
    return [] if index is None else [Place(f"nodeAffinity.preferred[{key}]", preferred, index)]


def _pod_term(kind: str) -> Locate:
    def locate(template: JSONObject, params: Mapping[str, Any]) -> list[Place]:
        key = params["topologyKey"]
        affinity = child_map(template, "spec", "affinity", kind)
        if affinity is None:
            return []
        if params["type"] == "required":
            terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
            index = _last(terms, lambda item: item.get("topologyKey") == key)
        else:
            terms = affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
            index = _last(terms, lambda item: (item.get("podAffinityTerm") or {}).get("topologyKey") == key)
        return [] if index is None else [Place(f"{kind}.{params['type']}[{key}]", terms, index)]
    return locate


def _gang(template: JSONObject, params: Mapping[str, Any]) -> list[Place]:
    flavour = FLAVOURS[params["scheduler"]]
    if flavour.name == NATIVE:
        return []
    found = []
    for key in (flavour.group, flavour.queue if params.get("queue") else None, flavour.size):
        if key is None:
            continue
        held = child_map(template, "metadata", key.where)
        if held is not None and key.name in held:
            found.append(Place(f"{key.where}[{key.name}]", held, key.name))
    if params.get("schedulerName") or flavour.scheduler_name:
        found.extend(_field("schedulerName", unset=(DEFAULT_SCHEDULER,))(template, params))
    return found


SPEC = ("spec",)
"""`spec` copied one level: enough for an action that sets or removes scalars of the spec."""
LABELS, ANNOTATIONS = ("metadata", "labels"), ("metadata", "annotations")

IDENTITIES: Mapping[str, Identity] = {
    "add-node-selector": Identity(_keyed("spec", "nodeSelector", label="nodeSelector"), (("spec", "nodeSelector"),),
                                  by_parameters=_always),
    "add-labels": Identity(_keyed(*LABELS, label="labels"), (LABELS,)),
    "add-annotations": Identity(_keyed(*ANNOTATIONS, label="annotations"), (ANNOTATIONS,), by_parameters=_always),
    "set-scheduler-name": Identity(_field("schedulerName", unset=(DEFAULT_SCHEDULER,)), (SPEC,), by_parameters=_always),
    "set-priority-class": Identity(_field("priorityClassName"), (SPEC,)),
    "add-toleration": Identity(_toleration, (("spec", "tolerations"),), by_parameters=_always),
    "add-topology-spread": Identity(_spread, (("spec", "topologySpreadConstraints"),), by_parameters=_selector_given),
    "add-node-affinity": Identity(_node_affinity, (("spec", "affinity"),)),
    "add-pod-affinity": Identity(_pod_term("podAffinity"), (("spec", "affinity"),), by_parameters=_selector_given),
    "add-pod-anti-affinity": Identity(_pod_term("podAntiAffinity"), (("spec", "affinity"),),
                                      by_parameters=_selector_given),
    "add-gang-labels": Identity(_gang, (LABELS, ANNOTATIONS, SPEC)),
}
"""Action name -> how to find its values (a constant table, like the action registry)."""
