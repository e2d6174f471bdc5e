"""Reinvocation after another webhook changed the object, from the captured reactions (kube-apiserver v1.34).

`tests/fixtures/reactions/k-*.txt` record what kube-apiserver did with `reinvocationPolicy: IfNeeded` and a
second webhook (`zz-second-labeler`) that adds a label: the first webhook is called, then the second, then
the first again with the second's change (and the first's own earlier patch) in `object`, under a new
`request.uid` and nothing else telling it is a reinvocation (`analysis/reinvocation.txt`). The request files
those calls were saved as were not kept, so each call is rebuilt from the reaction: the captured envelope of
the same API server (a Pod or Deployment create, dry run), the call's uid, operation and name, and the
object kubectl printed (what was admitted: the second webhook's label and the first's patch included), with
what the API server sets after admission (uid, creationTimestamp, generation, a Pod's status) taken away;
the first call's object is that minus every patch the reaction recorded.

Placer stands where the capture webhook stood: its answers to the first call, then to the reinvocation the
API server makes from its own patch and the second webhook's, are checked.
"""

import base64
import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import FIXTURES, fixture_request
from tests.helpers import snapshot_of
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.workloads import default_workload_table

REACTIONS = FIXTURES / "reactions"
CALL = re.compile(r"^### call (\d+): POST (\S+?)\?timeout=5s\s+(\w+) (\w+) ([\w-]+)/([\w-]+) dryRun=(\w+) uid=(\S+)$")
ENVELOPES = {"Pod": "pod-bare-create-dryrun", "Deployment": "deployment-create-dryrun"}
GPU = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: gpu}
spec:
  rules:
  - name: gpu-pool
    condition: "pod.spec.containers.exists(c, 'nvidia.com/gpu' in c.?resources.?limits.orValue({}))"
    action: add-node-selector
    parameters: {node-pool: gpu}
  - name: gpu-toleration
    condition: "pod.spec.containers.exists(c, 'nvidia.com/gpu' in c.?resources.?limits.orValue({}))"
    action: add-toleration
    parameters: {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
"""
AFTER_LABELLER = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: labelled}
spec:
  rules:
  - name: seen-by-labeller
    condition: "object.metadata.?labels['second-webhook'].orValue('') == 'added'"
    action: add-annotations
    parameters: {example.com/labelled: "yes"}
"""


@dataclass(frozen=True)
class Call:
    number: int
    path: str
    operation: str
    kind: str
    namespace: str
    name: str
    dry_run: bool
    uid: str
    patch: list[dict[str, Any]]
    """What the webhook answered, decoded (empty: no patch)."""


def calls(reaction: Path) -> list[Call]:
    """The webhook calls a reaction recorded, in order, each with the patch it was answered."""
    found: list[Call] = []
    lines = reaction.read_text().splitlines()
    for index, line in enumerate(lines):
        match = CALL.match(line)
        if not match:
            continue
        end = next((i for i in range(index + 1, len(lines)) if lines[i].startswith("## ") or CALL.match(lines[i])),
                   len(lines))
        section = lines[index + 1:end]
        patch: list[dict[str, Any]] = []
        if "response.patch, base64-decoded:" in section:
            start = section.index("response.patch, base64-decoded:") + 1
            patch = json.loads("\n".join(section[start:]))
        number, path, operation, kind, namespace, name, dry_run, uid = match.groups()
        found.append(Call(int(number), path, operation, kind, namespace, name, dry_run == "True", uid, patch))
    return found


def admitted_object(reaction: Path) -> dict[str, Any]:
    """The object as admitted (kubectl's -o yaml of the dry run), without what the API server sets after."""
    text = reaction.read_text()
    output = text.split("## kubectl output (stdout+stderr)\n", 1)[1].split("\n## ", 1)[0]
    obj: dict[str, Any] = yaml.safe_load(output)
    for key in ("uid", "creationTimestamp", "generation", "resourceVersion"):
        obj["metadata"].pop(key, None)
    if obj["kind"] == "Pod":
        obj["status"] = {}  # phase and qosClass are set by the Pod strategy's PrepareForCreate, after admission
    return obj


def without(obj: dict[str, Any], patches: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """`obj` before the recorded patches (each only adds a label or an annotation)."""
    before = copy.deepcopy(obj)
    for patch in patches:
        for op in patch:
            assert op["op"] == "add", op
            parent, _, key = op["path"].rpartition("/")
            container = jsonpatch.JsonPointer(parent).resolve(before)
            del container[key.replace("~1", "/").replace("~0", "~")]
    return before


def review(call: Call, obj: dict[str, Any]) -> dict[str, Any]:
    body = fixture_request(ENVELOPES[call.kind])
    request = body["request"]
    request.update(uid=call.uid, operation=call.operation, namespace=call.namespace, name=call.name,
                   dryRun=call.dry_run, object=obj, oldObject=None)
    return body


def answer(body: dict[str, Any], *policies: str) -> dict[str, Any]:
    admission = admit(parse_review(body), snapshot_of(*policies), default_workload_table())
    return dict(admission.response["response"])


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(base64.b64decode(response["patch"])) if "patch" in response else []


@pytest.mark.parametrize("name", ["k-reinvocation-ifneeded-pod", "k2-reinvocation-ifneeded-deployment",
                                  "k3-reinvocation-ifneeded-first-also-patches"])
def test_the_reinvocation_after_another_webhooks_label_gets_no_patch(name: str) -> None:
    reaction = REACTIONS / f"{name}.txt"
    first, second, again = calls(reaction)
    assert (first.path, second.path, again.path) == ("/mutate", "/mutate-second", "/mutate")
    assert len({first.uid, second.uid, again.uid}) == 3, "a new uid per call, nothing else marks a reinvocation"
    admitted = admitted_object(reaction)
    original = without(admitted, [first.patch, second.patch])

    reply = answer(review(first, original), GPU)
    assert reply["uid"] == first.uid and reply["allowed"] is True
    ours = patch_of(reply)
    assert ours, "the first call is patched"
    # What the API server sends back: the object with Placer's patch and the second webhook's applied.
    reinvoked = jsonpatch.apply_patch(jsonpatch.apply_patch(original, ours), second.patch)
    assert reinvoked["metadata"]["labels"]["second-webhook"] == "added"
    reply_again = answer(review(again, reinvoked), GPU)
    assert reply_again["uid"] == again.uid and reply_again["allowed"] is True
    assert "patch" not in reply_again and not reply_again.get("warnings"), "idempotent: nothing more to do"

    # The reinvocation as captured (its object is what was admitted: the capture webhook patched nothing, or
    # only its own annotation, again): Placer answers it as it answered the first call, the other webhook's
    # label changing nothing its rules read.
    captured_again = answer(review(again, admitted), GPU)
    assert patch_of(captured_again) == ours


def test_a_rule_reading_what_the_other_webhook_wrote_applies_at_the_reinvocation() -> None:
    """What reinvocation is for: the second webhook's label makes a rule true that was false at first."""
    reaction = REACTIONS / "k-reinvocation-ifneeded-pod.txt"
    first, second, again = calls(reaction)
    original = without(admitted_object(reaction), [first.patch, second.patch])
    ours = patch_of(answer(review(first, original), GPU, AFTER_LABELLER))
    assert not any("labelled" in op["path"] or "labelled" in json.dumps(op.get("value")) for op in ours)
    reinvoked = jsonpatch.apply_patch(jsonpatch.apply_patch(original, ours), second.patch)
    now = patch_of(answer(review(again, reinvoked), GPU, AFTER_LABELLER))
    result = jsonpatch.apply_patch(reinvoked, now)
    assert result["metadata"]["annotations"]["example.com/labelled"] == "yes"
    assert result["spec"]["nodeSelector"] == reinvoked["spec"]["nodeSelector"], "the earlier patch stays as it was"


def test_with_reinvocation_never_placer_is_called_once() -> None:
    """`reinvocationPolicy: Never` (k4): the second webhook's change never reaches Placer."""
    assert [call.path for call in calls(REACTIONS / "k4-reinvocation-never-pod.txt")] == ["/mutate", "/mutate-second"]
