"""Pod counts per workload kept in memory: the ledger of `placer apply` and `placer test`.

Offline there is no controller: each Pod the manifests hold is counted, once admitted, as the cluster
would count it once created, so a list of pods of one ReplicaSet shows the classes a burst of creations
gets one after the other. A Pod that comes with its class label counts as that class.
"""

from webhook.pods.capacity_share import CapacityClass, ShareCounts


class CountedShares:
    """A `ShareLedger` whose counts are complete: it knows every pod there is."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], tuple[int, int]] = {}

    def counts(self, namespace: str, owner_uid: str) -> ShareCounts:
        spot, on_demand = self._counts.get((namespace, owner_uid), (0, 0))
        return ShareCounts(spot, on_demand, complete=True)

    def release(self) -> None:
        """One process decides in turn: nothing to let go."""

    def admitted(self, namespace: str, owner_uid: str, capacity_class: CapacityClass) -> None:
        spot, on_demand = self._counts.get((namespace, owner_uid), (0, 0))
        self._counts[(namespace, owner_uid)] = (spot + 1, on_demand) if capacity_class == "spot" else (
            spot, on_demand + 1)
