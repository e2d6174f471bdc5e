"""`placer serve`: the Flask app under gunicorn, over TLS, with threads for keep-alive connections.

The `gthread` worker (here with a deadline on slow clients, `worker.PlacerThreadWorker`) keeps
connections open between requests (the API server reuses them) and serves several at once per process.
Each worker builds its own app after the fork: it loads the policies, starts its reloader and owns its
CEL environment; nothing is shared but the metrics directory.
"""

import logging
import os
import sys
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.glogging import Logger as GunicornLogger

from webhook.claims import ClaimLookup
from webhook.config import Settings
from webhook.feasibility import PlacementCheck
from webhook.kube.api import KubeApi
from webhook.kube.connection import ConnectionSetupError, connect
from webhook.kube.namespace_lookup import NamespaceLookup
from webhook.logs import JsonFormatter
from webhook.metrics import Metrics, mark_worker_dead
from webhook.policy.cel_libraries.leaks import LeakAccount
from webhook.policy.cluster_state import ClusterStateSource, nodes_directory
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.files import FilePolicySource
from webhook.policy.node_facts import NodeFactsReader
from webhook.policy.snapshot import PolicySnapshot, SnapshotHolder
from webhook.policy.sources import PolicyReloader, PolicySource
from webhook.policy.volume_shards import VolumeShards
from webhook.server.app import create_app
from webhook.server.controller_process import ControllerProcess
from webhook.server.tls import ReloadingContext
from webhook.server.worker import LEAKS_EXTENSION

log = logging.getLogger(__name__)

WORKER_CLASS = "webhook.server.worker.PlacerThreadWorker"
"""The gunicorn worker Placer runs on (`worker.PlacerThreadWorker`), as gunicorn's `worker_class` names it."""


def build_worker_app(settings: Settings) -> Any:
    """Everything one worker process needs: policies, their reloader, metrics, and the Flask app.

    With `--kube`, the cluster's policies (from the state directory the controller writes) come first: a file
    policy with the same name as a cluster one is reported and ignored.
    """
    compiler = PolicyCompiler(LeakAccount(int(settings.cel_leak_budget_mib * 2**20)))
    required = settings.policies if settings.policies_explicit else ()
    sources: list[PolicySource] = []
    if settings.cluster_state is not None:
        sources.append(ClusterStateSource(settings.cluster_state, compiler=compiler))
    sources.append(FilePolicySource(settings.policies, compiler=compiler, required=required))
    metrics = Metrics()

    def publish(snapshot: PolicySnapshot) -> None:
        holder.swap(snapshot)
        metrics.observe_policies(len(snapshot.policies), len(snapshot.errors))

    reloader = PolicyReloader(sources, compiler.environment, publish, interval=settings.reload_interval)
    holder = SnapshotHolder(reloader.load())
    publish(holder.current)
    reloader.start()
    log.info("worker %d ready with %d policies", os.getpid(), len(holder.current.policies))
    namespaces = _namespace_lookup(settings, metrics)
    placement, claims = None, None
    if settings.cluster_state is not None:
        nodes = NodeFactsReader(nodes_directory(settings.cluster_state))
        placement = PlacementCheck(nodes)
        claims = ClaimLookup(VolumeShards(settings.cluster_state), nodes)
    app = create_app(
        holder=holder,
        settings=settings,
        metrics=metrics,
        compiler=compiler,
        namespaces=namespaces,
        placement=placement,
        claims=claims,
    )
    app.extensions[LEAKS_EXTENSION] = compiler.leaks
    return app


def _namespace_lookup(settings: Settings, metrics: Metrics) -> NamespaceLookup | None:
    """With `--kube`, each worker reads namespaces its state does not know yet (kube.namespace_lookup)."""
    if settings.cluster_state is None:
        return None
    try:
        api = KubeApi(connect(settings.kubeconfig))
    except ConnectionSetupError as error:
        log.error("namespaces missing from the watched state cannot be read: %s", error)
        return NamespaceLookup(None, observe=metrics.observe_namespace_lookup, unavailable="no cluster connection")
    return NamespaceLookup(api, observe=metrics.observe_namespace_lookup)


class PlacerArbiter(Arbiter):  # type: ignore[misc]
    """gunicorn's arbiter, which also keeps the cluster controller process running (with `--kube`)."""

    def __init__(self, app: "PlacerServer") -> None:
        super().__init__(app)
        settings = app.settings
        self.controller = ControllerProcess(settings) if settings.cluster_state is not None else None

    def manage_workers(self) -> None:
        super().manage_workers()
        if self.controller is not None:
            self.controller.supervise()

    def stop(self, graceful: bool = True) -> None:
        if self.controller is not None:
            self.controller.stop()
        super().stop(graceful)


class PlacerServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        super().__init__()

    def load_config(self) -> None:
        settings = self.settings
        tls = ReloadingContext(settings.tls_cert, settings.tls_key, settings.client_ca)
        options: dict[str, Any] = {
            "bind": [settings.bind],
            "workers": settings.workers,
            "worker_class": WORKER_CLASS,
            "threads": settings.threads,
            "certfile": str(settings.tls_cert),
            "keyfile": str(settings.tls_key),
            "ssl_context": tls,
            "do_handshake_on_connect": False,
            # The API server keeps connections open; close idle ones well after its own idle timeout.
            "keepalive": 90,
            "timeout": 30,
            "graceful_timeout": 10,
            # Slow or oversized request heads cannot hold a worker.
            "limit_request_line": 8190,
            "limit_request_fields": 100,
            "limit_request_field_size": 8190,
            "loglevel": settings.log_level,
            "accesslog": None,
            "errorlog": "-",
            "logger_class": "webhook.server.gunicorn_app.JsonGunicornLogger",
            "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,
            "child_exit": lambda server, worker: mark_worker_dead(worker.pid),
            "proc_name": "placer",
            # gunicorn's control socket writes under $HOME; the container's root filesystem is read-only.
            "control_socket_disable": True,
        }
        if settings.client_ca is not None:
            options["ca_certs"] = str(settings.client_ca)
        for key, value in options.items():
            if value is not None:
                self.cfg.set(key, value)

    def load(self) -> Any:
        return build_worker_app(self.settings)

    def run(self) -> None:
        """BaseApplication.run with Placer's arbiter."""
        try:
            PlacerArbiter(self).run()
        except RuntimeError as error:
            print(f"\nError: {error}\n", file=sys.stderr)
            sys.exit(1)


class JsonGunicornLogger(GunicornLogger):  # type: ignore[misc]
    """gunicorn's own messages as JSON lines, like Placer's."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(JsonFormatter())
