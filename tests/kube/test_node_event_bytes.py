"""The byte-level Node-event skip (`webhook.cluster.client.node_events`) on Node events laid out as
kube-apiserver writes them.

No watch stream of Nodes was captured from a kube-apiserver (the captures hold admission requests), so
`tests/fixtures/node-events/lab-ml-1.jsonl` was built by hand from the Go types, exactly as kube-apiserver
v1.34 serializes a watch event: `metav1.WatchEvent` written by the JSON serializer's `json.Encoder`
(staging/src/k8s.io/apimachinery/pkg/runtime/serializer/json/json.go): compact, one event per line, struct
fields in the order of the Go structs (staging/src/k8s.io/api/core/v1/types.go: Node, ObjectMeta, NodeSpec,
Taint, NodeStatus, NodeCondition, NodeSystemInfo, NodeRuntimeHandler, NodeFeatures), map keys (labels,
annotations, capacity, allocatable) sorted as encoding/json sorts them, and a kubelet's managedFields with
its status subresource entry. The node is the 1.36 lab's `lab-ml-1` (node-pool=ml, taint dedicated=gpu).
The events are what a day brings: heartbeats, an image pulled, a label, a device plugin's GPUs, a cordon, a
taint removed, the deletion.

What must hold: an event is dropped undecoded only when the facts Placer reads of the node are those of the
last event applied, and every heartbeat of a known node is dropped.
"""

import io
import json
from pathlib import Path
from typing import Any

from tests.conftest import REPO
from webhook.cluster.client.node_events import UnchangedNodeEvents
from webhook.cluster.client.watch_stream import chunked_lines
from webhook.policy.state.node_facts import node_facts

EVENTS = REPO / "tests/fixtures/node-events/lab-ml-1.jsonl"
WHAT = ["listed", "heartbeat", "image pulled", "labelled", "heartbeat", "device plugin", "cordoned", "heartbeat",
        "taint removed", "deleted"]
DROPPED = {"heartbeat", "image pulled"}


def lines(path: Path = EVENTS) -> list[bytes]:
    return path.read_bytes().splitlines()


def listed(line: bytes) -> tuple[str, dict[str, Any]]:
    """The node as a list item: built-in list items carry no kind or apiVersion."""
    node = json.loads(line)["object"]
    node.pop("kind"), node.pop("apiVersion")
    return node["metadata"]["name"], node


def test_the_fixture_is_laid_out_as_the_go_encoder_writes_it() -> None:
    for line in lines():
        event = json.loads(line)
        assert json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode() == line, "compact, in order"
        node = event["object"]
        assert list(node) == ["kind", "apiVersion", "metadata", "spec", "status"]
        assert list(node["status"])[:2] == ["capacity", "allocatable"]
        for mapping in (node["metadata"]["labels"], node["metadata"]["annotations"], node["status"]["capacity"]):
            assert list(mapping) == sorted(mapping)


def test_a_known_nodes_heartbeats_are_dropped_and_every_change_is_decoded() -> None:
    events = lines()
    unchanged = UnchangedNodeEvents()
    name, node = listed(events[0])
    unchanged.remember(name, node)  # the reflector's list
    applied = node_facts(node)
    decisions = []
    for line, what in zip(events[1:], WHAT[1:], strict=True):
        skipped = unchanged.skip(line, 0, len(line))
        decisions.append((what, skipped))
        facts = node_facts(json.loads(line)["object"])
        if skipped:
            assert facts == applied, f"{what}: dropped although the node's facts changed"
        else:
            applied = facts
    assert decisions == [(what, what in DROPPED) for what in WHAT[1:]]
    assert unchanged.skipped == 4
    assert unchanged.take_version() == "2461", "the newest dropped event's resourceVersion"


def test_the_same_events_in_a_chunked_stream_are_cut_and_dropped_in_place() -> None:
    """As the API server sends them: each event its own HTTP chunk, several in one read."""
    events = lines()
    stream = b"".join(f"{len(line) + 1:x}\r\n".encode() + line + b"\n\r\n" for line in events) + b"0\r\n\r\n"
    unchanged = UnchangedNodeEvents()
    name, node = listed(events[0])
    unchanged.remember(name, node)
    passed = [line for line in chunked_lines(io.BufferedReader(io.BytesIO(stream)), 1 << 20, unchanged.skip) if line]
    assert [json.loads(line)["object"]["metadata"]["resourceVersion"] for line in passed] == [
        "2301", "2371", "2410", "2433", "2470", "2490"]
    assert passed == [line for line, what in zip(events, WHAT, strict=True) if what not in DROPPED]


def test_a_node_first_seen_in_an_event_has_its_next_heartbeat_dropped() -> None:
    """No list to learn from (a node that joined after it): the ADDED event is decoded and learnt from."""
    events = lines()
    unchanged = UnchangedNodeEvents()
    assert not unchanged.skip(events[0], 0, len(events[0]))
    assert unchanged.skip(events[1], 0, len(events[1]))
