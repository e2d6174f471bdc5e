"""What one `placer dev --kube` session puts into the cluster, and what it removes again on exit.

The rule on exit: remove what this session made, and never an object the user made. The webhook
configurations and the probe are Placer's own and always go. A CRD goes only if nothing in it was made by
someone else: every SchedulingPolicy is the user's, so the SchedulingPolicy CRD this session created stays
while it holds one (`--delete-crd` deletes it with them, `--keep-crd` keeps it even empty); the PolicyReport
CRDs hold Placer's own reports (labelled `app.kubernetes.io/managed-by: placer`) and go with them, unless
another tool wrote reports there meanwhile. A CRD that was there before the session is left as it was, but
for one an earlier `placer dev` kept (labelled `managed-by: placer-dev`): that one is brought up to date,
and `--delete-crd` deletes it. Where the report CRDs were there before, only the reports Placer wrote during
the session are deleted.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webhook.cluster.client.api import ApiError, KubeApi
from webhook.commands.dev.manifests import (
    COLLECTIONS,
    CRD_PATH,
    DEV_MANAGER,
    MANAGED_BY,
    MUTATING_PATH,
    PLACER_MANAGER,
    VALIDATING_PATH,
    DevError,
    crd_objects_path,
)

ESTABLISHED_TIMEOUT = 30.0
"""Seconds for a new CRD to be served (its `Established` condition)."""
NOT_PLACERS = f"{MANAGED_BY}!={PLACER_MANAGER}"
"""Label selector of the objects in a CRD that Placer did not write: the user's."""


@dataclass(frozen=True, slots=True)
class Installed:
    """An object this session installed: `created` by it, or (a CRD) adopted from an earlier session."""

    collection: str
    name: str
    kind: str
    created: bool
    document: dict[str, Any]


@dataclass
class DevInstall:
    """The objects of one session, and the reports Placer had already written where the report CRDs were."""

    api: KubeApi
    say: Callable[[str], None]
    installed: list[Installed] = field(default_factory=list)
    reports_before: dict[str, set[str]] = field(default_factory=dict)
    """Per report collection path that existed before: the reports `placer` there at the start."""

    def ensure(self, document: dict[str, Any]) -> None:
        """Create `document`; one that exists is left as it is, except a CRD an earlier `placer dev` made,
        which is brought up to this session's version (its objects stay)."""
        kind, name = document["kind"], document["metadata"]["name"]
        collection = COLLECTIONS[kind]
        try:
            self.api.create(collection, document)
        except ApiError as error:
            if error.code != 409:
                raise DevError(f"creating {kind} {name}: {error}") from None
            current = self.api.get(f"{collection}/{name}")
            if kind == "CustomResourceDefinition" and _labels(current).get(MANAGED_BY) == DEV_MANAGER:
                self._replace(collection, document, current)
                self.installed.append(Installed(collection, name, kind, False, document))
                self.say(f"updated {kind} {name}, kept by an earlier placer dev")
            else:
                self.say(f"{kind} {name} exists; left as it is")
                if kind == "CustomResourceDefinition" and _reports_crd(document):
                    self._note_reports(document)
            return
        self.installed.append(Installed(collection, name, kind, True, document))
        self.say(f"created {kind} {name}")

    def put_webhook(self, document: dict[str, Any]) -> None:
        """Create a `placer-dev` webhook configuration, replacing one a killed session left."""
        kind, name = document["kind"], document["metadata"]["name"]
        collection = COLLECTIONS[kind]
        try:
            self.api.create(collection, document)
        except ApiError as error:
            if error.code != 409:
                raise DevError(f"creating {kind} {name}: {error}") from None
            self._replace(collection, document, self.api.get(f"{collection}/{name}"))
        self.installed.append(Installed(collection, name, kind, True, document))
        self.say(f"created {kind} {name}")

    def remove_stale(self, collection: str, name: str) -> None:
        """Delete a `placer-dev` webhook configuration a killed session left: it calls an address nothing
        answers at, and the validating one would refuse every SchedulingPolicy write meanwhile."""
        try:
            self.api.delete(f"{collection}/{name}")
        except ApiError as error:
            if error.code == 404:
                return
            raise DevError(f"deleting {name} left by an earlier session: {error}") from None
        self.say(f"deleted {_kind(collection)} {name}, left by an earlier session")

    def wait_established(self, timeout: float = ESTABLISHED_TIMEOUT) -> None:
        """Wait until every CRD this session installed is served: the server's watches and the probe need it."""
        deadline = time.monotonic() + timeout
        for item in self.installed:
            if item.collection != CRD_PATH:
                continue
            while not _established(self.api.get(f"{CRD_PATH}/{item.name}")):
                if time.monotonic() > deadline:
                    raise DevError(f"CustomResourceDefinition {item.name} not Established within {timeout:.0f}s")
                time.sleep(0.2)

    def remove_webhooks(self) -> None:
        """Delete this session's webhook configurations: first on exit, so no write waits for a webhook
        that is going away."""
        for item in reversed(list(self.installed)):
            if item.collection in (MUTATING_PATH, VALIDATING_PATH):
                self._delete(item)

    def remove_rest(self, *, keep_crd: bool, delete_crd: bool) -> None:
        """After the server stopped: the reports it wrote into CRDs that were there, then the CRDs and the
        namespace by the rule of the module docstring, newest first."""
        self._remove_new_reports()
        for item in reversed(list(self.installed)):
            if item.collection != CRD_PATH:
                self._delete(item)
                continue
            users = self._user_objects(item.document)
            if delete_crd or (item.created and not keep_crd and not users):
                self._delete(item, note=f" with its {_count(users, item.document)}" if users else "")
            elif item.created:
                why = "--keep-crd" if keep_crd else (
                    f"it holds {_count(users, item.document)} ({', '.join(users[:5])}{', …' if len(users) > 5 else ''})"
                    "; `placer dev --kube --delete-crd` deletes it with them")
                self.say(f"kept CustomResourceDefinition {item.name}: {why}")
            else:
                self.say(f"kept CustomResourceDefinition {item.name}, as an earlier placer dev left it "
                         "(`--delete-crd` deletes it)")
        self.installed.clear()

    def _user_objects(self, crd: dict[str, Any]) -> list[str]:
        """Names (`namespace/name` where namespaced) of the objects in `crd` that Placer did not write."""
        try:
            listed = self.api.get(crd_objects_path(crd), {"labelSelector": NOT_PLACERS})
        except ApiError as error:
            if error.code == 404:
                return []
            raise DevError(f"listing what {crd['metadata']['name']} holds: {error}") from None
        return sorted(_key(item) for item in listed.get("items") or [])

    def _note_reports(self, crd: dict[str, Any]) -> None:
        path = crd_objects_path(crd)
        self.reports_before[path] = set(self._placer_reports(path))

    def _placer_reports(self, path: str) -> dict[str, str]:
        """`namespace/name` -> the path of each report Placer wrote under `path`."""
        try:
            listed = self.api.get(path, {"labelSelector": f"{MANAGED_BY}={PLACER_MANAGER}"})
        except ApiError as error:
            if error.code == 404:
                return {}
            raise DevError(f"listing Placer's reports: {error}") from None
        found = {}
        for item in listed.get("items") or []:
            metadata = item["metadata"]
            prefix, _, plural = path.rpartition("/")
            namespace = metadata.get("namespace")
            found[_key(item)] = (f"{prefix}/namespaces/{namespace}/{plural}/{metadata['name']}" if namespace
                                 else f"{path}/{metadata['name']}")
        return found

    def _remove_new_reports(self) -> None:
        for path, before in self.reports_before.items():
            for key, report in self._placer_reports(path).items():
                if key in before:
                    continue
                try:
                    self.api.delete(report)
                    self.say(f"deleted {path.rsplit('/', 1)[-1].removesuffix('s')} {key}, written during this session")
                except ApiError as error:
                    if error.code != 404:
                        self.say(f"could not delete {key}: {error}")

    def _delete(self, item: Installed, note: str = "") -> None:
        try:
            self.api.delete(f"{item.collection}/{item.name}")
            self.say(f"deleted {item.kind} {item.name}{note}")
        except ApiError as error:
            if error.code != 404:
                self.say(f"could not delete {item.kind} {item.name}: {error}")
        if item in self.installed:
            self.installed.remove(item)

    def _replace(self, collection: str, document: dict[str, Any], current: dict[str, Any]) -> None:
        metadata = {**document["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
        self.api.replace(f"{collection}/{document['metadata']['name']}", {**document, "metadata": metadata})


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _reports_crd(crd: dict[str, Any]) -> bool:
    return str(crd["spec"]["group"]) == "wgpolicyk8s.io"


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _key(item: dict[str, Any]) -> str:
    metadata = item["metadata"]
    return f"{metadata['namespace']}/{metadata['name']}" if metadata.get("namespace") else str(metadata["name"])


def _count(names: list[str], crd: dict[str, Any]) -> str:
    kind = str(crd["spec"]["names"]["kind"])
    if len(names) == 1:
        return f"1 {kind}"
    return f"{len(names)} " + (kind[:-1] + "ies" if kind.endswith("y") else kind + "s")


def _kind(collection: str) -> str:
    return next(kind for kind, path in COLLECTIONS.items() if path == collection)
