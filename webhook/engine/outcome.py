"""What the engine answers for one admission: the patch, warnings and a trace per rule and template.

Shared by the selection, the rule run and the fixed-point passes, and read by the pipeline, offline
explain, metrics and logs."""

from dataclasses import dataclass, field
from typing import Literal

from webhook.gang.facts import GangFacts
from webhook.pods.pod_share import ShareDecision
from webhook.policy.model import Policy, Rule
from webhook.support.typing import JSONObject, JSONPatch

DEADLINE_WARNING = "deadline reached before every rule was evaluated; admitted unchanged"

Outcome = Literal["applied", "not-matched", "missing", "error", "skipped", "denied", "audit"]
"""`denied`: the rule matched and an Enforced policy refuses what the object has (`webhook.engine.enforcement`);
`audit`: an Audit policy's rule matched and would have applied (`webhook.admission.audit`; counted, never sent)."""


@dataclass(slots=True)
class RuleTrace:
    """What one rule did to one template, for `placer apply -o explain`, metrics and logs.

    Not frozen: one is made per rule and template on every admission, and a frozen dataclass costs four
    times as much to build. Nothing changes a trace once made."""

    policy: str
    rule: str
    template: str
    outcome: Outcome
    detail: str = ""
    changed: bool = False


AuditVerdict = Literal["would-change", "no-change", "would-deny", "not-evaluated"]
AUDIT_OUTCOME: Outcome = "audit"
"""The outcome metrics and health count for an Audit policy's rule that matched: it would have applied."""


@dataclass(slots=True)
class AuditRecord:
    """What one Audit policy would have done to this request."""

    policy: str
    verdict: AuditVerdict
    patch: JSONPatch = field(default_factory=list)
    """JSON Patch (RFC 6902) on the object as the served policies leave it: what promoting the policy adds."""
    rules: list[str] = field(default_factory=list)
    """The policy's rules that matched and would have changed the object, in order."""
    by_rule: dict[str, JSONPatch] = field(default_factory=dict)
    """For each of `rules` whose action's fields are known, the operations of `patch` it writes (a keyed map's
    value cut to its own keys); the others' part of the patch is not told apart."""
    traces: list[RuleTrace] = field(default_factory=list)
    """The policy's own rule traces, as its evaluation as Advisory made them."""
    warnings: list[str] = field(default_factory=list)
    """What it would have warned of (conflicts, rule errors) that the served answer does not."""
    detail: str = ""
    """For `would-deny`, the denial it would have given; for `not-evaluated`, why not."""


@dataclass(slots=True)
class Mutation:
    """The engine's answer. `denial` set means the request must be refused (failurePolicy: Fail)."""

    patch: JSONPatch = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    traces: list[RuleTrace] = field(default_factory=list)
    denial: str | None = None
    refused: bool = False
    """The denial is an Enforced policy's refusal (explain says "would be refused"), not a rule failure."""
    passed_through: str | None = None
    """Why no policy was evaluated (kind not handled, opted out, owned by a controller...), else None."""
    notes: list[str] = field(default_factory=list)
    """What was left alone and why, short of passing the whole object through (explain and logs)."""
    placed: dict[str, tuple[JSONObject, JSONObject]] = field(default_factory=dict)
    """Per template Placer changed: (the template as it came, as Placer leaves it), for placement checks."""
    volume_outcomes: dict[str, str] = field(default_factory=dict)
    """Per claim of a Pod, what `pin-to-volume-node` did (pinned, pinned-node-gone, node-gone, volume-missing)."""
    gang: GangFacts | None = None
    """The workload's gang facts when a rule labelled it for a gang scheduler (their `derived` holds each
    flavour's group name and size), for the gang capacity check."""
    share: ShareDecision | None = None
    """The capacity class `spot-share` gave a Pod, and why: the pipeline tells the ledger of it."""
    audits: list[AuditRecord] = field(default_factory=list)
    """What each Audit policy that selects the request would have added (`webhook.admission.audit`): recorded in the
    response's auditAnnotations, reports, metrics and explain, never in the patch."""


class DenyRequest(Exception):
    """A rule failed under `failurePolicy: Fail`."""


class DeadlineReached(Exception):
    """The API server's deadline came before every rule was evaluated."""



def rule_id(policy: Policy, rule: Rule) -> str:
    """How warnings and the applied annotation name a rule (made only when a warning needs it)."""
    return f"{policy.name}/{rule.name}"


def unique_messages(messages: list[str]) -> list[str]:
    return list(dict.fromkeys(messages)) if len(messages) > 1 else list(messages)
