"""Prometheus metrics, correct across the server's worker processes.

Under `placer serve` every worker writes its samples to files in PROMETHEUS_MULTIPROC_DIR (set by the CLI
before any worker starts) and `/metrics` merges them, so a scrape sees the whole server, not one worker. The
main process folds the files of exited workers into the totals (`server.metrics_files`), under the
directory's lock: a scrape holds it shared.
Elsewhere (tests, the CLI) metrics live in a registry private to the instance: no global state.
"""

import contextlib
import fcntl
import glob
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)

from webhook.support.counter_file import AdmissionFiles, CounterFile, HistogramFile
from webhook.support.rule_problems import RuleProblemFile

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_MAX_CACHED_SERIES = 10_000
REQUESTS = "placer_admission_requests"
REQUESTS_HELP = "Admission requests answered, by kind, operation and result."
REQUEST_LABELS = ("kind", "operation", "result")
DURATION = "placer_admission_duration_seconds"
DURATION_HELP = "Time to answer an admission request, from body read to response encoded."
RULE_EVALUATIONS = "placer_rule_evaluations"
RULE_EVALUATIONS_HELP = "Rule evaluations by policy, rule and outcome (applied, not-matched, missing, error, skipped)."
RULE_EVALUATION_LABELS = ("policy", "rule", "outcome")
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ProcessId:
    """The process id, asked of the kernel once per process rather than on every sample written.

    In multiprocess mode prometheus_client checks the process id on every increment, to notice a fork (a
    forked process must write to files of its own). `os.getpid()` is a system call: one per rule counter
    was 7-8 % of a worker's CPU under load with 50 rules (an admission's samples are written by
    `AdmissionFiles` now, which asks once per file; the other metrics still ask on every sample). This answers
    the same question from a value refreshed in the child after every `os.fork()`.
    """

    def __init__(self) -> None:
        self.value = os.getpid()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self.value = os.getpid()

    def __call__(self) -> int:
        return self.value


def use_process_id_after_fork() -> None:
    """Make prometheus_client's multiprocess samples learn the process id from `ProcessId`.

    `MultiProcessValue(process_identifier)` is prometheus_client's own hook for this. The swap happens once
    per process and only before the process wrote any sample: two value classes would keep two maps of the
    same file and overwrite each other's entries.
    """
    current = values.ValueClass
    if not getattr(current, "_multiprocess", False) or getattr(current, "placer_process_id", False):
        return
    directory = os.environ.get(MULTIPROC_ENV, "")
    if glob.glob(os.path.join(glob.escape(directory), f"*_{os.getpid()}.db")):
        return  # this process already writes samples through the class it has: keep it
    value_class = values.MultiProcessValue(process_identifier=ProcessId())  # type: ignore[no-untyped-call]
    value_class.placer_process_id = True
    values.ValueClass = value_class


class Metrics:
    def __init__(self) -> None:
        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        if self.multiprocess:
            use_process_id_after_fork()
        self._registry = CollectorRegistry()
        registry = None if self.multiprocess else self._registry
        self.requests = Counter(REQUESTS, REQUESTS_HELP, list(REQUEST_LABELS), registry=registry)
        self.duration = Histogram(DURATION, DURATION_HELP, buckets=_BUCKETS, registry=registry)
        self.rule_evaluations = Counter(
            RULE_EVALUATIONS, RULE_EVALUATIONS_HELP, list(RULE_EVALUATION_LABELS), registry=registry
        )
        directory, process_id = os.environ.get(MULTIPROC_ENV, ""), ProcessId()
        self._admission_files = AdmissionFiles(
            CounterFile(directory, REQUESTS, REQUESTS_HELP, REQUEST_LABELS, process_id=process_id),
            HistogramFile(directory, DURATION, DURATION_HELP, _BUCKETS, process_id=process_id),
            CounterFile(directory, RULE_EVALUATIONS, RULE_EVALUATIONS_HELP, RULE_EVALUATION_LABELS,
                        process_id=process_id),
        ) if self.multiprocess else None
        """Under `placer serve`, where each admission's count, duration and ~50 rule counts are written: the
        samples `requests`, `duration` and `rule_evaluations` would write, in files of their own (counter_file)."""
        self._problem_file = RuleProblemFile(os.environ[MULTIPROC_ENV]) if self.multiprocess else None
        """Under `placer serve`, each rule's last error and missing key, for the policy's status."""
        self.policies = Gauge(
            "placer_policies",
            "Policies loaded (state=ready) and policy load errors (state=error).",
            ["state"],
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.namespace_lookups = Counter(
            "placer_namespace_lookups",
            "Namespaces read from the API server because the watched state did not have them yet, by result.",
            ["result"],
            registry=registry,
        )
        self.unplaceable = Counter(
            "placer_unplaceable_templates",
            "Pod templates Placer left with no node to land on (each one a warning in the response), by kind.",
            ["kind"],
            registry=registry,
        )
        self.over_capacity = Counter(
            "placer_gang_over_capacity",
            "Gang member templates whose pods the nodes that may host them can never hold (each a warning), by kind.",
            ["kind"],
            registry=registry,
        )
        self.volume_pins = Counter(
            "placer_volume_pins",
            "Claims of admitted Pods that pin-to-volume-node looked at, by outcome (pinned, pinned-node-gone: "
            "strict, the node is gone; node-gone: not pinned; volume-missing: bound to a deleted volume).",
            ["outcome"],
            registry=registry,
        )
        self._rule_counters: dict[tuple[str, str, str], Any] = {}
        """Labelled children of rule_evaluations: `labels()` costs microseconds and runs ~50 times a request."""
        self._request_counters: dict[tuple[str, str, str], Any] = {}

    def observe_admission(
        self,
        kind: str,
        operation: str,
        result: str,
        seconds: float,
        rules: Iterable[tuple[str, str, str]],
        *,
        problems: Iterable[tuple[str, str, str, str]] = (),
    ) -> None:
        """`rules`: (policy, rule, outcome) of each rule evaluation; `problems`: (policy, rule, outcome,
        detail) of those that failed or reached a missing key (see `rule_problems`)."""
        if self._problem_file is not None and (problems or self._problem_file.pending):
            self._problem_file.record(problems)
        key = (kind, operation, result)
        if self._admission_files is not None:
            self._admission_files.observe(key, seconds, rules)
            return
        counter = self._request_counters.get(key)
        if counter is None:  # bounded: kinds are the workload table's, operations and results fixed sets
            counter = self._request_counters[key] = self.requests.labels(*key)
        counter.inc()
        self.duration.observe(seconds)
        counters = self._rule_counters
        for key in rules:
            counter = counters.get(key)
            if counter is None:
                if len(counters) >= _MAX_CACHED_SERIES:
                    counters.clear()  # policies were renamed many times: let the old children go
                counter = counters[key] = self.rule_evaluations.labels(*key)
            counter.inc()

    def observe_unplaceable(self, kind: str, templates: int) -> None:
        self.unplaceable.labels(kind).inc(templates)

    def observe_over_capacity(self, kind: str, templates: int) -> None:
        self.over_capacity.labels(kind).inc(templates)

    def observe_volume_pins(self, outcomes: Iterable[str]) -> None:
        for outcome in outcomes:
            self.volume_pins.labels(outcome).inc()

    def observe_namespace_lookup(self, result: str) -> None:
        self.namespace_lookups.labels(result).inc()

    def observe_policies(self, ready: int, errors: int) -> None:
        self.policies.labels("ready").set(ready)
        self.policies.labels("error").set(errors)

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition of every worker's samples."""
        if self.multiprocess:
            registry = CollectorRegistry()
            directory = os.environ[MULTIPROC_ENV]
            multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
            with directory_lock(directory, exclusive=False):
                return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self._registry), CONTENT_TYPE_LATEST


class ControllerMetrics:
    """What the controller process does, on the same `/metrics` (it writes to the workers' multiprocess
    directory: the main process starts it with that environment)."""

    def __init__(self) -> None:
        if os.environ.get(MULTIPROC_ENV):
            use_process_id_after_fork()
        registry = None if os.environ.get(MULTIPROC_ENV) else CollectorRegistry()
        self.pod_groups = Counter(
            "placer_pod_groups",
            "PodGroups the controller kept for createPodGroup, by outcome (created, updated, unchanged, foreign: "
            "a user's PodGroup left alone, recreated: a stale one of a re-created workload replaced, deleting: waiting "
            "for one being deleted, conflict, error, not-served: the PodGroup CRD is not installed).",
            ["outcome"],
            registry=registry,
        )

    def observe_pod_group(self, outcome: str) -> None:
        self.pod_groups.labels(outcome).inc()


@contextlib.contextmanager
def directory_lock(directory: str, *, exclusive: bool) -> Iterator[None]:
    """The multiprocess directory's lock: shared while a scrape reads the files, exclusive while the main
    process folds the files of exited workers (`server.metrics_files`)."""
    descriptor = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(descriptor)


def read_rule_counts(directory: Path) -> dict[tuple[str, str, str], float]:
    """Every worker's rule evaluations so far in this replica's multiprocess directory, by (policy, rule,
    outcome): the same samples `/metrics` shows as `placer_rule_evaluations_total`, summed over the workers'
    files (those of workers that exited are folded into `counter_folded.db`, read here too)."""
    pattern = os.path.join(glob.escape(str(directory)), "counter_*.db")
    counts: dict[tuple[str, str, str], float] = {}
    with directory_lock(str(directory), exclusive=False):
        files = sorted(glob.glob(pattern))  # the live workers' files and the folded totals of exited ones
        merged = multiprocess.MultiProcessCollector.merge(files)  # type: ignore[no-untyped-call]
    for metric in merged:
        if metric.name != RULE_EVALUATIONS:
            continue
        for sample in metric.samples:
            labels = sample.labels
            if sample.name.endswith("_total") and set(RULE_EVALUATION_LABELS) <= set(labels):
                key = (labels["policy"], labels["rule"], labels["outcome"])
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


