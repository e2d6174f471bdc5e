"""Spread constraints and pod (anti-)affinity terms as exported mutations: what they select.

A term selects what the webhook's `ActionContext.pod_selection` selects: the rule's `labelSelector`, else the
workload's own pods (`variables.placerOwnPods`), with the `matchLabelKeys` the rule wrote or, without them
and without a `labelSelector`, the workload's revision label (`variables.placerRevisionKeys`), which
narrows the count to the new pod's revision (docs/placement-defaults.md). Where the webhook skips the
action (no selector, or a key the rule wrote is one its selector reads, which kube-apiserver refuses:
pkg/apis/core/validation/validation.go, validateMatchLabelKeysAndMismatchLabelKeys), the mutation writes
nothing and the rule is not named as applied (`*_skipped`).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.export.cel_text import Cel, OptionalEntry, dyn_map, literal
from webhook.export.helpers import selector_keys
from webhook.export.mutations import append, optional_list

OWN_PODS = "variables.placerOwnPods"
REVISION_KEYS = "variables.placerRevisionKeys"


def _selector(params: Mapping[str, Any]) -> str:
    """The term's selector: the parameter, else the workload's own pods (null when none can be derived)."""
    selector = params.get("labelSelector")
    if isinstance(selector, Cel):
        return f"dyn({selector.source})"
    return f"dyn({literal(selector)})" if selector else OWN_PODS


@dataclass(frozen=True, slots=True)
class PodSelection:
    """What a spread constraint or pod (anti-)affinity term selects, as CEL, chosen as the webhook's
    `ActionContext.pod_selection` chooses it: the rule's `labelSelector` with its own `matchLabelKeys` or
    none; else the workload's own pods with the rule's `matchLabelKeys` (even `[]`) or, without them, the
    revision keys (`variables.placerRevisionKeys`)."""

    selector: str
    keys: str
    """CEL: the `matchLabelKeys` (a list of strings, empty for none)."""
    written: list[str] | None
    """The `matchLabelKeys` the rule wrote (its own selector's, or its own); None for the revision keys."""

    @property
    def skipped(self) -> str:
        """CEL: the webhook skips the action (no selector can be derived, or a key the rule wrote is one the
        selector reads, which kube-apiserver refuses)."""
        empty = f"{self.selector}.size() == 0"
        if not self.written:
            return empty
        return f"{empty} || {literal(self.written)}.exists(k, k in {selector_keys(self.selector)})"

    def with_keys(self, entries: dict[str, str | OptionalEntry]) -> dict[str, str | OptionalEntry]:
        """`entries` (of a `dyn_map`) with `matchLabelKeys` when there are any."""
        if self.written is None:
            return {**entries, "'matchLabelKeys'": OptionalEntry(f"{self.keys}.size() > 0", self.keys)}
        return {**entries, "'matchLabelKeys'": self.keys} if self.written else dict(entries)


def pod_selection(params: Mapping[str, Any]) -> PodSelection:
    """The selection of a rule with `params` (a `labelSelector` computed in CEL counts as given)."""
    if params.get("labelSelector"):
        written = list(params.get("matchLabelKeys") or [])
    elif "matchLabelKeys" in params:
        written = list(params["matchLabelKeys"])
    else:
        return PodSelection(_selector(params), REVISION_KEYS, None)
    return PodSelection(_selector(params), literal(written), written)


def pod_affinity(kind: str) -> Any:
    def build(params: Mapping[str, Any], override: bool) -> str:
        selection = pod_selection(params)
        selector = selection.selector
        key = literal(params["topologyKey"])
        term = dyn_map(selection.with_keys({"'labelSelector'": selector, "'topologyKey'": key}))

        def same(term_of: str) -> str:
            return (f"{term_of}.?topologyKey.orValue('') == {key} && "
                    f"{term_of}.?labelSelector.orValue({{}}) == {selector}")

        if params["type"] == "required":
            tokens = ("spec", "affinity", kind, "requiredDuringSchedulingIgnoredDuringExecution")
            exists = f"{optional_list(*tokens)}.exists(e, {same('e')})"
            item = term
        else:
            tokens = ("spec", "affinity", kind, "preferredDuringSchedulingIgnoredDuringExecution")
            exists = f"{optional_list(*tokens)}.exists(p, {same('p.?podAffinityTerm')})"
            item = dyn_map({"'weight'": literal(params["weight"]), "'podAffinityTerm'": term})
        return f"{selection.skipped} || {exists} ? [] : ({append(tokens, item)})"
    return build


def pod_affinity_skipped(params: Mapping[str, Any]) -> str:
    """CEL: the webhook skips the term (`webhook.actions.affinity._add_pod_term` selects first)."""
    return pod_selection(params).skipped


def topology_spread(params: Mapping[str, Any], override: bool) -> str:
    selection = pod_selection(params)
    entries: dict[str, str | OptionalEntry] = {
        literal("maxSkew"): literal(_integer(params["maxSkew"])),
        literal("topologyKey"): literal(params["topologyKey"]),
        literal("whenUnsatisfiable"): literal(params["whenUnsatisfiable"]),
        literal("labelSelector"): selection.selector,
    }
    for optional in ("minDomains", "nodeAffinityPolicy", "nodeTaintsPolicy"):
        if params.get(optional):
            value = _integer(params[optional]) if optional == "minDomains" else params[optional]
            entries[literal(optional)] = literal(value)
    constraint = dyn_map(selection.with_keys(entries))
    tokens = ("spec", "topologySpreadConstraints")
    return (f"{_spread_exists(params)} || {selection.skipped} ? [] : "
            f"({append(tokens, constraint)})")


def topology_spread_skipped(params: Mapping[str, Any]) -> str:
    """CEL: the webhook skips the constraint (`webhook.actions.topology.add_topology_spread` first looks for
    one with the same topologyKey and whenUnsatisfiable, then selects)."""
    return f"!({_spread_exists(params)}) && ({pod_selection(params).skipped})"


def _spread_exists(params: Mapping[str, Any]) -> str:
    return (f"{optional_list('spec', 'topologySpreadConstraints')}.exists(c, "
            f"c.?topologyKey.orValue('') == {literal(params['topologyKey'])} && "
            f"c.?whenUnsatisfiable.orValue('') == {literal(params['whenUnsatisfiable'])})")


def _integer(value: Any) -> Any:
    return Cel(f"int({value.source})") if isinstance(value, Cel) else value
