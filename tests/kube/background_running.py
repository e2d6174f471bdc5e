"""The cluster controller with background reports, running in a thread against the fake API server."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from webhook.cluster.client.api import KubeApi
from webhook.cluster.controller import ClusterController
from webhook.cluster.reports.background import PERIOD, BackgroundReports, ServedPolicies
from webhook.policy.compiler import PolicyCompiler


@contextmanager
def running(api: KubeApi, state: Path, *, period: float = PERIOD,
            cluster_interval: float = 0.5) -> Iterator[BackgroundReports]:
    """The controller writing `state` and background reports (this process always leads), until the block ends;
    the cluster report is written at most every `cluster_interval` seconds (10 in the controller process)."""
    compiler = PolicyCompiler()
    background = BackgroundReports(api, state, ServedPolicies(state, compiler), leading=lambda: True,
                                   period=period, cluster_interval=cluster_interval)
    controller = ClusterController(api, state, compiler=compiler, elector=None, background=background)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield background
    finally:
        stop.set()
        thread.join(5)
