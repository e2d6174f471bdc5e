"""The spot share of a workload: what admission needs to know of its live pods (interface between the
admission action and the controller's pod counts)."""

from dataclasses import dataclass
from typing import Literal, Protocol

CapacityClass = Literal["spot", "on-demand"]
CLASS_LABEL = "placer.dev/capacity-class"
"""Label Placer puts on each Pod it gives a class: the controller counts live pods by it."""


@dataclass(frozen=True, slots=True)
class ShareCounts:
    spot: int
    on_demand: int
    complete: bool
    """False when the controller has not published counts for this namespace yet (first list not done, no RBAC)."""


class ShareLedger(Protocol):
    def counts(self, namespace: str, owner_uid: str) -> ShareCounts:
        """Live (not terminating, not finished) pods of the workload whose controller ownerReference has
        `owner_uid`, by the class label Placer gave them, plus what this worker admitted recently that the
        controller has not published yet."""

    def admitted(self, namespace: str, owner_uid: str, capacity_class: CapacityClass) -> None:
        """Record a (non-dry-run) admission this worker just answered, until the published counts include it."""

    def release(self) -> None:
        """The admission that read `counts` is over (answered, refused, a dry run, failed): a ledger that keeps
        the workload to itself from `counts` to `admitted`, so that two workers never decide from the same
        counts, lets it go. Called once per admission, whatever happened."""
