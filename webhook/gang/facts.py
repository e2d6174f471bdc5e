"""What the gang action needs to know about the whole workload, not just the template it is applied to.

A gang spans every member template (a SparkApplication's driver and executors, a PyTorchJob's Master and
Workers), so its name and size are workload facts: they are computed once per request, and only when a
policy actually uses `add-gang-labels` (most admissions never pay for them).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webhook.gang.native import not_for_native, scheduling_group
from webhook.gang.native_lifecycle import joins_running
from webhook.gang.native_members import counted_pods, never_counted
from webhook.gang.native_operators import operator_manages, pods_per_gang
from webhook.pods.resources import effective_resources
from webhook.support.typing import JSONObject, as_map
from webhook.workloads import WorkloadKind, controller_owner


@dataclass(frozen=True, slots=True)
class MemberTemplate:
    """One pod template of the workload: its role name, pod count, metadata and per-pod requests."""

    name: str
    members: int | None
    gang_member: bool
    labels: dict[str, Any]
    annotations: dict[str, Any]
    requests: dict[str, float]
    scheduling_group: str | None = None
    """The kube-scheduler group the template already names (`spec.schedulingGroup`), if any."""


@dataclass(frozen=True, slots=True)
class GangFacts:
    kind: str
    name: str
    """The workload's name; for a `generateName` object, which has none yet, the prefix and a per-request
    suffix (every pod of the object carries what Placer wrote, so they share it)."""
    owner: str | None
    """A Pod's controller (ReplicaSet, Job, operator resource); None for other kinds."""
    size: int | None
    """Pods in the gang per the workload's own fields (§6), None when they do not say."""
    templates: tuple[MemberTemplate, ...]
    native_version: str | None = None
    """The PodGroup version kube-scheduler's own gang scheduling is served at (`webhook.gang.native`): "" when
    the API server serves none, None when not known (no cluster connected)."""
    managed: str | None = None
    """Why the workload's pods must not name a group Placer keeps (`native.not_for_native`), if so."""
    job_gangs: bool = False
    """The Job controller keeps a Job's gang from its own `spec.scheduling` (`PolicySnapshot.job_gangs`)."""
    job_spec: JSONObject | None = None
    """A Job's spec, a CronJob's job template's: whether its own gang can be handed to the Job controller."""
    running: str | None = None
    """Why a native gang must not be added to this object now (its pods already run without one:
    `native_lifecycle.joins_running`), if so."""
    per_gang: dict[str, int] | None = None
    """Per member template, its pods in one native gang where the workload holds one gang per replica (a
    JobSet's child Jobs: `native_operators.pods_per_gang`); None where the workload is one gang."""
    counted: dict[str, int] | None = None
    """Per member template, its pods that exist together before any of them must run, where that is not every
    pod of every member (`native_members.counted_pods`: a Spark application's executors, not its driver); a
    gang whose scheduler waits for its members to exist counts only them. None where it is every pod."""
    uncounted: str | None = None
    """Why no pods of the workload last together to be counted (`native_members.never_counted`), if so."""
    derived: dict[Any, Any] = field(default_factory=dict, compare=False)
    """Values derived from these facts (group name and size per flavour and parameters), computed once per
    request however many templates and rules ask: a 1,000-job JobSet asks a thousand times."""

    @property
    def members(self) -> tuple[MemberTemplate, ...]:
        return tuple(template for template in self.templates if template.gang_member)

    def template(self, name: str) -> MemberTemplate | None:
        return next((template for template in self.templates if template.name == name), None)


def gang_facts(kind: WorkloadKind, obj: JSONObject, fallback_name: str, *, unique_suffix: str = "",
               native_version: str | None = None, old: JSONObject | None = None,
               stored: bool = False, job_gangs: bool = False) -> GangFacts:
    """The workload's gang facts. `unique_suffix` (from the request) is appended to a `generateName`: the
    API server has not generated the name yet, and two objects from one `generateName` are two gangs.
    `native_version`: what the cluster serves of kube-scheduler's PodGroups (see `GangFacts`). `old`: the
    object before an UPDATE; `stored`: a stored workload judged as its creation (its pods may run)."""
    templates = []
    for slot in kind.templates(obj):
        raw = slot.read(obj)
        if raw is None:
            continue
        view = slot.view(obj, raw)
        metadata = as_map(view.get("metadata"))
        spec = as_map(view.get("spec"))
        totals, _ = effective_resources(spec)
        templates.append(
            MemberTemplate(
                name=slot.name,
                members=slot.members,
                gang_member=slot.gang_member,
                labels=as_map(metadata.get("labels")),
                annotations=as_map(metadata.get("annotations")),
                requests=totals["requests"],
                scheduling_group=scheduling_group(view),
            )
        )
    metadata = as_map(obj.get("metadata"))
    name = metadata.get("name") or request_name(metadata.get("generateName"), unique_suffix) or fallback_name
    owner = controller_owner(obj) if kind.kind == "Pod" else None
    return GangFacts(kind.kind, str(name), owner, kind.members(obj), tuple(templates), native_version,
                     not_for_native(kind.kind, obj) or operator_manages(kind.kind, obj), job_gangs,
                     _job_spec(kind.kind, obj),
                     joins_running(kind, obj, old, stored=stored), pods_per_gang(kind.kind, obj),
                     counted_pods(kind.kind, obj), never_counted(kind.kind, obj))


def _job_spec(kind: str, obj: JSONObject) -> JSONObject | None:
    if kind == "Job":
        return as_map(obj.get("spec"))
    if kind == "CronJob":
        return as_map(as_map(as_map(obj.get("spec")).get("jobTemplate")).get("spec"))
    return None


def request_name(generate_name: Any, suffix: str) -> str:
    """`generateName` plus a per-request suffix, standing in for the name the API server will generate."""
    prefix = str(generate_name or "").rstrip("-.")
    if not prefix:
        return ""
    return f"{prefix}-{suffix}" if suffix else prefix


class LazyFacts:
    """The gang facts, computed on first call, then the same facts (one request, many rules and templates).
    `value` is None until some rule asked for them."""

    __slots__ = ("_compute", "value")

    def __init__(self, compute: Callable[[], GangFacts]) -> None:
        self._compute = compute
        self.value: GangFacts | None = None

    def __call__(self) -> GangFacts:
        if self.value is None:
            self.value = self._compute()
        return self.value


def lazy(compute: Callable[[], GangFacts]) -> LazyFacts:
    return LazyFacts(compute)
