"""`kubectl placer shares`: the spot share each workload has now, from its live pods.

Lists the Pods Placer gave a capacity class (label-selected, as the controller watches them:
`webhook.cluster.spot.spot_ledger`) and counts them the same way: per controller ownerReference, live pods only (not
terminating, not finished), by class. What it prints is what the spot-share action sees at admission once the
controller's watch has caught up. Read-only: one paged list of pods.
"""

import argparse
import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.cluster.spot.spot_ledger import pod_share
from webhook.commands.flags import add_cluster, add_output, add_scope
from webhook.commands.live import namespace_scope, open_api
from webhook.pods.capacity_share import CLASS_LABEL
from webhook.support.typing import as_map

PAGE_SIZE = 500


@dataclass(slots=True)
class WorkloadShare:
    namespace: str
    kind: str
    name: str
    uid: str
    spot: int = 0
    on_demand: int = 0
    ending: int = 0
    """Labelled pods terminating or finished: not counted."""

    @property
    def share(self) -> float:
        total = self.spot + self.on_demand
        return 100.0 * self.spot / total if total else 0.0


def shares(pods: Iterable[Mapping[str, Any]]) -> list[WorkloadShare]:
    """Per workload (namespace and controller), its live pods by class; sorted by namespace, kind, name."""
    found: dict[str, WorkloadShare] = {}
    for pod in pods:
        counted = pod_share(pod)
        if counted is None:
            continue
        metadata = as_map(pod.get("metadata"))
        owner = next(as_map(ref) for ref in metadata.get("ownerReferences") or []
                     if as_map(ref).get("controller") is True)
        workload = found.get(counted.workload)
        if workload is None:
            workload = found[counted.workload] = WorkloadShare(
                str(metadata.get("namespace")), str(owner.get("kind") or ""), str(owner.get("name") or ""),
                str(owner.get("uid")))
        if not counted.live:
            workload.ending += 1
        elif counted.capacity_class == "spot":
            workload.spot += 1
        else:
            workload.on_demand += 1
    return sorted(found.values(), key=lambda w: (w.namespace, w.kind, w.name, w.uid))


def list_labelled_pods(api: KubeApi, namespace: str | None) -> Iterator[Mapping[str, Any]]:
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    query = {"labelSelector": CLASS_LABEL, "limit": str(PAGE_SIZE)}
    while True:
        page = api.get(path, query)
        yield from (item for item in page.get("items") or [] if isinstance(item, dict))
        token = as_map(page.get("metadata")).get("continue")
        if not token:
            return
        query = {**query, "continue": str(token)}


def render_text(found: list[WorkloadShare], out: TextIO) -> None:
    rows = [("NAMESPACE", "WORKLOAD", "SPOT", "ON-DEMAND", "SPOT %", "ENDING")]
    rows += [(w.namespace, f"{w.kind}/{w.name}", str(w.spot), str(w.on_demand), f"{w.share:.0f}", str(w.ending))
             for w in found]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        out.write("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n")


def render_json(found: list[WorkloadShare], out: TextIO) -> None:
    items = [{"namespace": w.namespace, "kind": w.kind, "name": w.name, "uid": w.uid, "spot": w.spot,
              "onDemand": w.on_demand, "spotPercent": round(w.share, 1), "ending": w.ending} for w in found]
    out.write(json.dumps({"workloads": items}, indent=2) + "\n")


def add_parser(commands: Any) -> None:
    """Register `kubectl placer shares` on the plugin's subcommands."""
    parser = commands.add_parser(
        "shares", help="the spot share of each workload's live pods",
        description="Count the live pods Placer gave a capacity class (placer.dev/capacity-class), per workload "
        "(the pods' controller), as the spot-share action counts them.")
    scope = parser.add_mutually_exclusive_group()
    add_scope(scope)
    add_output(parser, ["text", "json"], "a table, or JSON")
    add_cluster(parser)
    parser.set_defaults(run=command)


def command(args: argparse.Namespace) -> int:
    api = open_api("kubectl placer shares", args)
    if api is None:
        return 1
    namespace = namespace_scope(args)
    try:
        found = shares(list_labelled_pods(api, namespace))
    except (ApiError, TransportError) as error:
        print(f"kubectl placer shares: listing pods failed: {error}", file=sys.stderr)
        return 1
    finally:
        api.close()
    (render_json if args.output == "json" else render_text)(found, sys.stdout)
    return 0
