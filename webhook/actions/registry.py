"""Every action by name. Gang scheduling adds its own specs here without touching the engine."""

from webhook.actions import affinity, metadata, scheduling, tolerations, topology
from webhook.actions.base import ActionSpec


def action_specs() -> dict[str, ActionSpec]:
    """Name -> spec for every action a rule may name."""
    specs = (*metadata.SPECS, *scheduling.SPECS, *affinity.SPECS, *tolerations.SPECS, *topology.SPECS)
    return {spec.name: spec for spec in specs}
