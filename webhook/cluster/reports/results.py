"""A rule's result on a workload, in the Policy Working Group's vocabulary (`PolicyReport` results)."""

from dataclasses import dataclass
from typing import Literal

Result = Literal["pass", "fail", "error", "skip"]
RESULTS: tuple[Result, ...] = ("pass", "fail", "error", "skip")


@dataclass(frozen=True, slots=True)
class RuleResult:
    policy: str
    rule: str
    result: Result
    message: str
    refused: bool = False
    """An Enforced policy's rule refuses what the workload has (`fail`, with the refusal as message)."""
