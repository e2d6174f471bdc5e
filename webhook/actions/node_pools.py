"""`prefer-node-pools`: an ordered list of node pools, the first with room wins.

Each pool becomes a PREFERRED node affinity term (`key In [pool]`) with a weight that halves down the list:
100, 50, 25, 12, 6, 3, 1 (at most seven pools). Preferred terms only score nodes, never filter them: the
NodeAffinity plugin scores a node with the sum of the weights of the preferred terms it matches, then
scales the scores of the nodes that passed every filter so that the best one gets 100 (kubernetes
pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go, Score and NormalizeScore, which calls
helper.DefaultNormalizeScore). A pool whose nodes have no room (NodeResourcesFit filters them out) takes no
part, so the first listed pool that has a node with room scores 100 and the next one at most half of it:
the scheduler, not Placer, finds the first pool with room, at the moment it binds the pod, with no race.
The halving keeps that gap at half the scale whichever pool is the first with room; other scores (spread,
resource balance; NodeAffinity has weight 2 in the default profile, pkg/scheduler/apis/config/v1/
default_plugins.go getDefaultPlugins) can still outweigh it, as with any preference.

Required rules (a GPU pool's required affinity, its taint's toleration) still filter first: the pools only
order the nodes those rules allow. When no listed pool can ever host the pod, the placement check warns
(`webhook.placement.pool_fit`).
"""

from collections.abc import Mapping
from typing import Any

from webhook.actions.affinity import add_preferred_requirement
from webhook.actions.base import ActionContext, ActionSpec, Param
from webhook.support.names import label_value_error, qualified_name_error
from webhook.support.typing import JSONObject

PREFER_NODE_POOLS = "prefer-node-pools"
WEIGHTS = (100, 50, 25, 12, 6, 3, 1)
"""Weight of the n-th pool: strictly decreasing, each about half the one before (node affinity weights are
1-100)."""


def prefer_node_pools(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    changed = False
    for pool, weight in zip(params["pools"], WEIGHTS, strict=False):
        requirement = {"key": params["key"], "operator": "In", "values": [pool]}
        changed = add_preferred_requirement(template, requirement, weight) or changed
    return changed


def _check(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    pools = params["pools"]
    if not pools:
        return [("pools", "at least one pool is required")]
    if len(pools) > len(WEIGHTS):
        return [("pools", f"at most {len(WEIGHTS)} pools (weights {', '.join(map(str, WEIGHTS))})")]
    if len(set(pools)) != len(pools):
        return [("pools", "each pool at most once")]
    return []


SPECS = (
    ActionSpec(
        name=PREFER_NODE_POOLS,
        apply=prefer_node_pools,
        params=(
            Param("key", "string", required=True, check=qualified_name_error),
            Param("pools", "values", required=True, check=label_value_error),
        ),
        cross_check=_check,
    ),
)
