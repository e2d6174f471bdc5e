"""Which kinds Placer mutates, where their pod templates are, and how many pods they run.

May import pods and support.
"""

from webhook.workloads.builtin import JOB_NAME_LABEL, builtin_kinds, controller_owner, controller_reference
from webhook.workloads.operators import operator_kinds
from webhook.workloads.slots import TemplateSlot, WorkloadKind
from webhook.workloads.spark import spark_application_kind

__all__ = [
    "JOB_NAME_LABEL",
    "TemplateSlot",
    "WorkloadKind",
    "WorkloadTable",
    "all_kinds",
    "builtin_kinds",
    "controller_owner",
    "controller_reference",
    "default_workload_table",
]


def all_kinds() -> list[WorkloadKind]:
    """Built-in kinds and operator resources: the rows of the MutatingWebhookConfiguration too."""
    return [*builtin_kinds(), spark_application_kind(), *operator_kinds()]


class WorkloadTable:
    """Lookup by (API group, kind). Versions are not part of the key: `matchPolicy: Equivalent`."""

    def __init__(self, kinds: list[WorkloadKind]) -> None:
        self._kinds = {(kind.group, kind.kind): kind for kind in kinds}

    def lookup(self, group: str, kind: str) -> WorkloadKind | None:
        return self._kinds.get((group, kind))


def default_workload_table() -> WorkloadTable:
    return WorkloadTable(all_kinds())
