"""The last error and the last missing key of each rule, per worker process, for the policy's status.

The counts of what each rule did are Prometheus counters (`webhook.support.metrics`, `webhook.support.counter_file`); a
count cannot say *which* error a rule hit. So every worker also keeps, per (policy, rule, outcome) where the
outcome is `error` or `missing`, the detail of the last one and when it happened, in a small JSON file of its
own next to its counter files (`rule_problems_<pid>.json` in PROMETHEUS_MULTIPROC_DIR). The controller process
of the replica reads them all (`read_rule_problems`) with the counters when it reports the replica's health.

Writing is local and cheap, never on the cluster: the file is replaced (temporary file and rename) at once
when a rule has its first problem of a kind, and otherwise at most once a second (a changed detail, a later
time); what is held back is written with the next admission after that second, whatever its outcome.
Nothing is written while rules only apply or do not match.
"""

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PROBLEM_OUTCOMES = ("error", "missing")
FILE_PREFIX = "rule_problems_"
WRITE_INTERVAL = 1.0
"""Seconds between two writes of one worker's file (a burst of failing admissions writes it once)."""

RuleKey = tuple[str, str, str]
"""(policy, rule, outcome)."""


@dataclass(frozen=True, slots=True)
class Problem:
    at: float
    """Wall-clock time (seconds since the epoch) of the last one."""
    detail: str


class RuleProblemFile:
    """This process's last problem per rule, written to `directory` (one file per process id)."""

    def __init__(self, directory: str, *, clock: Callable[[], float] = time.time,
                 interval: float = WRITE_INTERVAL) -> None:
        self._directory = directory
        self._clock = clock
        self._interval = interval
        self._lock = threading.Lock()
        self._problems: dict[RuleKey, Problem] = {}
        self._pid = os.getpid()
        self._dirty = False
        self._written_at = float("-inf")

    @property
    def pending(self) -> bool:
        """Something is held back until the second since the last write is over."""
        return self._dirty

    def record(self, problems: Iterable[tuple[str, str, str, str]]) -> None:
        """Note (policy, rule, outcome, detail) of one admission (none: only write what is pending, if due)."""
        now = self._clock()
        with self._lock:
            if os.getpid() != self._pid:  # a forked worker: the parent's problems are not its own
                self._pid, self._problems, self._dirty = os.getpid(), {}, False
            first = False
            for policy, rule, outcome, detail in problems:
                key = (policy, rule, outcome)
                previous = self._problems.get(key)
                self._problems[key] = Problem(now, detail)
                first = first or previous is None
                if previous is None or previous.detail != detail or now - previous.at >= self._interval:
                    self._dirty = True  # new, changed, or later: the time moves on (at most once a second)
            if self._dirty and (first or now - self._written_at >= self._interval):
                self._write(now)

    def flush(self) -> None:
        """Write what was not written yet (a process about to exit, a test)."""
        with self._lock:
            if self._dirty:
                self._write(self._clock())

    def _write(self, now: float) -> None:
        payload = [
            {"policy": p, "rule": r, "outcome": o, "at": problem.at, "detail": problem.detail}
            for (p, r, o), problem in self._problems.items()
        ]
        path = Path(self._directory) / f"{FILE_PREFIX}{self._pid}.json"
        try:
            descriptor, temporary = tempfile.mkstemp(dir=self._directory, prefix=".rule_problems.")
            with os.fdopen(descriptor, "w") as file:
                json.dump(payload, file)
            os.replace(temporary, path)
        except OSError:
            return  # the counts still tell; the detail waits for the next write
        self._dirty, self._written_at = False, now


def read_rule_problems(directory: Path) -> dict[RuleKey, Problem]:
    """The latest problem per (policy, rule, outcome) over every worker's file in `directory` (workers that
    exited included: their problems happened). Unreadable files are skipped."""
    latest: dict[RuleKey, Problem] = {}
    for path in sorted(directory.glob(f"{FILE_PREFIX}*.json")):
        try:
            entries = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for entry in entries if isinstance(entries, list) else []:
            problem = _problem(entry)
            if problem is None:
                continue
            key, found = problem
            if key not in latest or found.at > latest[key].at:
                latest[key] = found
    return latest


def _problem(entry: object) -> tuple[RuleKey, Problem] | None:
    if not isinstance(entry, Mapping):
        return None
    policy, rule, outcome = entry.get("policy"), entry.get("rule"), entry.get("outcome")
    at, detail = entry.get("at"), entry.get("detail")
    if not (isinstance(policy, str) and isinstance(rule, str) and outcome in PROBLEM_OUTCOMES):
        return None
    if not isinstance(at, int | float) or not isinstance(detail, str):
        return None
    return (policy, rule, str(outcome)), Problem(float(at), detail)
