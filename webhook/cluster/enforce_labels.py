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
from webhook.policy.snapshot import with_name_label
from webhook.support.selectors import LabelIndex, LabelSelector

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
    own = selected_labels(name, labels)
    return any(selector is None or selector.matches(own) for selector in selectors)


def selected_labels(name: str, labels: Mapping[str, str]) -> dict[str, str]:
    """What a policy's selector is matched against: the namespace's labels but this one, and its name label
    (the API server sets `kubernetes.io/metadata.name` on every namespace)."""
    return dict(with_name_label(name, {key: value for key, value in labels.items() if key != ENFORCE_LABEL}))


def changes(namespaces: Mapping[str, Mapping[str, str]], selectors: list[LabelSelector | None]) -> dict[str, bool]:
    """Per namespace (name -> labels) whose label must change: True to add it, False to remove it."""
    found = {}
    for name, labels in namespaces.items():
        has = labels.get(ENFORCE_LABEL) == "true"
        wanted = wanted_label(name, labels, selectors)
        if wanted != has:
            found[name] = wanted
    return found


def moved(before: list[LabelSelector | None], after: list[LabelSelector | None]) -> list[LabelSelector | None]:
    """The selectors in one list and not the other (counted as multisets): a namespace none of them selects
    wants the label exactly as it did."""
    remaining = list(after)
    gone = []
    for selector in before:
        if selector in remaining:
            remaining.remove(selector)
        else:
            gone.append(selector)
    return gone + remaining


class EnforceLabels:
    """Keeps the label in step with the Enforced policies. It learns the namespaces' labels by standing in
    front of the controller's namespace sink (`sink`), so the namespaces are watched once.

    Work follows change: a namespace event marks that namespace, a change of the Enforced selectors marks
    the namespaces the selectors that came or went may select (found by label, `LabelIndex`), and only those
    are looked at. Every namespace is looked at after a list and when this replica (again) leads
    (`forget`)."""

    def __init__(self, api: KubeApi, wake: Callable[[], None] = lambda: None) -> None:
        self._api = api
        self._wake = wake
        self._lock = threading.Lock()
        self._labels: dict[str, dict[str, str]] | None = None
        self._listing: dict[str, dict[str, str]] = {}
        self._index = LabelIndex()
        """The namespaces by the labels their selectors see (`selected_labels`)."""
        self._marked: set[str] = set()
        """Namespaces to look at in the next round: changed since, or their write failed."""
        self._everything = True
        """Look at every namespace in the next round."""
        self._selectors: list[LabelSelector | None] | None = None
        """The selectors of the last round."""
        self.looked_at = 0
        """Namespaces looked at so far (for tests and the benchmark)."""

    def sink(self, inner: StoreSink) -> StoreSink:
        """A sink that records each namespace's labels and hands every call on to `inner`."""
        return _LabelRecorder(self, inner)

    def forget(self) -> None:
        """Leadership lost: another leader may change labels meanwhile; look at everything when leading again."""
        with self._lock:
            self._everything = True

    def pending(self) -> bool:
        """Whether the next round has namespaces to look at."""
        with self._lock:
            return self._labels is not None and (self._everything or bool(self._marked))

    def reconcile(self, selectors: list[LabelSelector | None]) -> int:
        """Add or remove the label where it is wrong among the namespaces marked (or every one, see the class),
        given the Enforced selectors (`enforced_selectors`); returns the namespaces changed. A failed write is
        tried again on the next round."""
        with self._lock:
            if self._labels is None:
                return 0
            if self._everything:
                names: set[str] | list[str] = list(self._labels)
            else:
                names = self._marked
                if self._selectors is not None and selectors != self._selectors:
                    for selector in moved(self._selectors, selectors):
                        names |= self._index.candidates(selector)
            looking = {name: self._labels[name] for name in names if name in self._labels}
            self._marked, self._everything, self._selectors = set(), False, list(selectors)
        self.looked_at += len(looking)
        written = 0
        for name, add in sorted(changes(looking, selectors).items()):
            body = {"metadata": {"labels": {ENFORCE_LABEL: "true" if add else None}}}
            try:
                self._api.merge_patch(f"{NAMESPACES_PATH}/{quote(name, safe='')}", body)
            except (ApiError, TransportError) as error:
                log.warning("namespace %s: could not %s label %s: %s", name, "add" if add else "remove",
                            ENFORCE_LABEL, error)
                with self._lock:
                    self._marked.add(name)
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
                return
            if self._labels is None or self._labels.get(name) == labels:
                return
            self._labels[name] = labels
            self._index.put(name, selected_labels(name, labels))
            self._marked.add(name)
        self._wake()

    def _listed(self) -> None:
        with self._lock:
            self._labels, self._listing = self._listing, {}
            self._index = LabelIndex()
            for name, labels in self._labels.items():
                self._index.put(name, selected_labels(name, labels))
            self._everything = True
        self._wake()

    def _removed(self, name: str) -> None:
        with self._lock:
            if self._labels is not None:
                self._labels.pop(name, None)
            self._index.remove(name)
            self._marked.discard(name)


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
