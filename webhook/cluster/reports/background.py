"""Background evaluation: every existing workload judged against the current policies, into PolicyReports.

The controller watches the workloads of the kinds Placer mutates (operator resources where their CRDs are
served; not Pods nor ReplicaSets, which belong to their controllers) with the same reflectors as everything
else, and keeps of each only what the engine reads: the object as its CREATE (`compliance.as_create`),
compressed, with a digest of it and the results of its last judgement. Work follows change:
- a workload event whose projection did not change (status, resourceVersion, managedFields) costs nothing;
  one that did marks that workload;
- a policy change (the state the workers serve, `ClusterStateSource`) marks the workloads of the namespaces
  the old or new version of the changed policies selects; a namespace whose projection changed (the
  controller's namespace sink tells `namespace_changed` once its shard is written) marks its own;
- every `period` seconds every workload is judged again (a safety net for what no event tells).
Only the leader judges and writes, in a thread of its own (the controller's loop never waits for it); a
workload's report is written only when its content changed, at a bounded rate (`writer.ReportWriter`), and
the cluster report at most every `CLUSTER_REPORT_INTERVAL` seconds.

Without the report CRDs (wgpolicyk8s.io/v1alpha2 not served) nothing is watched: reports are off, said once
in the log and in `/readyz` details (`readiness_detail`), and the CRDs are looked for again every 30 s.
"""

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.cluster.client.reflector import Reflector, Resource
from webhook.cluster.reports.compliance import Verdict, evaluate
from webhook.cluster.reports.reports import API_VERSION, GROUP, RuleTally, counted, report_key, workload_report
from webhook.cluster.reports.results import RuleResult
from webhook.cluster.reports.workload_book import KindSink, Record, WorkloadBook
from webhook.cluster.reports.writer import ReportWriter
from webhook.engine.exemption_seal import Seals
from webhook.engine.value_drift import ValueCheck
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.model import Policy
from webhook.policy.snapshot import PolicySnapshot
from webhook.policy.state.cluster_state import ClusterStateSource
from webhook.policy.state.shards import shard_of
from webhook.support.typing import JSONObject
from webhook.workloads import WorkloadKind, all_kinds, default_workload_table

log = logging.getLogger(__name__)

PERIOD = 600.0
"""Seconds between two full judgements of every workload."""
CLUSTER_REPORT_INTERVAL = 10.0
"""Seconds between two writes of the ClusterPolicyReport while counts keep changing."""
LOOK_AGAIN = 30.0
"""Seconds between two looks for the report CRDs while they are not served (one discovery GET each)."""
STATE_FILE = "reports.json"
BACKGROUND_KINDS_LEFT_OUT = ("Pod", "ReplicaSet")


def reports_served(api: KubeApi) -> bool:
    """Whether the API server serves wgpolicyk8s.io/v1alpha2 PolicyReports (discovery: granted to every
    authenticated client by the system:discovery ClusterRole)."""
    try:
        listed = api.get(f"/apis/{API_VERSION}")
    except ApiError as error:
        if error.code == 404:
            return False
        raise
    names = {resource.get("name") for resource in listed.get("resources") or [] if isinstance(resource, dict)}
    return {"policyreports", "clusterpolicyreports"} <= names


def served_kinds(api: KubeApi) -> list[tuple[WorkloadKind, str]]:
    """(kind, version) of every kind to watch that the API server serves (operator CRDs may not be)."""
    found = []
    for kind in all_kinds():
        if kind.kind in BACKGROUND_KINDS_LEFT_OUT:
            continue
        if not kind.group or kind.group in ("apps", "batch"):
            found.append((kind, kind.versions[0]))
            continue
        for version in kind.versions:
            try:
                listed = api.get(f"/apis/{kind.group}/{version}")
            except ApiError:
                continue
            if any(isinstance(r, dict) and r.get("name") == kind.resource for r in listed.get("resources") or []):
                found.append((kind, version))
                break
    return found


def readiness_detail(state_directory: Path) -> str | None:
    """The line `/readyz` shows about reports: on, or off and why; None before the controller said."""
    try:
        state = json.loads((state_directory / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if state.get("enabled"):
        return "policy reports: on"
    return f"policy reports: off ({state.get('reason') or 'not started'})"


class BackgroundReports:
    """Judges the cluster's workloads and writes the reports while `leading()` says this replica leads."""

    def __init__(
        self,
        api: KubeApi,
        state_directory: Path,
        snapshot: Callable[[], tuple[PolicySnapshot, bool]],
        *,
        leading: Callable[[], bool],
        exhausted: Callable[[], bool] = lambda: False,
        period: float = PERIOD,
        cluster_interval: float = CLUSTER_REPORT_INTERVAL,
        writer: ReportWriter | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], float] = time.time,
        seals: Callable[[], Seals | None] | None = None,
    ) -> None:
        """`snapshot()`: the policies as the workers serve them, and whether they changed since last asked.
        `exhausted()`: whether Kubernetes CEL library calls have leaked this process's budget (the library
        never frees what it hands a Python function, `webhook.policy.cel.libraries.leaks`); then judging stops
        and `restart` is set, so that the process is replaced as a worker is."""
        self._api = api
        self._state_directory = state_directory
        self._snapshot = snapshot
        self._seals = seals
        """The keys of exemption seals, as they are now: a sealed workload is exempt, as its admission found
        (`exempt_results`)."""
        self._leading = leading
        self._exhausted = exhausted
        self.restart = False
        self._period = period
        self._monotonic = monotonic
        self._clock = clock
        self.book = WorkloadBook()
        self.writer = writer or ReportWriter(api, monotonic=monotonic)
        self._cluster_interval = cluster_interval
        self.enabled = False
        self.reflectors: list[Reflector] = []
        self.threads: list[threading.Thread] = []
        self._policies: dict[str, Policy] = {}
        self.tally = RuleTally()
        self._workload_of: dict[tuple[str, str], tuple[str, str]] = {}
        """Per report key: the workload (namespace, book key) it is about."""
        self._next_cluster_report = 0.0
        self._values: ValueCheck | None = None
        """The snapshot's rules comparing the values in their places, made again when the snapshot changes."""
        self._next_full = 0.0
        self.judged = 0
        """Workloads judged so far (for the benchmark and tests)."""

    def run(self, stop: threading.Event) -> None:
        """Until `stop`: find out whether reports can be written, watch, and judge while leading."""
        next_check = 0.0
        while not stop.is_set() and not self.enabled:
            if self._monotonic() >= next_check:
                next_check = self._monotonic() + min(LOOK_AGAIN, self._period)
                self._start_if_served(stop)
            if not self.enabled:
                stop.wait(min(1.0, self._period))
        while not stop.is_set():
            self.book.wake.wait(1.0)
            self.book.wake.clear()
            try:
                if self._leading():
                    self.round()
                elif self.writer.seeded:  # another replica writes now: what this one knows goes stale
                    self.writer.forget_all()
            except Exception:  # a bad round must not end reporting
                if stop.is_set():
                    return  # stopping: the API went away under the round; nothing is logged after the stop
                log.exception("background evaluation round failed")
            if self._exhausted():
                log.warning("background evaluation: Kubernetes CEL library calls leaked this process's budget; "
                            "restarting the controller to free it")
                self.restart = True
                stop.set()

    def _start_if_served(self, stop: threading.Event) -> None:
        try:
            served = reports_served(self._api)
            kinds = served_kinds(self._api) if served else []
        except (ApiError, TransportError) as error:
            log.warning("policy reports: cannot tell whether %s is served (%s); looking again later", GROUP, error)
            return
        if not served:
            if not (self._state_directory / STATE_FILE).exists():
                log.warning("policy reports off: %s is not served (install deploy/components/policy-reports)",
                            API_VERSION)
            self._write_state(False, f"{API_VERSION} is not served; install deploy/components/policy-reports")
            return
        self.enabled = True
        self._write_state(True, "")
        log.info("policy reports on: watching %s", ", ".join(f"{kind.kind}.{version}" for kind, version in kinds))
        for kind, version in kinds:
            prefix = f"/apis/{kind.group}/{version}" if kind.group else f"/api/{version}"
            reflector = Reflector(self._api, Resource(f"{prefix}/{kind.resource}", kind.kind, namespaced=True),
                                  KindSink(kind, version, self.book))
            self.reflectors.append(reflector)
            thread = threading.Thread(target=reflector.run, args=(stop,), name=f"placer-report-{kind.kind.lower()}",
                                      daemon=True)
            thread.start()
            self.threads.append(thread)

    def _write_state(self, enabled: bool, reason: str) -> None:
        path = self._state_directory / STATE_FILE
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps({"enabled": enabled, "reason": reason}))
            temporary.replace(path)
        except OSError as error:
            log.warning("cannot record the reports' state in %s: %s", path, error)

    def round(self) -> int:
        """Judge what changed and offer the reports whose content changed, then write what the budget allows;
        the number of workloads judged."""
        if not self.writer.seeded:
            self.writer.seed()  # leading (again): what is there already is not written again
            self._mark_all()
        snapshot, changed = self._snapshot()
        if changed:
            self._policy_change(snapshot)
        if not snapshot.ready:
            # The controller has not published its first sync (a new state directory): judged now, every
            # workload would have no results, and its report (another leader's, or this one's before a restart)
            # would be deleted, then written again once the policies are there. What is marked waits.
            return 0
        now = self._monotonic()
        if now >= self._next_full:
            self._next_full = now + self._period
            self.book.mark(None)
        dirty = self.book.take_dirty()
        if dirty:
            self._judge(dirty, snapshot)
        if (self.tally.changed and now >= self._next_cluster_report) or not self.writer.knows(None):
            self._next_cluster_report = now + self._cluster_interval
            self.tally.changed = False
            self.writer.mark(None)
        self.writer.flush(self._build)
        return len(dirty)

    def _build(self, key: tuple[str, str] | None) -> JSONObject | None:
        """A report as it should be now: the cluster's, or a workload's (None when no rule matches it)."""
        if key is None:
            return self.tally.report()
        workload = self._workload_of.get(key)
        if workload is None:
            return None
        with self.book.lock:
            record = self.book.by_namespace.get(workload[0], {}).get(workload[1])
        if record is None or not record.results:
            return None
        return workload_report(Verdict(record.workload, record.results), record.found)

    def _judge(self, dirty: set[tuple[str, str]], snapshot: PolicySnapshot) -> None:
        workloads = default_workload_table()
        if self._values is None or self._values.source is not snapshot:
            self._values = ValueCheck(snapshot)
        values = self._values
        seals = self._seals() if self._seals is not None else None
        shared: dict[RuleResult, RuleResult] = {}
        """One copy of each distinct result this round (workloads of one template share their messages)."""
        for namespace, key in dirty:
            previous = self.book.take_previous(namespace, key)
            with self.book.lock:
                record = self.book.by_namespace.get(namespace, {}).get(key)
            before = previous.results if previous is not None else record.results if record is not None else None
            changed = False
            if record is not None:
                results = tuple(shared.setdefault(result, result)
                                for result in evaluate(record.unpacked(), snapshot, workloads, values,
                                                          seals=seals).results)
                if results != record.results:
                    record.results, record.found, changed = results, self._clock(), True
                self.judged += 1
            self._account(namespace, key, previous, record, before=before, changed=changed)

    def _account(self, namespace: str, key: str, previous: Record | None, record: Record | None, *,
                 before: tuple[RuleResult, ...] | None, changed: bool) -> None:
        """Count the workload's results instead of those it had (`before`), and mark its report if they
        changed or it is not (or no longer) as it should be; `previous` is the record it replaced, if any."""
        self.tally.move(namespace, counted(before or ()), counted(record.results or ()) if record else ())
        report = report_key(record.workload) if record is not None else None
        if previous is not None and report_key(previous.workload) != report:  # gone, or re-created (a new uid)
            self._workload_of.pop(report_key(previous.workload), None)
            self.writer.forget(report_key(previous.workload))  # the garbage collector deletes it with the workload
        if record is None or report is None:
            return
        self._workload_of[report] = (namespace, key)
        if changed or self.writer.knows(report) != bool(record.results):
            self.writer.mark(report)

    def _mark_all(self) -> None:
        """Every judged workload's report, after a list of those there (a new leader's first round)."""
        for report in list(self._workload_of):
            self.writer.mark(report)

    def _policy_change(self, snapshot: PolicySnapshot) -> None:
        """Mark the workloads of every namespace a changed policy (old or new version) selects."""
        current = {policy.name: policy for policy in snapshot.every_policy}
        changed = [name for name in current.keys() | self._policies.keys()
                   if current.get(name) is not self._policies.get(name)]
        versions = [policy for name in changed for policy in (current.get(name), self._policies.get(name)) if policy]
        self._policies = current
        if not versions:
            return
        if any(policy.namespace_selector is None for policy in versions):
            self.book.mark(None)
            return
        with self.book.lock:
            namespaces = list(self.book.by_namespace)
        # In shard order: a namespace is read from its shard, and a reader keeps a quarter of the shards parsed.
        self.book.mark(name for name in sorted(namespaces, key=shard_of)
                       if any(policy.applies_to_namespace(snapshot.namespace(name).labels) for policy in versions))

    def namespace_changed(self, names: Iterable[str]) -> None:
        """Namespaces whose labels or annotations changed, once their shards are written (from the namespace
        watch's thread): their workloads are judged again, against the namespaces as the workers see them."""
        self.book.mark(names)

class ServedPolicies:
    """The policies and namespaces exactly as this replica's workers serve them (the state directory)."""

    def __init__(self, state_directory: Path, compiler: PolicyCompiler) -> None:
        self._source = ClusterStateSource(state_directory, compiler=compiler)
        self._environment = compiler.environment

        self._snapshot: PolicySnapshot | None = None

    def __call__(self) -> tuple[PolicySnapshot, bool]:
        """The snapshot, built again only when the published state changed (a stat of `policies.json`
        otherwise); its namespaces are the live shards."""
        changed = self._source.refresh()
        if changed or self._snapshot is None:
            content = self._source.content()
            self._snapshot = PolicySnapshot.build(content.policies.values(), content.namespaces, content.errors,
                                                  self._environment, ready=content.ready,
                                                  default_priority_class=content.default_priority_class,
                                                  pod_groups_served=content.pod_groups_served)
        return self._snapshot, changed
