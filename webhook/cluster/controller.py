"""The cluster controller: one process per replica that watches, compiles, publishes and reports.

It list+watches SchedulingPolicies, Namespaces, PriorityClasses, Nodes, PersistentVolumeClaims,
PersistentVolumes, the DRA ResourceClaimTemplates, ResourceClaims and DeviceClasses (at the version
discovery finds served, `webhook.cluster.client.discovery`; not at all where none is) and the workloads marked for a
PodGroup (`webhook.cluster.podgroups.pod_groups`), compiles every policy when it changes (keeping the last good version
of a policy whose update does not compile), writes what serves to the state directory that every
worker of this replica reads (`webhook.policy.state.cluster_state`), and, only while it holds the Lease, writes
each policy's `status` and the PodGroups marked workloads want. A namespace event is projected to what
`namespaceObject` shows, a node event to what the scheduler's filters read (`node_facts`), a claim or volume
event to what `pin-to-volume-node` reads, a DRA object to what `resources` counts (`webhook.pods.dra`), and
written to its shard at once, from the watch thread; one whose projection
did not change (a node's status heartbeat) writes nothing. Admissions never wait for any of this: they
read the last published state, which keeps serving while the API server is away.

Pods Placer gave a capacity class are watched too (label-selected, `webhook.cluster.spot.spot_ledger`): each
workload's live pods by class, published for the spot share's admissions.

Run by the main process of `placer serve --kube` as `python -m webhook.cluster.process --state DIRECTORY`;
what each watch keeps of its objects is `webhook.cluster.projections`.
"""

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from webhook.cluster.client.api import KubeApi
from webhook.cluster.client.discovery import DRA_KINDS, DiscoveryRefresh, ServedApis
from webhook.cluster.client.leader import LeaseElector
from webhook.cluster.client.node_events import UnchangedNodeEvents
from webhook.cluster.client.reflector import Reflector, Resource, Store
from webhook.cluster.enforce_labels import EnforceLabels, enforced_selectors
from webhook.cluster.health.health_round import HealthRound, PodGroupApiCheck
from webhook.cluster.health.policy_health import combine
from webhook.cluster.health.status import PolicyOutcome
from webhook.cluster.health.status_writer import CompiledPolicy, StatusWriter
from webhook.cluster.podgroups.native_gang import job_gangs_of, native_gang_not_served, native_version_of
from webhook.cluster.podgroups.native_operators import OperatorPodGroups
from webhook.cluster.podgroups.pod_groups import PodGroupKeeper
from webhook.cluster.projections import (
    ProjectedSink,
    SharedClaimsSink,
    claim_projection,
    device_projection,
    global_default_priority_class,
    namespace_entry,
    node_entry,
    volume_projection,
)
from webhook.cluster.registration import WebhookRegistration
from webhook.cluster.reports.background import BackgroundReports
from webhook.cluster.spot.spot_ledger import PODS, PodShareSink
from webhook.engine.configuration import gang_not_enforced, pod_groups_not_served
from webhook.pods.dra import CLAIM_KIND
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.errors import PolicyError
from webhook.policy.sources.documents import served_document
from webhook.policy.state.cluster_state import (
    CLUSTER_SOURCE,
    ClusterState,
    claims_directory,
    namespaces_directory,
    nodes_directory,
    volumes_directory,
    write_state,
)
from webhook.policy.state.device_shards import (
    claim_templates_directory,
    device_classes_directory,
    resource_claims_directory,
)
from webhook.policy.state.shards import ShardWriter
from webhook.policy.state.share_shards import shares_directory
from webhook.support.metrics import ControllerMetrics
from webhook.support.selectors import LabelSelector
from webhook.workloads import default_workload_table

log = logging.getLogger(__name__)

POLICIES = Resource("/apis/placer.dev/v1alpha1/schedulingpolicies", "SchedulingPolicy")
NAMESPACES = Resource("/api/v1/namespaces", "Namespace")
PRIORITY_CLASSES = Resource("/apis/scheduling.k8s.io/v1/priorityclasses", "PriorityClass")
NODES = Resource("/api/v1/nodes", "Node")
CLAIMS = Resource("/api/v1/persistentvolumeclaims", "PersistentVolumeClaim", namespaced=True)
VOLUMES = Resource("/api/v1/persistentvolumes", "PersistentVolume")
NODE_WATCH_PACE = 0.1
"""Node events are read in bursts (at most every 0.1 s when the stream is busy): kubelets' status updates
are the busiest watch, and what Placer reads of a node (labels, taints, allocatable, cordon) may well
arrive a tenth of a second later. Those updates that change none of it are not even decoded
(`node_events`)."""
POD_WATCH_PACE = 0.1
"""Labelled pods' events are read in bursts too: their status updates (conditions, container states) are
many, and a new pod counted a tenth of a second later is within the watch lag the spot share allows for."""
LEASE_NAME = "placer-status-writer"
ROUND_INTERVAL = 1.0
"""Seconds between two rounds when nothing calls for one sooner (a policy, PriorityClass or marked workload
changing does): each round writes what changed of the policies' status and keeps the PodGroups."""
_OPTIONAL_SYNC_WAIT = 5.0


class ClusterController:
    def __init__(
        self,
        api: KubeApi,
        state_directory: Path,
        *,
        compiler: PolicyCompiler,
        elector: LeaseElector | None,
        election_interval: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
        metrics: ControllerMetrics | None = None,
        served: ServedApis | None = None,
        discovery: DiscoveryRefresh | None = None,
        health: HealthRound | None = None,
        background: BackgroundReports | None = None,
        registration: WebhookRegistration | None = None,
    ) -> None:
        """`health`: where this replica publishes its rule counts and the leader reads every replica's (None:
        the status says nothing of counts, `Healthy` is Unknown unless the configuration says otherwise).
        `background`: judges existing workloads into PolicyReports, in a thread of its own (None: no reports).
        `registration`: keeps the webhook configuration to what the serving policies act on (None: as installed)."""
        self.background = background
        self.registration = registration
        self._api = api
        self.served = served or ServedApis()
        self._discovery = discovery
        self.restart = False
        """Set when discovery found the API server serving other versions than the watches use."""
        self._state_directory = state_directory
        self._compiler = compiler
        self._elector = elector
        self._election_interval = election_interval
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._wake = threading.Event()
        """Something changed: the loop runs at once."""
        self._round_due = threading.Event()
        """What changed calls for a whole round (`step`), not only the namespace labels (`follow_labels`)."""
        self._next_round = 0.0
        self._enforced: list[LabelSelector | None] | None = None
        """The Enforced policies' namespace selectors as of the last round."""
        self._policies: Store | None = None
        self.namespaces = ProjectedSink(
            "namespaces", ShardWriter(namespaces_directory(state_directory)), namespace_entry, self._request_round,
            on_change=background.namespace_changed if background is not None else None,
        )
        self.nodes = ProjectedSink("nodes", ShardWriter(nodes_directory(state_directory)), node_entry)
        self.claims = ProjectedSink("claims", ShardWriter(claims_directory(state_directory)), claim_projection)
        self.volumes = ProjectedSink("volumes", ShardWriter(volumes_directory(state_directory)), volume_projection)
        self.pod_shares = PodShareSink(ShardWriter(shares_directory(state_directory)))
        self.node_events = UnchangedNodeEvents()
        self._priority_classes: Store | None = None
        self._compiled: dict[str, CompiledPolicy] = {}
        self._last_good: dict[str, tuple[str, CompiledPolicy]] = {}
        self._published: tuple[Any, ...] | None = None
        self._inputs: tuple[Store, Store | None] | None = None
        self._generation = 0
        self._next_election = 0.0
        self._started = monotonic()
        self._status = StatusWriter(api, POLICIES.path, monotonic=monotonic)
        self._health = health
        self.pod_group_api = PodGroupApiCheck(api, monotonic=monotonic)
        self._pod_groups_served: bool | None = None
        self._native_gang_version = native_version_of(self.served)
        """The kube-scheduler PodGroup version served ("" none, None not known), followed from discovery."""
        self._job_gangs = job_gangs_of(self.served)
        """The Job controller keeps Jobs' gangs from their own field (1.37+ with WorkloadWithJob)."""
        self.watch_threads: list[threading.Thread] = []
        """One per watched resource, once `run` has started them (they end when `stop` is set)."""
        self.pod_groups = PodGroupKeeper(api, default_workload_table(), wake=self._request_round,
                                         observe=(metrics or ControllerMetrics()).observe_pod_group,
                                         monotonic=monotonic, native_version=lambda: self._native_gang_version)
        self.operator_pod_groups = OperatorPodGroups(
            api, default_workload_table(), native_version=lambda: self._native_gang_version, wake=self._request_round,
            observe=(metrics or ControllerMetrics()).observe_pod_group, monotonic=monotonic)
        self.enforce_labels = EnforceLabels(api, wake=self._wake.set)
        self.reflectors = (
            Reflector(api, POLICIES, self._set_policies),
            Reflector(api, NAMESPACES, self.enforce_labels.sink(self.namespaces)),
            Reflector(api, PRIORITY_CLASSES, self._set_priority_classes),
            Reflector(api, NODES, self.nodes, pace=NODE_WATCH_PACE, unchanged=self.node_events),
            Reflector(api, CLAIMS, self.claims),
            Reflector(api, VOLUMES, self.volumes),
            Reflector(api, PODS, self.pod_shares, pace=POD_WATCH_PACE),
            *self.pod_groups.reflectors,
            *self.operator_pod_groups.reflectors,
            *self._device_claim_reflectors(api, state_directory),
        )

    def _device_claim_reflectors(self, api: KubeApi, state_directory: Path) -> list[Reflector]:
        """ResourceClaimTemplates, ResourceClaims and DeviceClasses, at the version the API server serves them
        (none where resource.k8s.io is not served): what `resources` counts of a pod's DRA claims
        (`webhook.pods.dra`)."""
        reflectors = []
        directories = (claim_templates_directory(state_directory), resource_claims_directory(state_directory),
                       device_classes_directory(state_directory))
        for (group, kind), directory in zip(DRA_KINDS, directories, strict=True):
            path, served = self.served.path_of(group, kind), self.served.resource_of(group, kind)
            if path is None or served is None:
                continue
            sink_type = SharedClaimsSink if kind == CLAIM_KIND else ProjectedSink
            sink = sink_type(f"{kind}s", ShardWriter(directory), device_projection(kind))
            reflectors.append(Reflector(api, Resource(path, kind, namespaced=served.namespaced), sink))
        return reflectors

    # -- inputs (reflector threads) -------------------------------------------------------------------------

    def _set_policies(self, store: Store) -> None:
        with self._lock:
            self._policies = store
        self._request_round()

    def _set_priority_classes(self, store: Store) -> None:
        with self._lock:
            self._priority_classes = store
        self._request_round()

    def _request_round(self) -> None:
        self._round_due.set()
        self._wake.set()

    # -- the loop ---------------------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        self.watch_threads = [
            threading.Thread(target=r.run, args=(stop,), name=f"placer-watch-{r.kind.lower()}", daemon=True)
            for r in self.reflectors
        ]
        if self.background is not None:
            self.watch_threads.append(threading.Thread(target=self.background.run, args=(stop,),
                                                       name="placer-background-reports", daemon=True))
        for thread in self.watch_threads:
            thread.start()
        self.loop(stop)
        if self._elector is not None:
            self._elector.release()

    def loop(self, stop: threading.Event) -> None:
        """Until `stop`: a round (`step`) when something calls for one or a second has passed, else, on a
        namespace event, only that namespace's fail-closed label (`follow_labels`)."""
        while not stop.is_set():
            self._wake.wait(ROUND_INTERVAL)
            self._wake.clear()
            try:
                now = self._monotonic()
                if self._round_due.is_set() or now >= self._next_round:
                    self._round_due.clear()
                    self._next_round = now + ROUND_INTERVAL
                    self.step()
                else:
                    self.follow_labels()
            except Exception:  # keep publishing and reporting whatever happens to one round
                if stop.is_set():
                    return  # stopping: the API went away under the round; nothing is logged after the stop
                log.exception("cluster controller round failed")
            if self._discovery is not None and self._discovery.check(self._monotonic()):
                log.warning("the API server serves other versions than watched (%s); restarting to follow",
                            self._discovery.served.summary())
                self.restart = True
                stop.set()

    def step(self) -> None:
        """Publish the state if the inputs changed, take part in the election, and report status if leading."""
        with self._lock:
            policies, priority_classes = self._policies, self._priority_classes
        if policies is None or not self.namespaces.synced:
            return  # not synced: publish nothing, so workers keep the previous state (or stay not ready)
        if priority_classes is None and self._monotonic() - self._started < _OPTIONAL_SYNC_WAIT:
            return  # give the optional PriorityClass list a moment, so the first state already has the default
        # PriorityClasses are optional: when they cannot be listed (RBAC of an older release), no default.
        # Reflectors hand over a new dict on every change, so identity says whether anything changed.
        inputs = (policies, priority_classes)
        if self._inputs is None or any(a is not b for a, b in zip(self._inputs, inputs, strict=True)):
            self._publish(policies, priority_classes)
            self._inputs = inputs
        served = self.pod_group_api.check(any(good.pod_group_findings for _, good in self._last_good.values()))
        discovered = self._discovery.served if self._discovery is not None else self.served
        native, jobs = native_version_of(discovered), job_gangs_of(discovered)
        if (served, native, jobs) != (self._pod_groups_served, self._native_gang_version, self._job_gangs):
            self._pod_groups_served, self._native_gang_version, self._job_gangs = served, native, jobs
            self._publish(policies, priority_classes)  # workers warn and write by them: tell them
        if self._health is not None:
            self._health.publish()
        if self._elector is not None:
            now = self._monotonic()
            if now >= self._next_election:
                self._next_election = now + self._election_interval
                if not self._elector.try_acquire_or_renew():
                    self._status.forget()
                    self.enforce_labels.forget()
                    if self._health is not None:
                        self._health.not_leading()
                    return
            if not self._elector.is_leader:
                return
            self._report(policies)
        self.pod_groups.reconcile()  # the leader; without an election (--no-status) every replica, idempotently
        self.operator_pod_groups.reconcile()
        documents = [good.document for _, good in self._last_good.values() if good.document]
        if self._elector is not None:  # the fail-closed labels: only ever the leader's
            self._enforced = enforced_selectors(documents)
            self.enforce_labels.reconcile(self._enforced)
        if self.registration is not None:
            self.registration.reconcile(documents)

    def follow_labels(self) -> None:
        """Between rounds, on a namespace event: the leader puts the fail-closed label right on the namespaces
        that changed (`EnforceLabels`), and nothing else runs: a relabel among 10,000 namespaces costs one
        namespace's work, not a round's (status of every policy, every marked workload's PodGroup)."""
        if self._enforced is not None and self._elector is not None and self._elector.is_leader:
            self.enforce_labels.reconcile(self._enforced)

    def _publish(self, policies: Store, priority_classes: Store | None) -> None:
        """Write `policies.json` when what it holds changed (the namespaces are published by their sink)."""
        serving: list[Mapping[str, Any]] = []
        errors: list[PolicyError] = []
        for name in sorted(policies):
            compiled = self._compile(name, policies[name])
            errors.extend(compiled.outcome.errors)
            good = self._last_good.get(name)
            if good is not None and good[1].document is not None:
                serving.append(good[1].document)
        for gone in set(self._compiled) - set(policies):
            del self._compiled[gone]
            self._last_good.pop(gone, None)
        default_class = global_default_priority_class(priority_classes or {})
        content = (serving, errors, default_class, self._pod_groups_served, self._native_gang_version,
                   self._job_gangs)
        if content == self._published:
            return  # e.g. only a status or an unrelated annotation changed: workers need not recompile
        self._generation += 1
        state = ClusterState(self._generation, True, serving, errors, default_priority_class=default_class,
                             pod_groups_served=self._pod_groups_served,
                             native_gang_version=self._native_gang_version, job_gangs=self._job_gangs)
        write_state(self._state_directory, state)
        self._published = content
        log.info(
            "published cluster state %d: %d policies serving, %d errors, %d namespaces",
            self._generation,
            len(serving),
            len(errors),
            self.namespaces.count(),
        )

    def _compile(self, name: str, obj: Mapping[str, Any]) -> CompiledPolicy:
        metadata = obj.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        generation = metadata.get("generation") if isinstance(metadata.get("generation"), int) else None
        key = (uid, generation if generation is not None else metadata.get("resourceVersion"))
        cached = self._compiled.get(name)
        if cached is not None and cached.key == key:
            return cached
        document = served_document(obj)
        result = self._compiler.compile(document, CLUSTER_SOURCE)
        good = self._last_good.get(name)
        if good is not None and good[0] != uid:  # deleted and re-created: the old object's version is gone
            del self._last_good[name]
            good = None
        if result.policy is not None:
            policy = result.policy
            outcome = PolicyOutcome(generation, len(policy.rules), (), generation,
                                    tuple(rule.name for rule in policy.rules), tuple(gang_not_enforced(policy)))
            compiled = CompiledPolicy(key, outcome, document, tuple(pod_groups_not_served(policy)),
                                      tuple(native_gang_not_served(policy)))
            self._last_good[name] = (uid, compiled)
        else:
            last = good[1] if good is not None else None
            serving = last.outcome.generation if last is not None else None
            outcome = PolicyOutcome(generation, 0, result.errors, serving,
                                    last.outcome.rule_names if last else (), last.outcome.findings if last else ())
            compiled = CompiledPolicy(key, outcome, None, last.pod_group_findings if last else (),
                                      last.native_gang_findings if last else ())
            log.error(
                "SchedulingPolicy %s generation %s does not compile (%s): %s",
                name,
                generation,
                "last good version keeps serving" if good else "not serving",
                "; ".join(map(str, result.errors)),
            )
        self._compiled[name] = compiled
        return compiled

    def _report(self, policies: Store) -> None:
        """Write each policy's status (the leader): compiled, healthy, and its counts over every replica; nothing
        at all while none of that changed (`StatusWriter.unchanged`): an idle round costs no work per policy."""
        readings = self._health.readings() if self._health is not None else None
        inputs = (policies, readings, self._pod_groups_served, self._native_gang_version)  # compiled: by `policies`
        if self._status.unchanged(inputs):
            return
        health = None
        if readings is not None and self._health is not None:
            rules_of = {name: compiled.outcome.rule_names for name, compiled in self._compiled.items()}
            health = combine(readings, rules_of, self._health.window_seconds)
        self._status.write(policies, self._compiled, health=health, pod_groups_served=self._pod_groups_served,
                           native_gang_version=self._native_gang_version, inputs=inputs,
                           health_known=health is not None or self._health is None)
