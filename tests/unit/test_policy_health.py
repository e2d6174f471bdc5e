"""Policy health from the rules' counts: the window, adding up replicas, the Healthy condition, the status.

The lowest tier for each: the window and the sums are pure; the counts and problems are read from the very
files the workers write (prometheus_client's multiprocess files and `rule_problems`)."""

import dataclasses
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import REPO
from webhook.cluster.health.policy_health import PolicyHealth, RuleCounts, combine, healthy_condition, recent_status
from webhook.cluster.health.recent_counts import RecentCounts, ReplicaWindow
from webhook.cluster.health.replica_reports import decode_window, encode_window, lease_name
from webhook.cluster.health.status import PolicyOutcome, condition_of, desired_status, status_differs
from webhook.engine.configuration import GANG_NOT_ENFORCED, Finding
from webhook.support.counter_file import CounterFile
from webhook.support.metrics import RULE_EVALUATION_LABELS, RULE_EVALUATIONS, RULE_EVALUATIONS_HELP, read_rule_counts
from webhook.support.rule_problems import Problem, RuleProblemFile, read_rule_problems

NOW = datetime(2026, 11, 25, 14, 0, tzinfo=UTC)


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- the window --------------------------------------------------------------------------------------------------

def test_the_window_counts_the_last_15_minutes_in_one_minute_steps() -> None:
    clock, totals = Clock(), {("p", "r", "applied"): 0.0}
    recent = RecentCounts(lambda: dict(totals), dict, clock=clock)
    assert recent.read().counts == {}
    totals[("p", "r", "applied")] = 5.0  # 5 applied in the first minute
    clock.now += 30
    assert recent.read().counts == {("p", "r", "applied"): 5}
    for _ in range(14):  # 14 more minutes, 1 applied in each (just after the minute's copy)
        clock.now += 60
        assert recent.read().counts[("p", "r", "applied")] >= 5
        totals[("p", "r", "applied")] += 1
    assert recent.read().counts == {("p", "r", "applied"): 19}
    clock.now += 60  # 15.5 minutes after the first five: they have left the window
    assert recent.read().counts == {("p", "r", "applied"): 14}
    for _ in range(16):
        clock.now += 60
    assert recent.read().counts == {}, "nothing happened in the last 15 minutes"


def test_what_the_workers_counted_before_the_first_reading_is_in_the_first_window() -> None:
    clock, totals = Clock(), {("p", "r", "applied"): 3.0}
    recent = RecentCounts(lambda: dict(totals), dict, clock=clock)
    assert recent.read().counts == {("p", "r", "applied"): 3}


def test_a_counter_that_went_back_counts_from_zero() -> None:
    clock, totals = Clock(), {("p", "r", "error"): 10.0}
    recent = RecentCounts(lambda: dict(totals), dict, clock=clock)
    clock.now += 60
    recent.read()
    totals[("p", "r", "error")] = 3.0  # the server restarted: its counter files are new
    assert recent.read().counts == {("p", "r", "error"): 3}


def test_problems_older_than_the_window_are_not_reported() -> None:
    clock = Clock()
    problems = {("p", "r", "error"): Problem(clock.now - 10, "old"),
                ("p", "s", "missing"): Problem(clock.now + 5, "new")}
    recent = RecentCounts(dict, lambda: problems, clock=clock)
    assert recent.read().problems == {("p", "s", "missing"): Problem(clock.now + 5, "new")}


# -- the source of truth: the workers' files ---------------------------------------------------------------------

def test_counts_and_problems_are_read_from_every_workers_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    first = CounterFile(str(tmp_path), RULE_EVALUATIONS, RULE_EVALUATIONS_HELP, RULE_EVALUATION_LABELS)
    first.increment_each([("p", "r", "applied"), ("p", "r", "applied"), ("p", "s", "error")])
    first.close()
    monkeypatch.setattr("os.getpid", lambda: 999_999)  # a second worker: a file of its own
    second = CounterFile(str(tmp_path), RULE_EVALUATIONS, RULE_EVALUATIONS_HELP, RULE_EVALUATION_LABELS)
    second.increment_each([("p", "s", "error")])
    second.close()
    assert read_rule_counts(tmp_path) == {("p", "r", "applied"): 2.0, ("p", "s", "error"): 2.0}

    clock = Clock(100.0)
    RuleProblemFile(str(tmp_path), clock=clock).record([("p", "s", "error", "no such key: replica")])
    monkeypatch.setattr("os.getpid", lambda: 999_998)
    clock.now = 200.0
    RuleProblemFile(str(tmp_path), clock=clock).record([("p", "s", "error", "division by zero")])
    assert read_rule_problems(tmp_path) == {("p", "s", "error"): Problem(200.0, "division by zero")}


def test_a_worker_writes_a_rules_first_problem_at_once_and_changes_at_most_once_a_second(tmp_path: Path) -> None:
    clock = Clock(100.0)
    recorder = RuleProblemFile(str(tmp_path), clock=clock)
    recorder.record([("p", "r", "error", "first")])
    clock.now += 0.2
    recorder.record([("p", "r", "error", "second")])
    assert read_rule_problems(tmp_path)[("p", "r", "error")].detail == "first", "not again within the second"
    clock.now += 0.1
    recorder.record([("p", "s", "missing", "no such key: lables")])
    found = read_rule_problems(tmp_path)
    assert found[("p", "s", "missing")].detail.endswith("lables"), "a rule's first problem is written at once"
    assert found[("p", "r", "error")].detail == "second", "and what was held back with it"
    clock.now += 0.1
    recorder.record([("p", "r", "error", "third")])
    assert recorder.pending and read_rule_problems(tmp_path)[("p", "r", "error")].detail == "second"
    clock.now += 1.0
    recorder.record([])  # an admission without problems writes what was held back
    assert not recorder.pending and read_rule_problems(tmp_path)[("p", "r", "error")].detail == "third"


# -- replicas added up -------------------------------------------------------------------------------------------

def two_replicas() -> dict[str, ReplicaWindow]:
    a = ReplicaWindow(1000.0, 100.0, {("p", "gpu", "applied"): 7, ("p", "gpu", "error"): 2, ("p", "typo", "missing"): 9,
                                      ("gone", "r", "applied"): 4},
                      {("p", "gpu", "error"): Problem(900.0, "older error on a")})
    b = ReplicaWindow(1001.0, 100.0, {("p", "gpu", "applied"): 3, ("p", "gpu", "error"): 1,
                                      ("p", "old-rule", "error"): 5},
                      {("p", "gpu", "error"): Problem(950.0, "no such key: replica")})
    return {"placer-a": a, "placer-b": b}


def test_the_counts_of_every_replica_add_up_per_rule() -> None:
    health = combine(two_replicas(), {"p": ["gpu", "typo"]}, 900)
    assert set(health) == {"p"}, "a policy that is gone is not reported"
    p = health["p"]
    assert p.replicas == 2
    assert p.rules["gpu"].counts == {"applied": 10, "error": 3}
    assert p.rules["gpu"].last_error == Problem(950.0, "no such key: replica"), "the latest of any replica"
    assert set(p.rules) == {"gpu", "typo"}, "a rule the policy no longer has is left out"
    assert recent_status(p) == {
        "windowSeconds": 900, "replicas": 2, "evaluated": 13, "applied": 10, "errors": 3, "missingKeys": 9,
        "rules": [
            {"name": "gpu", "evaluated": 13, "applied": 10, "notMatched": 0, "missingKeys": 0, "errors": 3,
             "skipped": 0, "lastError": "no such key: replica"},
            {"name": "typo", "evaluated": 9, "applied": 0, "notMatched": 0, "missingKeys": 9, "errors": 0,
             "skipped": 0},
        ]}


def test_a_reading_survives_its_lease_annotation() -> None:
    reading = two_replicas()["placer-b"]
    assert decode_window(encode_window(reading)) == reading
    assert decode_window("{not json") is None
    assert lease_name("Placer_7f9c.Host") == "placer-rule-counts-placer-7f9c.host"


# -- the Healthy condition ---------------------------------------------------------------------------------------

def test_rule_errors_name_the_rule_its_count_and_last_error() -> None:
    health = combine(two_replicas(), {"p": ["gpu", "typo"]}, 900)["p"]
    status, reason, message = healthy_condition("p", health, [])
    assert (status, reason) == ("False", "RuleErrors")
    assert message.startswith("rule p/gpu: 3 error(s) in the last 15m; last: no such key: replica")
    assert "rule p/typo: 9 missing key(s) and never applied in the last 15m" in message


def test_missing_keys_alone_are_flagged_only_for_a_rule_that_never_applied() -> None:
    never = PolicyHealth(900, 1, {"typo": RuleCounts({"missing": 4}, last_missing=Problem(1, "no such key: lables"))})
    assert healthy_condition("p", never, [])[:2] == ("False", "MissingKeys")
    assert healthy_condition("p", never, [])[2].endswith("last: no such key: lables")
    failing = PolicyHealth(900, 1, {"r": RuleCounts({"missing": 4, "error": 1})})
    assert healthy_condition("p", failing, [])[2] == "rule p/r: 1 error(s) in the last 15m", "the rule named once"
    sometimes = PolicyHealth(900, 1, {"r": RuleCounts({"missing": 4, "applied": 1})})
    assert healthy_condition("p", sometimes, [])[:2] == ("True", "NoProblems")


def test_configuration_findings_and_no_counts() -> None:
    finding = Finding("gang", GANG_NOT_ENFORCED, "rule p/gang: coscheduling gang on default-scheduler ...")
    assert healthy_condition("p", None, [finding]) == ("False", GANG_NOT_ENFORCED, finding.message)
    assert healthy_condition("p", None, [])[:2] == ("Unknown", "NoCounts")
    quiet = PolicyHealth(900, 2, {"r": RuleCounts({"not-matched": 12})})
    assert healthy_condition("p", quiet, []) == (
        "True", "NoProblems",
        "no rule errors or missing keys in the last 15m: 12 evaluation(s) counted on 2 replica(s)")


# -- the status written ------------------------------------------------------------------------------------------

def outcome() -> PolicyOutcome:
    return PolicyOutcome(3, 2, (), 3, ("gpu", "typo"))


def test_the_status_carries_both_conditions_and_the_recent_counts() -> None:
    health = combine(two_replicas(), {"p": ["gpu", "typo"]}, 900)["p"]
    status = desired_status(outcome(), None, NOW, health=health, policy="p")
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Healthy"]
    healthy = condition_of(status, "Healthy")
    assert healthy is not None and healthy["status"] == "False" and healthy["observedGeneration"] == 3
    assert status["recent"]["errors"] == 3
    assert not status_differs(status, desired_status(outcome(), status, NOW, health=health, policy="p"))


def test_the_healthy_transition_time_moves_only_when_its_status_flips() -> None:
    health = combine(two_replicas(), {"p": ["gpu", "typo"]}, 900)["p"]
    first = desired_status(outcome(), None, NOW, health=health, policy="p")
    later = NOW.replace(hour=15)
    more = dataclasses.replace(health, replicas=3)
    same = desired_status(outcome(), first, later, health=more, policy="p")
    assert condition_of(same, "Healthy")["lastTransitionTime"] == "2026-11-25T14:00:00Z"  # type: ignore[index]
    assert status_differs(first, same), "the counts changed: written"
    healed = desired_status(outcome(), first, later, health=PolicyHealth(900, 2, {}), policy="p")
    assert condition_of(healed, "Healthy")["lastTransitionTime"] == "2026-11-25T15:00:00Z"  # type: ignore[index]


def test_a_new_leader_that_has_not_read_the_counts_keeps_what_the_status_says_of_them() -> None:
    health = combine(two_replicas(), {"p": ["gpu", "typo"]}, 900)["p"]
    written = desired_status(outcome(), None, NOW, health=health, policy="p")
    kept = desired_status(outcome(), written, NOW.replace(hour=15), policy="p", health_known=False)
    assert not status_differs(written, kept)
    assert condition_of(desired_status(outcome(), None, NOW, policy="p", health_known=False), "Healthy") == {
        "type": "Healthy", "status": "Unknown", "reason": "NoCounts", "observedGeneration": 3,
        "message": "no replica of Placer has reported its rule counts yet",
        "lastTransitionTime": "2026-11-25T14:00:00Z"}


def crd_version() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "deploy/base/crd.yaml").read_text())
    return dict(crd["spec"]["versions"][0])


def _plain(schema: Any) -> Any:
    """The CRD schema as JSON Schema (the x-kubernetes extensions dropped)."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


def test_the_status_written_fits_the_crd_schema_and_fills_every_printer_column() -> None:
    version = crd_version()
    health = combine(two_replicas(), {"p": ["gpu", "typo"]}, 900)["p"]
    status = desired_status(outcome(), None, NOW, health=health, policy="p")
    schema = _plain(version["schema"]["openAPIV3Schema"]["properties"]["status"])
    jsonschema.validate(status, schema, format_checker=jsonschema.FormatChecker())
    obj = {"metadata": {"creationTimestamp": "2026-11-25T13:00:00Z"}, "spec": {"priority": 100}, "status": status}
    values = {column["name"]: _json_path(obj, column["jsonPath"]) for column in version["additionalPrinterColumns"]}
    assert values == {"Priority": 100, "Rules": 2, "Ready": "True", "Healthy": "False", "Reason": "RuleErrors",
                      "Seen": 13, "Applied": 10, "Errors": 3, "Missing": 9, "Window": 900,
                      "Age": "2026-11-25T13:00:00Z"}


def _json_path(obj: Any, path: str) -> Any:
    """The two forms the columns use: `.a.b` and `.a[?(@.type=="X")].b` (kubectl's JSONPath)."""
    value = obj
    for name, wanted in re.findall(r'\.(\w+)(?:\[\?\(@\.type=="(\w+)"\)\])?', path):
        value = value[name]
        if wanted:
            value = next(c for c in value if c["type"] == wanted)
    return value
