"""Everything one granian worker process needs: policies, their reloader, metrics, and the application.

Each worker builds its own after it is started: it loads the policies, starts its reloader and owns its CEL
environment; nothing is shared but the metrics directory and, with `--kube`, the state directory the
controller process writes.
"""

import logging
import os
import signal
import threading
from pathlib import Path

from webhook.admission.seal_keys import SealKeys
from webhook.cluster.client.api import KubeApi
from webhook.cluster.client.connection import ConnectionSetupError, connect
from webhook.cluster.client.discovery import read_served_apis
from webhook.cluster.client.namespace_lookup import NamespaceLookup
from webhook.cluster.client.owner_lookup import OwnerLookup
from webhook.placement.claims import ClaimLookup
from webhook.placement.feasibility import PlacementCheck
from webhook.policy.cel.libraries.leaks import LeakAccount
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.fields.field_check import FieldChecks
from webhook.policy.fields.versions import DEFAULT
from webhook.policy.snapshot import PolicySnapshot, SnapshotHolder
from webhook.policy.sources.files import FilePolicySource
from webhook.policy.sources.reloader import PolicyReloader, PolicySource
from webhook.policy.state.cluster_state import ClusterStateSource, exemption_key_path, nodes_directory
from webhook.policy.state.node_facts import NodeFactsReader
from webhook.policy.state.share_shards import ShareShards
from webhook.policy.state.volume_shards import VolumeShards
from webhook.server.app import PlacerApp, create_app
from webhook.support.config import Settings
from webhook.support.logs import configure_logging
from webhook.support.metrics import Metrics

log = logging.getLogger(__name__)


def build_worker_app(settings: Settings) -> PlacerApp:
    """The worker's application. With `--kube`, the cluster's policies (from the state directory the
    controller writes) come first: a file policy with the same name as a cluster one is reported and ignored.
    """
    configure_logging(settings.log_level)
    compiler = PolicyCompiler(LeakAccount(int(settings.cel_leak_budget_mib * 2**20)),
                              fields=FieldChecks(field_target(settings.cluster_state)))
    required = settings.policies if settings.policies_explicit else ()
    sources: list[PolicySource] = []
    if settings.cluster_state is not None:
        sources.append(ClusterStateSource(settings.cluster_state, compiler=compiler))
    sources.append(FilePolicySource(settings.policies, compiler=compiler, required=required))
    metrics = Metrics()

    def publish(snapshot: PolicySnapshot) -> None:
        holder.swap(snapshot)
        metrics.observe_policies(len(snapshot.every_policy), len(snapshot.errors))

    reloader = PolicyReloader(sources, compiler.environment, publish, interval=settings.reload_interval)
    holder = SnapshotHolder(reloader.load())
    publish(holder.current)
    reloader.start()
    log.info("worker %d ready with %d policies", os.getpid(), len(holder.current.every_policy))
    placement, claims, shares = None, None, None
    if settings.cluster_state is not None:
        nodes = NodeFactsReader(nodes_directory(settings.cluster_state))
        placement = PlacementCheck(nodes)
        claims = ClaimLookup(VolumeShards(settings.cluster_state), nodes)
        shares = ShareShards(settings.cluster_state)  # in the worker: its pending file is named after it
    return create_app(
        holder=holder,
        settings=settings,
        metrics=metrics,
        compiler=compiler,
        namespaces=_namespace_lookup(settings, metrics),
        placement=placement,
        claims=claims,
        ledger=shares,
        seals=_seals(settings),
        after_review=LeakRecycling(compiler.leaks),
    )


def _seals(settings: Settings) -> SealKeys | None:
    """The keys of exemption seals: `--exemption-key`, else, with `--kube`, the Secret Placer keeps, as the
    controller process writes it to the state directory (`webhook.cluster.exemption_key`); with `--kube`, also
    the API reads of a Pod's controller owner. None (no cluster, no key): exemptions stay with the request."""
    if settings.exemption_key is not None:
        path = settings.exemption_key
    elif settings.cluster_state is not None:
        path = exemption_key_path(settings.cluster_state)
    else:
        return None
    if settings.cluster_state is None:
        return SealKeys(path)
    try:
        return SealKeys(path, OwnerLookup(KubeApi(connect(settings.kubeconfig, context=settings.context))))
    except ConnectionSetupError as error:
        log.error("pods of sealed workloads cannot be checked against their owner: %s", error)
        return SealKeys(path)


def _namespace_lookup(settings: Settings, metrics: Metrics) -> NamespaceLookup | None:
    """With `--kube`, each worker reads namespaces its state does not know yet (kube.namespace_lookup)."""
    if settings.cluster_state is None:
        return None
    try:
        api = KubeApi(connect(settings.kubeconfig, context=settings.context))
    except ConnectionSetupError as error:
        log.error("namespaces missing from the watched state cannot be read: %s", error)
        return NamespaceLookup(None, observe=metrics.observe_namespace_lookup, unavailable="no cluster connection")
    return NamespaceLookup(api, observe=metrics.observe_namespace_lookup)


class LeakRecycling:
    """Once Kubernetes' CEL library calls have leaked this worker's budget (`cel_libraries.leaks`), ask the
    main process for fresh workers, once: SIGHUP, on which granian starts a new worker beside each old one and
    then stops the old one gracefully (it answers what it holds; the API server's next requests go to the
    new one). Until then this worker keeps answering."""

    def __init__(self, leaks: LeakAccount, *, parent: int | None = None) -> None:
        self.leaks = leaks
        self.parent = parent if parent is not None else os.getppid()
        self.asked = False
        self.lock = threading.Lock()

    def __call__(self) -> None:
        if self.asked or not self.leaks.exhausted():
            return
        with self.lock:
            if self.asked:
                return
            self.asked = True
        leaks = self.leaks
        log.warning(
            "worker %d is replaced: Kubernetes CEL library calls leaked %.1f MiB in %d calls "
            "(its budget: %.1f MiB; --cel-leak-budget-mib)",
            os.getpid(), leaks.leaked / 2**20, leaks.calls, (leaks.budget or 0) / 2**20,
        )
        os.kill(self.parent, signal.SIGHUP)


def field_target(cluster_state: Path | None) -> str:
    """The minor this worker checks policies' field paths against: with `--kube`, the API server's, as the
    controller last discovered it (`apis.json`; the supervisor replaces the workers when it changes,
    `ClusterVersionWatch`); else, or before the first discovery, the newest supported."""
    return read_served_apis(cluster_state).field_target if cluster_state is not None else DEFAULT
