"""Workers check policies against the API server's own Kubernetes minor, and follow it when it changes.

The controller process discovers the API server's version at start and every minute after
(`kube.discovery.DiscoveryRefresh`, which writes `apis.json` to the state directory). Each worker builds its
policy compiler with the minor found there (`worker_app.field_target`), so the admissions, the validating
webhook and the status the controller writes (its compiler uses the same minor) refuse the same field
paths. When the minor changes (the control plane was upgraded), fresh workers are asked for; before the
first workers start, the main process waits briefly for the first discovery so that they need no
replacement on a cluster that answers.
"""

import time
from pathlib import Path

from webhook.cluster.client.discovery import read_served_apis

FIRST_DISCOVERY_WAIT = 5.0
"""Seconds the first workers wait for the controller's first discovery; past it they use the newest
supported minor and are replaced once discovery answers."""


class ClusterVersionWatch:
    """The minor the workers were built with, against what the controller last discovered."""

    def __init__(self, state_directory: Path) -> None:
        self._directory = state_directory
        self.built_with = read_served_apis(state_directory).field_target

    def wait_for_first_discovery(self, timeout: float = FIRST_DISCOVERY_WAIT, poll: float = 0.1) -> bool:
        """Wait until discovery has been written (or `timeout`); whether it was."""
        deadline = time.monotonic() + timeout
        while True:
            served = read_served_apis(self._directory)
            if served.known:
                self.built_with = served.field_target
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll)

    def changed(self) -> str | None:
        """The new minor when discovery found another than the workers were built with, once; else None."""
        served = read_served_apis(self._directory)
        if not served.known or served.field_target == self.built_with:
            return None
        self.built_with = served.field_target
        return self.built_with
