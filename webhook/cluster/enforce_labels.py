"""The `placer.dev/enforce=true` namespace label: where the fail-closed webhook entry sends requests.

The shipped MutatingWebhookConfiguration has a second entry, `enforce.placer.dev`, with `failurePolicy:
Fail` and no objectSelector, whose namespaceSelector selects this label (deploy/base/webhooks.yaml). The
API server can select namespaces only by label, and an Enforced policy selects them by its own
namespaceSelector, so the controller (the leader only) keeps the label on exactly the namespaces some
Enforced policy selects: it adds it where one does and removes it where none does any more.

A policy's selector is matched against the namespace's labels without this label, so a selector that reads
it cannot make the label hold itself up. kube-system, kube-public, kube-node-lease and placer-system are never
labelled (`NEVER_ENFORCED_NAMESPACES`): the webhook entry leaves them out anyway, and Placer and the control
plane must always be able to restart. An Enforced policy without a namespaceSelector does not compile (it
would have put the label on every other namespace without saying so); `namespaceSelector: {}` says it.
"""

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.cluster.client.reflector import StoreSink
from webhook.engine.enforcement import ENFORCE_LABEL
from webhook.policy.exemptions import NEVER_ENFORCED_NAMESPACES
from webhook.support.selectors import LabelSelector

log = logging.getLogger(__name__)

NAMESPACES_PATH = "/api/v1/namespaces"
NEVER_LABELLED = frozenset(NEVER_ENFORCED_NAMESPACES)


def enforced_selectors(documents: Iterable[Mapping[str, Any]]) -> list[LabelSelector | None]:
    """The namespaceSelector of every Enforced policy among the serving documents (None: every namespace,
    which only a document that did not compile can ask for: it selects nothing, as it holds nothing)."""
    selectors: list[LabelSelector | None] = []
    for document in documents:
        spec = document.get("spec")
        if not isinstance(spec, dict) or spec.get("enforcement") != "Enforced":
            continue
        raw = spec.get("namespaceSelector")
        selector = LabelSelector.from_object(raw) if raw is not None else None
        if selector is None:
            continue  # a serving document compiled, so this does not happen; select nothing rather than all
        selectors.append(selector)
    return selectors


def wanted_label(name: str, labels: Mapping[str, str], selectors: list[LabelSelector | None]) -> bool:
    """Whether the namespace must carry the label: some Enforced policy selects it."""
    if name in NEVER_LABELLED:
        return False
    own = {key: value for key, value in labels.items() if key != ENFORCE_LABEL}
    own.setdefault("kubernetes.io/metadata.name", name)
    return any(selector is None or selector.matches(own) for selector in selectors)


def changes(namespaces: Mapping[str, Mapping[str, str]], selectors: list[LabelSelector | None]) -> dict[str, bool]:
    """Per namespace (name -> labels) whose label must change: True to add it, False to remove it."""
    found = {}
    for name, labels in namespaces.items():
        has = labels.get(ENFORCE_LABEL) == "true"
        wanted = wanted_label(name, labels, selectors)
        if wanted != has:
            found[name] = wanted
    return found


class EnforceLabels:
    """Keeps the label in step with the Enforced policies. It learns the namespaces' labels by standing in
    front of the controller's namespace sink (`sink`), so the namespaces are watched once."""

    def __init__(self, api: KubeApi, wake: Callable[[], None] = lambda: None) -> None:
        self._api = api
        self._wake = wake
        self._lock = threading.Lock()
        self._labels: dict[str, dict[str, str]] | None = None
        self._listing: dict[str, dict[str, str]] = {}

    def sink(self, inner: StoreSink) -> StoreSink:
        """A sink that records each namespace's labels and hands every call on to `inner`."""
        return _LabelRecorder(self, inner)

    def reconcile(self, documents: Iterable[Mapping[str, Any]]) -> int:
        """Add or remove the label where it is wrong; returns the namespaces changed. A failed write is
        retried on the next round (the namespace watch still shows the old labels)."""
        with self._lock:
            labels = dict(self._labels) if self._labels is not None else None
        if labels is None:
            return 0
        written = 0
        for name, add in sorted(changes(labels, enforced_selectors(documents)).items()):
            body = {"metadata": {"labels": {ENFORCE_LABEL: "true" if add else None}}}
            try:
                self._api.merge_patch(f"{NAMESPACES_PATH}/{quote(name, safe='')}", body)
            except (ApiError, TransportError) as error:
                log.warning("namespace %s: could not %s label %s: %s", name, "add" if add else "remove",
                            ENFORCE_LABEL, error)
                continue
            log.info("namespace %s: %s %s=true", name, "labelled" if add else "unlabelled", ENFORCE_LABEL)
            written += 1
        return written

    def _record(self, name: str, obj: Mapping[str, Any], *, listing: bool) -> None:
        metadata = obj.get("metadata")
        raw = metadata.get("labels") if isinstance(metadata, dict) else None
        labels = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
        with self._lock:
            if listing:
                self._listing[name] = labels
            elif self._labels is not None and self._labels.get(name) != labels:
                self._labels = {**self._labels, name: labels}
            else:
                return
        if not listing:
            self._wake()

    def _listed(self) -> None:
        with self._lock:
            self._labels, self._listing = self._listing, {}
        self._wake()

    def _removed(self, name: str) -> None:
        with self._lock:
            if self._labels is not None and name in self._labels:
                self._labels = {key: value for key, value in self._labels.items() if key != name}


class _LabelRecorder:
    def __init__(self, owner: EnforceLabels, inner: StoreSink) -> None:
        self._owner = owner
        self._inner = inner

    def keep(self, name: str, obj: Mapping[str, Any]) -> Any:
        self._owner._record(name, obj, listing=True)
        return self._inner.keep(name, obj)

    def replace(self, store: Mapping[str, Any]) -> None:
        self._owner._listed()
        self._inner.replace(store)

    def upsert(self, name: str, obj: Mapping[str, Any]) -> None:
        self._owner._record(name, obj, listing=False)
        self._inner.upsert(name, obj)

    def remove(self, name: str) -> None:
        self._owner._removed(name)
        self._inner.remove(name)
