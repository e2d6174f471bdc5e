"""Whether a gang still fits: a gang scheduler starts a gang only when all its members can run at once, so
its pods need room on the nodes they may use for as many pods as the gang's size (`gang_capacity.gang_needs`:
per member template). Counted as `webhook.placement.gang_capacity` counts it: each node that passes the node
filters for the template holds allocatable ÷ per-pod requests of its pods, running nothing else."""

from collections.abc import Mapping
from typing import Any

from webhook.gang.facts import GangFacts
from webhook.placement.gang_capacity import describe_requests, gang_needs, pods_that_fit
from webhook.placement.node_fit import Nodes, node_filter
from webhook.support.typing import as_map


def gang_shortfalls(facts: GangFacts | None, specs: Mapping[str, Mapping[str, Any]], nodes: Nodes) -> list[str]:
    """Per member template the nodes cannot hold at once: `gang train of 8 needs 8 nodes with room for
    nvidia.com/gpu 8, 6 have room`. `specs`: each template's pod spec after the change, by template name."""
    if facts is None:
        return []
    group, needs = gang_needs(facts)
    found = []
    for member, needed in needs:
        spec = specs.get(member.name)
        if spec is None:
            continue
        rejection = node_filter(spec)
        held = [pods_that_fit(member.requests, as_map(node.get("allocatable")))
                for name, node in nodes if rejection(name, node) is None]
        room = [count for count in held if count > 0]
        if sum(room) >= needed:
            continue
        where = f" ({member.name})" if member.name else ""
        requests = describe_requests(member.requests)
        if max(room, default=0) <= 1:
            found.append(f"gang {group}{where} of {needed} needs {needed} nodes with room for {requests}, "
                         f"{len(room)} have room")
        else:
            found.append(f"gang {group}{where} of {needed} needs room for {needed} pods of {requests}, the "
                         f"{len(held)} nodes it may use hold {sum(room)}")
    return found
