"""A rule's result on a workload, in the Policy Working Group's vocabulary (`PolicyReport` results)."""

from dataclasses import dataclass
from typing import Literal

Result = Literal["pass", "fail", "warn", "error", "skip"]
RESULTS: tuple[Result, ...] = ("pass", "fail", "warn", "error", "skip")
"""`warn`: an Audit policy's rule would change the workload (`webhook.cluster.reports.audit_results`)."""


@dataclass(frozen=True, slots=True)
class RuleResult:
    policy: str
    rule: str
    result: Result
    message: str
    refused: bool = False
    """An Enforced policy's rule refuses what the workload has (`fail`, with the refusal as message)."""
    properties: tuple[tuple[str, str], ...] = ()
    """The result's `properties` (a map of strings in the report): an audited rule's would-be patch."""
