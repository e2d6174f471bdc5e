"""What this replica's rules did recently: the last 15 minutes of the rule counters, by one-minute buckets.

The workers count every rule evaluation in `placer_rule_evaluations_total` (`webhook.support.metrics`, written to
the replica's multiprocess directory): counts since each worker started, summed over the workers. The
controller process of the replica takes a copy of those totals at every bucket boundary (each minute) and
keeps the copies of the last window; what the rules did in the window is the totals now minus the oldest
copy kept. So "recently" is the last 15 minutes in one-minute steps: an evaluation is counted from the
moment it happens until 14 to 15 minutes later (when the copy taken before it leaves the window), and the
window starts when the controller did if that is later. Counts from before that start are in its first
window (the workers may admit while the controller starts; the arbiter restarts a controller that died,
whose successor then reports up to 15 minutes more than the window once).

The same source of truth serves `/metrics` and the policy status: nothing is counted twice.
"""

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from webhook.support.metrics import read_rule_counts
from webhook.support.rule_problems import Problem, RuleKey, read_rule_problems

WINDOW_SECONDS = 900
BUCKET_SECONDS = 60


@dataclass(frozen=True, slots=True)
class ReplicaWindow:
    """One replica's recent counts and problems, as it publishes them."""

    at: float
    """Wall-clock time of the reading (seconds since the epoch)."""
    since: float
    """Start of the window these counts cover: the window's start, or the controller's, if later."""
    counts: Mapping[RuleKey, int] = field(default_factory=dict)
    """Evaluations in the window by (policy, rule, outcome), zeros left out."""
    problems: Mapping[RuleKey, Problem] = field(default_factory=dict)
    """The last error and missing key per rule, for those that happened in the window."""


class RecentCounts:
    """The replica's counts over the last `window` seconds, from the cumulative counters."""

    def __init__(
        self,
        read_counts: Callable[[], Mapping[RuleKey, float]],
        read_problems: Callable[[], Mapping[RuleKey, Problem]],
        *,
        clock: Callable[[], float] = time.time,
        window: float = WINDOW_SECONDS,
        bucket: float = BUCKET_SECONDS,
    ) -> None:
        self._read_counts = read_counts
        self._read_problems = read_problems
        self._clock = clock
        self._window = window
        self._bucket = bucket
        self._copies: deque[tuple[float, Mapping[RuleKey, float]]] = deque([(clock(), {})])
        """Totals at each bucket boundary of the window, oldest first. The first is none at all: what the
        workers counted before the controller's first reading (admissions while it was starting) counts."""

    @classmethod
    def from_directory(cls, directory: Path, *, clock: Callable[[], float] = time.time) -> "RecentCounts":
        """Counts from the counter and problem files the workers write in `directory`."""
        return cls(lambda: read_rule_counts(directory), lambda: read_rule_problems(directory), clock=clock)

    @property
    def window(self) -> float:
        return self._window

    def read(self) -> ReplicaWindow:
        """The counts of the window ending now (takes the bucket copy when a boundary has passed)."""
        now = self._clock()
        totals = self._read_counts()
        if now - self._copies[-1][0] >= self._bucket:
            self._copies.append((now, dict(totals)))
        while now - self._copies[0][0] > self._window:
            self._copies.popleft()  # older than the window (the copy just taken never is)
        since, base = self._copies[0]
        counts: dict[RuleKey, int] = {}
        for key, total in totals.items():
            # a total below its copy: a counter file went (a restart of the server): count from zero
            done = total - base.get(key, 0.0) if total >= base.get(key, 0.0) else total
            if done > 0:
                counts[key] = int(done)
        problems = {key: problem for key, problem in self._read_problems().items() if problem.at >= since}
        return ReplicaWindow(now, since, counts, problems)
