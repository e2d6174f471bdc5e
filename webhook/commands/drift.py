"""`kubectl placer drift`: the workloads that run without the current policies, and the patch for each.

Each workload of the kinds Placer mutates (operator resources included) is judged by
`webhook.cluster.reports.compliance`:
the admission engine run on the stored object as its CREATE. A workload is out of step when applying the
policies now would change it, or when a value Placer wrote under an earlier version of a rule differs from
the one the rule writes now (`webhook.engine.value_drift`; its patch replaces that value, a user's own value
is never touched). Listing only reads (lists and gets).

`--apply` brings the chosen workloads in step: first every patch is sent as a server-side dry run
(`dryRun=All`: admission and validation run, nothing is stored; API reference, "Dry-run":
https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run), then, after a confirmation (or
`--yes`), for real, at most `--qps` writes per second. Each write is a JSON merge patch that carries the
resourceVersion the judgement was made on, so a workload changed in between is refused with 409 Conflict
instead of overwritten (the API server checks a patch's resourceVersion as a precondition: kubernetes/
kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go, `patcher.applyPatch` keeps the
patched object's resourceVersion and the registry's update compares it). Changing a pod template starts a
rollout: Deployments, StatefulSets and DaemonSets replace their pods, and the command says so before asking.
A Pod cannot take scheduling changes in place (its spec is immutable there) and is never patched.
"""

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from webhook.admission.offline import load_policies
from webhook.change.judging import Judged, judge, write_body
from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.cluster.client.workload_lists import Served, list_workloads
from webhook.cluster.reports.compliance import stale_values
from webhook.commands.flags import add_cluster, add_output, add_policies, add_scope
from webhook.commands.live import LiveError, cluster_snapshot, namespace_scope, open_api, read_namespaces, resolve_kind
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.support.typing import JSONObject, as_map

ROLLOUT_WARNING = ("Changing a pod template starts a rollout: Deployments, StatefulSets and DaemonSets replace "
                   "their pods, Jobs and operator resources take the change as their controller does.")


@dataclass(slots=True)
class DriftOptions:
    namespace: str | None
    selector: str | None
    targets: Sequence[str] = ()
    """`KIND/NAME`s: only these (in `namespace`)."""
    apply: bool = False
    yes: bool = False
    qps: float = 5.0
    output: str = "text"


def judge_cluster(api: KubeApi, snapshot: PolicySnapshot, namespace: str | None, selector: str | None) -> list[Judged]:
    """Every workload in `namespace` (None: all) matching `selector`, judged against `snapshot`'s policies
    with its namespace's real labels."""
    listed, namespaces = read_workloads(api, namespace, selector)
    return judge(listed, snapshot, namespaces)


def read_workloads(api: KubeApi, namespace: str | None, selector: str | None
                   ) -> tuple[list[tuple[Served, JSONObject]], dict[str, NamespaceInfo]]:
    """Every workload in `namespace` (None: all) matching `selector`, and the namespaces they are in (lists and
    gets only)."""
    listed = list(list_workloads(api, namespace, selector))
    names = {str(as_map(obj.get("metadata")).get("namespace") or "") for _, obj in listed}
    return listed, read_namespaces(api, sorted(name for name in names if name))


def chosen(judged: list[Judged], targets: Sequence[str]) -> list[Judged]:
    """Those named by `targets` (`deployment/web`, `deploy/web`, `pytorchjob.kubeflow.org/train`); all when
    none are named."""
    if not targets:
        return judged
    wanted = set()
    for target in targets:
        kind_name, _, name = target.partition("/")
        kind = resolve_kind(kind_name)
        wanted.add((kind.group, kind.kind, name))
    return [item for item in judged
            if (item.served.kind.group, item.served.kind.kind, item.verdict.workload.name) in wanted]


def render_text(judged: list[Judged], out: TextIO) -> None:
    """Each workload out of step or with rule errors: every failing rule with its reason, then the patch (or
    why there is none); and the totals."""
    shown = [item for item in judged if item.verdict.drifted or any(r.result == "error" for r in item.verdict.results)]
    for item in shown:
        verdict = item.verdict
        out.write(f"{verdict.workload.title}\n")
        for result in verdict.results:
            if result.result in ("fail", "error"):
                stale = stale_values(result)
                detail = (f"out of step: {stale or result.message}" if result.result == "fail"
                          else f"error: {result.message}")
                out.write(f"  {result.policy}/{result.rule}: {detail}\n")
        if verdict.patch:
            out.write(f"  patch: {json.dumps(verdict.patch)}\n")
        elif verdict.drifted:
            out.write(f"  no patch: {_no_patch(item)}\n")
    totals = {"pass": 0, "fail": 0, "error": 0, "skip": 0}
    for item in judged:
        verdict = item.verdict
        state = ("skip" if verdict.skipped else "error" if any(r.result == "error" for r in verdict.results)
                 else "fail" if verdict.drifted else "pass" if verdict.results else "")
        if state:
            totals[state] += 1
    out.write(f"{_workloads(len(judged))}: {totals['fail']} out of step, {totals['pass']} in step, "
              f"{totals['error']} with rule errors, {totals['skip']} skipped, "
              f"{len(judged) - sum(totals.values())} no policy matches\n")


def _no_patch(item: Judged) -> str:
    """Why a workload out of step has no patch to write."""
    verdict = item.verdict
    if verdict.refused is not None:
        return (f"an Enforced policy refuses it as it is, and would refuse any write of it: {verdict.refused}; "
                "change what it refuses in the workload's own manifest")
    return "applying the policies now changes nothing Placer can write"


def render_json(judged: list[Judged], out: TextIO) -> None:
    items = [{"workload": item.verdict.workload.as_report_resource(),
              "results": [dataclasses.asdict(result) for result in item.verdict.results],
              "patch": item.verdict.patch, "refused": item.verdict.refused}
             for item in judged if item.verdict.results]
    out.write(json.dumps({"items": items}, indent=2) + "\n")


def bring_in_step(
    api: KubeApi,
    judged: list[Judged],
    *,
    yes: bool,
    qps: float,
    out: TextIO,
    ask: Callable[[str], str] = input,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Dry run every patch, confirm, then write them at most `qps` per second. Says for each workload out of
    step what it wrote, or why it wrote nothing; 0 only when every one of them was written."""
    drifted = [item for item in judged if item.verdict.drifted]
    writable: list[tuple[Judged, JSONObject]] = []
    for item in drifted:
        title = item.verdict.workload.title
        body = write_body(item)
        if item.served.kind.kind == "Pod":
            out.write(f"{title}: not written: a Pod takes no scheduling change in place; recreate it\n")
        elif body is None:
            out.write(f"{title}: not written: {_no_patch(item)}\n")
        else:
            writable.append((item, body))
    if not writable:
        out.write("nothing to apply\n")
        return 1 if drifted else 0
    refused = []
    for item, body in writable:
        try:
            api.merge_patch(_path(item), body, {"dryRun": "All"})
        except ApiError as error:
            refused.append(item)
            out.write(f"{item.verdict.workload.title}: not written: the dry run was refused: {error}\n")
    ready = [(item, body) for item, body in writable if item not in refused]
    if not ready:
        return 1
    out.write(f"{_workloads(len(ready))} will be changed (dry run passed):\n")
    for item, body in ready:
        out.write(f"  {item.verdict.workload.title}: {_shown(body)}\n")
    out.write(ROLLOUT_WARNING + "\n")
    if not yes:
        out.flush()
        if ask("Apply? [y/N] ").strip().lower() not in ("y", "yes"):
            out.write("nothing applied\n")
            return 1
    failed = len(ready) < len(drifted)
    interval = 1.0 / qps if qps > 0 else 0.0
    for index, (item, body) in enumerate(ready):
        if index and interval:
            sleep(interval)
        try:
            api.merge_patch(_path(item), body)
            out.write(f"{item.verdict.workload.title}: brought in step: wrote {_shown(body)}\n")
        except ApiError as error:
            failed = True
            out.write(f"{item.verdict.workload.title}: not changed: {error}\n")
    return 1 if failed else 0


def _shown(body: JSONObject) -> str:
    """A merge patch as written, without the resourceVersion precondition."""
    metadata = {key: value for key, value in as_map(body.get("metadata")).items() if key != "resourceVersion"}
    shown = {key: value for key, value in body.items() if key != "metadata"} | ({"metadata": metadata} if metadata
                                                                              else {})
    return json.dumps(shown, separators=(",", ":"))


def _workloads(count: int) -> str:
    return f"{count} workload" + ("" if count == 1 else "s")


def _path(item: Judged) -> str:
    workload = item.verdict.workload
    return item.served.object_path(workload.namespace, workload.name)


def run(api: KubeApi, options: DriftOptions, snapshot: PolicySnapshot | None = None, *,
        out: TextIO | None = None, ask: Callable[[str], str] = input) -> int:
    """The command: 0 when every chosen workload is in step (or was brought in step), 1 otherwise."""
    out = out or sys.stdout
    try:
        snapshot = snapshot or cluster_snapshot(api, PolicyCompiler())
        judged = chosen(judge_cluster(api, snapshot, options.namespace, options.selector), options.targets)
    except (ApiError, TransportError, LiveError) as error:
        print(f"kubectl placer drift: {error}", file=sys.stderr)
        return 1
    for problem in snapshot.errors:
        print(f"error: {problem}", file=sys.stderr)
    (render_json if options.output == "json" else render_text)(judged, out)
    if options.apply:
        return bring_in_step(api, judged, yes=options.yes, qps=options.qps, out=out, ask=ask)
    return 1 if any(item.verdict.drifted for item in judged) else 0


def add_parser(commands: Any) -> None:
    """Register `kubectl placer drift` on the plugin's subcommands."""
    drift = commands.add_parser(
        "drift", help="workloads out of step with the current policies, and the patch for each",
        description="Judge every workload of the kinds Placer mutates with the admission engine, as if created "
        "now; list those the policies would change, with the patch. --apply writes the patches (dry run first).")
    drift.add_argument("targets", nargs="*", metavar="KIND/NAME", help="only these workloads (in -n)")
    scope = drift.add_mutually_exclusive_group()
    add_scope(scope)
    drift.add_argument("-l", "--selector", metavar="SELECTOR", help="label selector, as kubectl's")
    add_policies(drift, default=None, role="judge with them instead of the cluster's SchedulingPolicies")
    drift.add_argument("--apply", action="store_true", help="bring the workloads in step (starts rollouts)")
    drift.add_argument("--yes", action="store_true", help="with --apply: do not ask for confirmation")
    drift.add_argument("--qps", type=float, default=5.0, metavar="N",
                       help="with --apply: writes per second at most (default: %(default)s)")
    add_output(drift, ["text", "json"], "a table and the patches, or JSON")
    add_cluster(drift)
    drift.set_defaults(run=command)


def command(args: argparse.Namespace) -> int:
    if args.targets and args.all_namespaces:
        print("kubectl placer drift: KIND/NAME is looked up in -n NAMESPACE, not with -A", file=sys.stderr)
        return 2
    if args.qps <= 0:
        print("kubectl placer drift: --qps must be positive", file=sys.stderr)
        return 2
    api = open_api("kubectl placer drift", args)
    if api is None:
        return 1
    namespace = namespace_scope(args)
    snapshot = load_policies(args.policies, required=True) if args.policies else None
    options = DriftOptions(namespace, args.selector, args.targets, args.apply, args.yes, args.qps, args.output)
    try:
        return run(api, options, snapshot)
    finally:
        api.close()

