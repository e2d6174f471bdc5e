"""A watch over HTTPS is read from the socket under urllib3 through public names only (`RawBodyConnection`):
the chunked stream's events come out whole, and the fast path is the one taken."""

import json
import threading
from typing import Any

from tests.kube.fake_apiserver import FakeApiServer
from webhook.cluster.client import watch_stream
from webhook.cluster.client.api import KubeApi


def test_a_watch_is_read_past_urllib3_and_its_events_come_whole(
        api: KubeApi, apiserver: FakeApiServer, monkeypatch: Any) -> None:
    taken: list[bool] = []
    original = watch_stream.raw_body

    def recording(response: Any) -> Any:
        raw = original(response)
        taken.append(raw is not None)
        return raw

    monkeypatch.setattr("webhook.cluster.client.api.raw_body", recording)
    apiserver.put_namespace("team-a")
    seen: list[str] = []

    def add_later() -> None:
        apiserver.put_namespace("team-b")

    timer = threading.Timer(0.3, add_later)
    timer.start()
    for line in api.watch_lines("/api/v1/namespaces", {"watch": "1", "resourceVersion": "0",
                                                       "allowWatchBookmarks": "false"}, pace=0.01):
        if not line:
            continue
        event = json.loads(line)
        seen.append(event["object"]["metadata"]["name"])
        if "team-b" in seen:
            break
    timer.join()
    assert taken == [True]
    assert seen[-1] == "team-b" and "team-a" in seen
