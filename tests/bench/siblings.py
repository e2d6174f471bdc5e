"""A ReplicaSet-shaped stream of sibling Pod reviews: what the API server sends as a ReplicaSet scales up.

Each Pod of a ReplicaSet reaches the webhook as the captured one (tests/fixtures/requests/
pod-rs-owned-generatename-create-dryrun.json: `generateName`, the ReplicaSet's labels and owner reference),
with a request uid of its own and the time the controller wrote it in `managedFields`: the two fields that tell
siblings apart (webhook/admission/sibling_cache.py).
"""

import copy

import orjson

from tests.conftest import fixture_request


def replicaset_pods(count: int, *, start: int = 0) -> list[bytes]:
    """`count` encoded AdmissionReviews of sibling Pods, numbered from `start`."""
    template = fixture_request("pod-rs-owned-generatename-create-dryrun")
    made = []
    for index in range(start, start + count):
        review = copy.deepcopy(template)
        review["request"]["uid"] = f"00000000-0000-4000-8000-{index:012d}"
        for entry in review["request"]["object"]["metadata"].get("managedFields", []):
            entry["time"] = f"2026-11-26T{index // 3600 % 24:02d}:{index // 60 % 60:02d}:{index % 60:02d}Z"
        made.append(orjson.dumps(review))
    return made
