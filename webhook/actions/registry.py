"""Every action by name."""

from webhook.actions import affinity, gang, metadata, restrictions, scheduling, tolerations, topology, volumes
from webhook.actions.base import ActionSpec


def action_specs() -> dict[str, ActionSpec]:
    """Name -> spec for every action a rule may name."""
    specs = (*metadata.SPECS, *scheduling.SPECS, *affinity.SPECS, *tolerations.SPECS, *topology.SPECS, *gang.SPECS,
             *volumes.SPECS, *restrictions.SPECS)
    return {spec.name: spec for spec in specs}
