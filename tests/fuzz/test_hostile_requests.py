"""Hostile AdmissionReviews get a precise 4xx or a normal answer: never a 5xx, never a crash.

Two generators: seeded mutation of the real captures (`hostile.py`: wrong types, invalid quantities,
truncated and bit-flipped JSON, 100,000-level nesting, 5 MB strings), and hypothesis, which puts arbitrary
JSON values at any path of a capture and shrinks a failure to its smallest form.

The in-process variant sends 10,000 mutated requests to the application (the same code the workers run,
whose catch-all turns any uncaught exception into a 500, which is what is checked). The
end-to-end variant sends a share of them to the real server over TLS and checks that no worker died.
"""

import http.client
import json
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import fixture_request
from tests.e2e.server import RunningServer, copy_policies, running_server
from tests.fuzz.hostile import encode, hostile_bodies, paths, replace, seeds
from tests.helpers import snapshot_of
from tests.rsgi_client import AppClient
from webhook.policy.snapshot import NamespaceInfo, SnapshotHolder
from webhook.server.app import create_app
from webhook.support.config import Settings
from webhook.support.metrics import Metrics

REPO = Path(__file__).resolve().parent.parent.parent
FUZZ_CASES = 10_000


def _app() -> Any:
    texts = [path.read_text() for path in sorted((REPO / "policies").glob("*.yaml")) if "SchedulingPolicy" in
             path.read_text()]
    snapshot = snapshot_of(*texts, namespaces=[NamespaceInfo("team-a", {"environment": "production"})])
    return AppClient(create_app(holder=SnapshotHolder(snapshot), settings=Settings(), metrics=Metrics()))


def test_ten_thousand_hostile_requests_get_no_5xx_and_the_next_valid_one_is_answered() -> None:
    client = _app()
    statuses: dict[int, int] = {}
    for label, body in hostile_bodies(FUZZ_CASES):
        response = client.post("/mutate?timeout=5s", data=body, content_type="application/json")
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert response.status_code < 500, (label, response.status_code, response.get_data()[:300])
        if response.status_code == 200:
            review = response.get_json()
            assert isinstance(review["response"]["allowed"], bool), label
        else:
            assert response.get_json()["error"], label
    assert sum(statuses.values()) == FUZZ_CASES
    assert statuses.get(400, 0) > 1_000 and statuses.get(200, 0) > 1_000, statuses
    valid = fixture_request("deployment-create-dryrun")
    answer = client.post("/mutate", data=json.dumps(valid), content_type="application/json")
    assert answer.status_code == 200 and answer.get_json()["response"]["uid"] == valid["request"]["uid"]


@pytest.mark.e2e
def test_hostile_requests_over_tls_leave_every_worker_running(tmp_path: Path, certificates: Any) -> None:
    with running_server(tmp_path, certificates, policies=copy_policies(tmp_path)) as server:
        workers = set(server.worker_pids())
        for label, body in hostile_bodies(300, seed=99):
            status = _post(server, body)
            assert status < 500, (label, status)
        assert set(server.worker_pids()) == workers, "no worker was restarted"
        valid = fixture_request("deployment-create-dryrun")
        review = server.post("/mutate", json=valid).json()
        assert review["response"]["uid"] == valid["request"]["uid"] and review["response"]["allowed"] is True


def _post(server: RunningServer, body: bytes) -> int:
    """One request on its own connection, closed deterministically (no socket left to the GC)."""
    parts = urlsplit(server.url)
    context = ssl.create_default_context(cafile=str(server.ca))
    connection = http.client.HTTPSConnection(str(parts.hostname), parts.port, context=context, timeout=30)
    try:
        connection.request("POST", "/mutate?timeout=5s", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()



@pytest.mark.parametrize("literal,expected", [
    (b"1" + b"0" * 400, 400),  # beyond a double: refused, not a crash
    (b"9223372036854775808", 200),  # beyond int64: read as a float, CEL cannot hold it as an int
    (b"NaN", 200),
])
def test_numbers_beyond_what_cel_can_hold(literal: bytes, expected: int) -> None:
    review = fixture_request("deployment-create-dryrun")
    review["request"]["object"]["spec"]["replicas"] = "__N__"
    body = json.dumps(review).encode().replace(b'"__N__"', literal)
    response = _app().post("/mutate", data=body, content_type="application/json")
    assert response.status_code == expected, response.get_data()[:200]
    if expected == 400:
        assert "integer out of range" in response.get_json()["error"]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
BASES = seeds()
PLACES = [(index, path) for index, base in enumerate(BASES) for path in paths(base)]


@pytest.fixture(scope="module")
def app_client() -> Any:
    return _app()


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(place=st.sampled_from(PLACES), value=JSON_VALUES)
def test_any_json_value_anywhere_in_a_real_request_gets_no_5xx(
    app_client: Any, place: tuple[int, tuple[Any, ...]], value: Any
) -> None:
    """Hypothesis puts arbitrary JSON (shrinking to the smallest culprit) at any path of a captured request."""
    index, path = place
    body = encode(replace(BASES[index], path, value))
    response = app_client.post("/mutate?timeout=5s", data=body, content_type="application/json")
    assert response.status_code < 500, (path, value, response.get_data()[:300])
    assert response.status_code == 200 or response.get_json()["error"]

