"""Every action by name."""

from webhook.actions import (
    affinity,
    gang,
    metadata,
    node_pools,
    restrictions,
    scheduling,
    spot_share,
    tolerations,
    topology,
    volumes,
)
from webhook.actions.base import ActionSpec


def action_specs() -> dict[str, ActionSpec]:
    """Name -> spec for every action a rule may name."""
    specs = (*metadata.SPECS, *scheduling.SPECS, *affinity.SPECS, *tolerations.SPECS, *topology.SPECS, *gang.SPECS,
             *volumes.SPECS, *restrictions.SPECS, *spot_share.SPECS, *node_pools.SPECS)
    return {spec.name: spec for spec in specs}
