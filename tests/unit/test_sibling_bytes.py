"""Sibling Pods recognised from their bytes (webhook.admission.sibling_bytes): answered as a decoded sibling
is, only when the review is the decided one's bytes but for its request uid and managedFields times."""

import dataclasses
import logging
from typing import Any
from unittest import mock

import orjson
import pytest

from tests.helpers import snapshot_of
from tests.rsgi_client import AppClient
from tests.unit.test_sibling_cache import POOL, TEAM, sibling
from webhook.admission import pipeline
from webhook.admission.pipeline import admit
from webhook.admission.review import decode_json, parse_review
from webhook.admission.sibling_bytes import plain_holes, proven, shape
from webhook.policy.snapshot import NamespaceInfo, SnapshotHolder
from webhook.server import app as app_module
from webhook.server.app import create_app
from webhook.support.config import Settings
from webhook.support.logs import ADMISSION_LOGGER
from webhook.support.metrics import Metrics
from webhook.workloads import default_workload_table


def parse(body: bytes) -> Any:
    return parse_review(decode_json(body))


class Served:
    """The application under test, counting the reviews it decoded and decided, and its log lines."""

    def __init__(self, holder: SnapshotHolder, **options: Any) -> None:
        self.metrics = Metrics()
        self.client = AppClient(create_app(holder=holder, settings=Settings(), metrics=self.metrics, **options))
        self.decoded = 0
        self.decided = 0
        self.lines: list[logging.LogRecord] = []

    def post(self, body: bytes, path: str = "/mutate") -> dict[str, Any]:
        decided = pipeline.mutate_audited

        def decode(raw: bytes) -> Any:
            self.decoded += 1
            return decode_json(raw)

        def mutate(*args: Any, **kwargs: Any) -> Any:
            self.decided += 1
            return decided(*args, **kwargs)

        handler = logging.Handler()
        handler.emit = self.lines.append  # type: ignore[method-assign]
        logger = logging.getLogger(ADMISSION_LOGGER)
        level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        try:
            with (mock.patch.object(app_module, "decode_json", decode),
                  mock.patch.object(pipeline, "mutate_audited", mutate)):
                reply = self.client.post(path, data=body, content_type="application/json")
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
        assert reply.status_code == 200, reply.data
        return reply.get_json()  # type: ignore[no-any-return]


def wire(index: int, **changes: Any) -> bytes:
    """A sibling's review as the API server writes it: compact JSON, the request uid first."""
    body = sibling(index)
    for key, value in changes.items():
        body["request"]["object"]["metadata"][key] = value
    return orjson.dumps(body)


def fresh(snapshot: Any, body: bytes) -> dict[str, Any]:
    return admit(parse(body), snapshot, default_workload_table()).response


def test_siblings_are_answered_from_their_bytes_as_decoded_ones_are() -> None:
    snapshot = snapshot_of(POOL, namespaces=[TEAM])
    served = Served(SnapshotHolder(snapshot))
    answers = [served.post(wire(index)) for index in range(4)]
    assert (served.decoded, served.decided) == (1, 1)  # the first sibling only
    assert answers == [fresh(snapshot, wire(index)) for index in range(4)]
    decoded = Served(SnapshotHolder(snapshot))  # the same reviews with spaces: decoded and keyed as before
    assert [decoded.post(orjson.dumps(sibling(index), option=orjson.OPT_INDENT_2)) for index in range(4)] == answers
    assert decoded.decoded == 4 and decoded.decided == 1
    assert [line.fields for line in served.lines] == [  # type: ignore[attr-defined]
        {**line.fields, "durationMs": mine.fields["durationMs"]}  # type: ignore[attr-defined]
        for line, mine in zip(decoded.lines, served.lines, strict=True)]
    exposition = served.metrics.render()[0].decode()
    assert 'placer_admission_requests_total{kind="Pod",operation="CREATE",result="patched"} 4.0' in exposition
    assert 'placer_rule_evaluations_total{outcome="applied",policy="pool",rule="from-namespace"} 4.0' in exposition


@pytest.mark.parametrize("other", [
    {"labels": {"app": "web", "pod-template-hash": "abc124"}},  # another revision
    {"generateName": "web-abc124-"},
    {"annotations": {"note": "a\\u0041"}},
])
def test_a_review_that_differs_elsewhere_is_decided(other: dict[str, Any]) -> None:
    snapshot = snapshot_of(POOL, namespaces=[TEAM])
    served = Served(SnapshotHolder(snapshot))
    served.post(wire(1))
    body = wire(2, **other)
    assert served.post(body) == fresh(snapshot, body)
    assert (served.decoded, served.decided) == (2, 2)


def test_holes_hold_only_plain_strings() -> None:
    snapshot = snapshot_of(POOL, namespaces=[TEAM])
    served = Served(SnapshotHolder(snapshot))
    served.post(wire(1))
    escaped = wire(2).replace(b'"uid":"7c1c', b'"uid":"\\u0037c1c', 1)  # the same uid, written with an escape
    assert parse(escaped).uid == parse(wire(2)).uid
    assert served.post(escaped) == fresh(snapshot, wire(2))
    assert served.decoded == 2 and served.decided == 1  # decoded, then answered by its key


def test_a_time_outside_managed_fields_keeps_no_shape() -> None:
    snapshot = snapshot_of(POOL, namespaces=[TEAM])
    served = Served(SnapshotHolder(snapshot))
    for index in range(3):
        served.post(wire(index, annotations={"time": "06:00"}))
    assert (served.decoded, served.decided) == (3, 1)


def test_a_new_snapshot_or_a_relabelled_namespace_is_decided_again() -> None:
    holder = SnapshotHolder(snapshot_of(POOL, namespaces=[TEAM]))
    served = Served(holder)
    served.post(wire(1))
    served.post(wire(2))
    holder.current = snapshot_of(POOL, namespaces=[NamespaceInfo("team-a", {"node-pool": "gpu"})])
    answer = served.post(wire(3))
    assert answer == fresh(holder.current, wire(3)) and (served.decoded, served.decided) == (2, 2)
    labels = {"node-pool": "ml"}
    lookup = mock.Mock(resolve=lambda *_: NamespaceInfo("team-a", dict(labels)))
    snapshot = snapshot_of(POOL, namespaces=[TEAM])
    relabelled = Served(SnapshotHolder(snapshot), namespaces=lookup)
    answers = [relabelled.post(wire(index)) for index in range(2)]
    labels["node-pool"] = "gpu"
    answers.append(relabelled.post(wire(2)))
    assert (relabelled.decoded, relabelled.decided) == (2, 2)
    gpu = NamespaceInfo("team-a", {"node-pool": "gpu"})
    assert answers[2] == admit(parse(wire(2)), snapshot, default_workload_table(),
                               resolve_namespace=lambda *_: gpu).response
    assert answers[2]["response"]["patch"] != answers[1]["response"]["patch"]


def test_the_fail_closed_entry_decodes_every_review() -> None:
    served = Served(SnapshotHolder(snapshot_of(POOL, namespaces=[TEAM])))
    for index in range(3):
        served.post(wire(index), path="/enforce")
    assert served.decoded == 3


ENVELOPE = b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"operation":"CREATE",' \
    b'"kind":{"kind":"Pod"},'


@pytest.mark.parametrize("rest", [
    b'"a\\"uid":"x","uid":"y"}}',  # the first "uid":" ends the key a"uid
    b'"uid":"y","object":{"metadata":{"annotations":{"time":"z"}}}}}',  # a time outside managedFields
    b'"uid":"y","object":{"metadata":{"managedFields":[{"time":"z"}]}}},"time":"z"}',  # one outside the request
])
def test_a_hole_must_be_the_request_uid_or_a_managed_fields_time(rest: bytes) -> None:
    body = ENVELOPE + rest
    holes = plain_holes(body, times=True)
    assert holes is not None
    assert not proven(body, holes, parse(body), parse)


def test_a_shape_is_the_bytes_between_the_holes() -> None:
    body = wire(1)
    holes = plain_holes(body, times=True)
    assert holes is not None and len(holes) == 2
    between, offsets = shape(body, holes)
    other = wire(2)
    assert shape(other, plain_holes(other, times=True) or []) == (between, offsets)
    assert proven(body, holes, parse(body), parse)
    assert plain_holes(body.replace(b'"uid":"7c1c', b'"uid":"7c\\"c', 1), times=True) is None


def test_with_uid_changes_only_the_uid() -> None:
    request = parse(wire(1))
    assert request.with_uid("other") == dataclasses.replace(request, uid="other")
