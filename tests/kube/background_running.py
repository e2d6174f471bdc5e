"""The cluster controller with background reports, running in a thread against the fake API server."""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.kube.fake_apiserver import FakeApiServer
from webhook.cluster.client.api import KubeApi
from webhook.cluster.controller import ClusterController
from webhook.cluster.reports.background import PERIOD, BackgroundReports, ServedPolicies
from webhook.policy.compiler import PolicyCompiler


@contextmanager
def running(api: KubeApi, state: Path, apiserver: FakeApiServer, *, period: float = PERIOD,
            cluster_interval: float = 0.5) -> Iterator[BackgroundReports]:
    """The controller writing `state` and background reports (this process always leads), until the block ends;
    the cluster report is written at most every `cluster_interval` seconds (10 in the controller process).
    At the end every thread it started has ended (as when the controller's process exits): none is left to
    write or log during another test."""
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
        deadline = time.monotonic() + 10
        while any(t.is_alive() for t in [thread, *controller.watch_threads, *background.threads]):
            assert time.monotonic() < deadline, "the controller did not stop"
            apiserver.drop_watches()  # a watch opened meanwhile notices `stop` when its stream ends
            time.sleep(0.05)
