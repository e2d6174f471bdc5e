"""The policy set after a change: the cluster's policies, with the given ones added or replacing the
same-named ones, and the deleted ones gone. Names are what a SchedulingPolicy is known by (it is
cluster-scoped), so a file's policy of an existing name is that policy's next version, as `kubectl apply`
of it would make it."""

from collections.abc import Sequence
from dataclasses import dataclass

from webhook.policy.snapshot import PolicySnapshot


class ChangeError(Exception):
    """The change cannot be made as asked (a deleted policy that does not exist, one given and deleted)."""


@dataclass(frozen=True, slots=True)
class PolicyChange:
    before: PolicySnapshot
    after: PolicySnapshot
    added: tuple[str, ...]
    replaced: tuple[str, ...]
    """Given policies of an existing name whose spec differs (one given as it is changes nothing)."""
    deleted: tuple[str, ...]

    def describe(self) -> str:
        """`adds a, replaces b, deletes c`, as the reports' first line says it."""
        parts = [f"{verb} {', '.join(names)}" for verb, names in
                 (("adds", self.added), ("replaces", self.replaced), ("deletes", self.deleted)) if names]
        return "; ".join(parts) or "changes no policy"


def change_policies(before: PolicySnapshot, given: PolicySnapshot, deleted: Sequence[str] = ()) -> PolicyChange:
    """`before` with `given`'s policies added or replacing the same-named ones, and `deleted` removed."""
    existing = {policy.name for policy in before.policies}
    given_names = [policy.name for policy in given.policies]
    for name in deleted:
        if name not in existing:
            raise ChangeError(f"--delete {name}: there is no SchedulingPolicy {name} to delete "
                              f"(there are: {', '.join(sorted(existing)) or 'none'})")
        if name in given_names:
            raise ChangeError(f"--delete {name}: policy {name} is also among the given policies")
    gone = set(given_names) | set(deleted)
    kept = [policy for policy in before.policies if policy.name not in gone]
    after = PolicySnapshot.build(
        [*kept, *given.policies], before.namespaces, before.errors, before.environment,
        ready=before.ready, default_priority_class=before.default_priority_class,
        pod_groups_served=before.pod_groups_served, native_gang_version=before.native_gang_version,
        job_gangs=before.job_gangs)
    specs = {policy.name: policy.document.get("spec") for policy in before.policies}
    replaced = tuple(policy.name for policy in given.policies
                     if policy.name in existing and policy.document.get("spec") != specs[policy.name])
    return PolicyChange(before, after, tuple(name for name in given_names if name not in existing), replaced,
                        tuple(dict.fromkeys(deleted)))
