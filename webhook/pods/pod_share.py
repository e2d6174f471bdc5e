"""The spot share of one Pod's workload at its admission, and the rule that gives the Pod its class.

The rule: a workload has `s` spot and `d` on-demand live pods (as the ledger counts them) and at most
`max%` of its pods may be spot. The new pod makes `n = s + d + 1`; it is spot when `s + 1 <= floor(max% * n /
100)`, else on-demand. Decided pod by pod, every prefix of a workload's admissions keeps `spot <= floor(max% *
pods / 100)`: 0 % never gives spot, 100 % always does, and 60 % gives the 1st to 10th pods on-demand, spot,
on-demand, spot, spot, on-demand, spot, on-demand, spot, spot (6 of 10).
"""

import logging
from dataclasses import dataclass
from typing import Any

from webhook.pods.capacity_share import CLASS_LABEL, CapacityClass, ShareCounts, ShareLedger
from webhook.support.typing import JSONObject, as_map

log = logging.getLogger(__name__)

NOT_COUNTED = ShareCounts(0, 0, complete=False)


@dataclass(frozen=True, slots=True)
class ShareDecision:
    """The class a Pod got, and why (for explain, the response's warnings and the ledger)."""

    capacity_class: CapacityClass
    counts: ShareCounts
    max_percent: int
    allowed: int
    """How many of the workload's pods may be spot, this one included: floor(max% * pods / 100)."""
    decided: bool
    """True when this admission chose the class; False when the Pod came with it (its label or selector),
    which the ledger already counts or will count once the Pod lives."""

    @property
    def pods(self) -> int:
        return self.counts.spot + self.counts.on_demand + 1

    def reason(self) -> str:
        """One line for explain: the counts seen, the share and the maximum."""
        if not self.decided:
            return f"{self.capacity_class}: the pod came with its class"
        seen = (f"{self.counts.spot} spot and {self.counts.on_demand} on-demand live pods" if self.counts.complete
                else "no pod counts yet (decided as for a workload with no pods)")
        wanted = self.counts.spot + 1
        verdict = "within" if self.capacity_class == "spot" else "over"
        pods = f"{self.pods} pod" + ("s" if self.pods != 1 else "")
        return (f"{self.capacity_class}: the workload has {seen}; {wanted} spot of {pods} is {verdict} "
                f"the maximum of {self.allowed} ({self.max_percent}% of {self.pods})")


def decide(counts: ShareCounts, max_percent: int) -> ShareDecision:
    """The class of a new pod of a workload with these live pods (module docstring). Counts that are not
    complete are read as a workload with no pods: only 100 % then gives spot, the share can only be lower."""
    seen = counts if counts.complete else NOT_COUNTED
    pods = seen.spot + seen.on_demand + 1
    allowed = max_percent * pods // 100
    capacity_class: CapacityClass = "spot" if seen.spot + 1 <= allowed else "on-demand"
    return ShareDecision(capacity_class, seen, max_percent, allowed, decided=True)


class PodShare:
    """What `spot-share` knows of the Pod under admission: its namespace, the workload it belongs to (its
    controller ownerReference; none for a bare Pod, a workload of one) and, read once on first use, that
    workload's pod counts. The action leaves its decision here for the pipeline (which tells the ledger)
    and explain."""

    __slots__ = ("_counts", "_ledger", "decision", "namespace", "owner")

    def __init__(self, namespace: str, owner: JSONObject | None, ledger: ShareLedger | None) -> None:
        self.namespace = namespace
        self.owner = owner
        self._ledger = ledger
        self._counts: ShareCounts | None = None
        self.decision: ShareDecision | None = None

    @property
    def owner_uid(self) -> str:
        uid = as_map(self.owner).get("uid")
        return uid if isinstance(uid, str) else ""

    @property
    def owner_kind(self) -> str:
        return str(as_map(self.owner).get("kind") or "")

    def describe_owner(self) -> str:
        if self.owner is None:
            return "a bare Pod (a workload of one)"
        return f"{self.owner_kind or 'controller'} {as_map(self.owner).get('name') or '?'}"

    def counts(self) -> ShareCounts:
        """The workload's live pods by class. A bare Pod has none; without a ledger, or when it fails, the
        counts are not complete (a failing ledger must not fail the admission)."""
        if self._counts is None:
            self._counts = self._read()
        return self._counts

    def _read(self) -> ShareCounts:
        if self.owner is None:
            return ShareCounts(0, 0, complete=True)
        if self._ledger is None or not self.owner_uid:
            return NOT_COUNTED
        try:
            return self._ledger.counts(self.namespace, self.owner_uid)
        except Exception:
            log.exception("pod counts of %s in %s unreadable", self.describe_owner(), self.namespace)
            return NOT_COUNTED


def labelled_class(labels: Any) -> str | None:
    """The class label a pod (or its template) already carries, as written."""
    value = as_map(labels).get(CLASS_LABEL)
    return value if isinstance(value, str) else None
