"""The fake API server answering discovery as the captured kube-apiserver v1.36.2 did
(`tests/fixtures/kube-1.36/`, gang-scheduling gates on or off)."""

import json

from tests.conftest import FIXTURES
from tests.kube.fake_apiserver import FakeApiServer

CAPTURES = FIXTURES / "kube-1.36"


def serve_discovery(apiserver: FakeApiServer, gates: str) -> None:
    """What the captured API server answered (`discovery-gates-<on|off>/`): 404 where it said 404."""
    folder = CAPTURES / f"discovery-{gates}"
    constructed = CAPTURES / "discovery-constructed"
    documents = {
        "/version": folder / "version.json",
        "/apis/scheduling.k8s.io": folder / "apis-scheduling.k8s.io.json",
        "/apis/resource.k8s.io": folder / "apis-resource.k8s.io.json",
        "/apis/scheduling.k8s.io/v1": constructed / "apis-scheduling.k8s.io-v1.json",
        "/apis/resource.k8s.io/v1": constructed / "apis-resource.k8s.io-v1.json",
    }
    if gates == "gates-on":
        documents["/apis/scheduling.k8s.io/v1alpha2"] = folder / "apis-scheduling.k8s.io-v1alpha2.json"
    apiserver.other.clear()
    for path, source in documents.items():
        collection, _, name = path.rpartition("/")
        apiserver.other.setdefault(collection, {})[name] = json.loads(source.read_text())
