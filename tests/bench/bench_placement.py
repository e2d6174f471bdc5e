"""What the placement check costs an admission, at N nodes (the controller's node shards, in-process).

    python -m tests.bench.bench_placement [--nodes 5000] [--iterations 300]

Rows: the captured Pod create with a policy whose node selector some nodes match (feasible) and one no
node matches (unplaceable), each without the check and with it (answer kept per constraint set), and the
first admission of an unplaceable constraint set after the nodes changed (every node scanned); and the
captured Job create labelled for a gang (coscheduling) and pinned to a pool, whose capacity is checked
(`gang_capacity`): per admission with the answer kept, and the first after a node change (every node of
the pool counted).
"""

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.conftest import fixture_request
from tests.helpers import publish_nodes as publish
from tests.helpers import snapshot_of
from tests.unit.test_gang_capacity import gang_policy
from tests.unit.test_placement_warnings import policy
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.placement.feasibility import PlacementCheck
from webhook.policy.snapshot import NamespaceInfo
from webhook.workloads import default_workload_table


def nodes(count: int) -> dict[str, dict[str, Any]]:
    return {f"node-{i:05d}": {"labels": {"node-pool": f"pool-{i % 7}", "zone": f"zone-{i % 3}"},
                              "taints": [{"key": "gpu", "effect": "NoSchedule"}] if i % 5 == 0 else []}
            for i in range(count)}


def per_admission(text: str, check: PlacementCheck | None, iterations: int, fixture: str = "pod-bare-create-dryrun"
                  ) -> float:
    body = fixture_request(fixture)
    body["request"]["namespace"] = body["request"]["object"]["metadata"]["namespace"] = "team-a"
    snapshot, table = snapshot_of(text, namespaces=[NamespaceInfo("team-a")]), default_workload_table()
    request = parse_review(body)
    admit(request, snapshot, table, placement=check)
    started = time.perf_counter()
    for _ in range(iterations):
        admit(request, snapshot, table, placement=check)
    return (time.perf_counter() - started) / max(iterations, 1) * 1e6


def run(node_count: int, iterations: int) -> dict[str, float]:
    """µs per admission for each case, and ms for the first unplaceable admission after a node change."""
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        reader = publish(Path(tmp), nodes(node_count))
        for label, text in (("feasible", policy({"node-pool": "pool-3"})),
                            ("unplaceable", policy({"node-pool": "ml"}))):
            figures[f"{label} without"] = per_admission(text, None, iterations)
            check = PlacementCheck(reader)
            figures[f"{label} with"] = per_admission(text, check, iterations)
            answers = check._answers.values()  # the check really ran: feasible, or found no host
            assert answers and (label == "feasible") == all(fit.hosts for fit in answers)
        started = time.perf_counter()
        per_admission(policy({"node-pool": "ml"}), PlacementCheck(reader), 0)
        figures["first unplaceable ms"] = (time.perf_counter() - started) * 1000
        gang = gang_policy("pool-3")
        figures["gang without"] = per_admission(gang, None, iterations, "job-create-dryrun")
        started = time.perf_counter()
        per_admission(gang, PlacementCheck(reader), 0, "job-create-dryrun")
        figures["first gang ms"] = (time.perf_counter() - started) * 1000
        figures["gang with"] = per_admission(gang, PlacementCheck(reader), iterations, "job-create-dryrun")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    figures = run(args.nodes, args.iterations)
    print(f"{args.nodes} nodes; µs per admission (the captured Pod, in-process)")
    for label in ("feasible", "unplaceable"):
        print(f"  {label + ' selector':22} without the check {figures[label + ' without']:8.0f}   "
              f"with it {figures[label + ' with']:8.0f}")
    print(f"  first unplaceable admission after a node change: {figures['first unplaceable ms']:.1f} ms")
    print(f"  {'gang (Job, capacity)':22} without the check {figures['gang without']:8.0f}   "
          f"with it {figures['gang with']:8.0f}   first after a node change: {figures['first gang ms']:.1f} ms")


if __name__ == "__main__":
    main()
