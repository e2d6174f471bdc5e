"""What a policy change does, gathered for printing: the workloads whose result changes, the totals, the
test suites it breaks, and the exit code `--fail-on` asks for."""

from dataclasses import dataclass, field
from typing import Literal

from webhook.change.workload_change import WorkloadChange

FailOn = Literal["stranded", "change", "never"]
FAIL_ON: tuple[FailOn, ...] = ("stranded", "change", "never")


@dataclass(slots=True)
class ChangeReport:
    change: str
    """The change, as `PolicyChange.describe` says it (and where the old policies come from, for a diff)."""
    noun: str
    """What was judged: `workload` (live) or `manifest`."""
    judged: int
    """Workloads judged (those Placer leaves alone, as a Deployment's ReplicaSets and Pods, not counted)."""
    changes: list[WorkloadChange] = field(default_factory=list)
    broken_suites: list[str] = field(default_factory=list)
    """`suite: case`, for each test case that passes with the old policies and fails with the new."""
    notes: list[str] = field(default_factory=list)
    """What could not be checked, and why."""

    @property
    def rollouts(self) -> int:
        return sum(1 for item in self.changes if item.rollout is not None and item.rollout.starts)

    @property
    def stranded(self) -> int:
        return sum(1 for item in self.changes if item.stranded)

    def summary(self) -> str:
        """`3 workloads change, 2 would roll out, 1 would be stranded (of 40 workloads)`."""
        count = len(self.changes)
        parts = [f"{count} {self.noun}{'' if count == 1 else 's'} change{'s' if count == 1 else ''}"]
        if self.noun == "workload":
            parts.append(f"{self.rollouts} would roll out")
        parts.append(f"{self.stranded} would be stranded")
        if self.broken_suites:
            parts.append(f"{len(self.broken_suites)} test case{'' if len(self.broken_suites) == 1 else 's'} "
                         "would break")
        return ", ".join(parts) + f" (of {self.judged} {self.noun}{'' if self.judged == 1 else 's'})"

    def exit_code(self, fail_on: FailOn) -> int:
        """1 when what `fail_on` names happens (a broken test case counts as either), else 0."""
        if fail_on == "never":
            return 0
        if self.broken_suites or self.stranded:
            return 1
        return 1 if fail_on == "change" and self.changes else 0
