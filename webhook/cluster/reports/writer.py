"""Writing Placer's PolicyReports: only what changed, at a bounded rate, the latest content of each.

Reports that may have changed are marked as judging finds them and wait in a queue of their keys, one
entry per report: a report marked again before it was written is written once. Only keys wait, never
reports: each is built when its turn comes (`Build`), with the latest results, so 50,000 reports waiting
cost their keys, not 280 MB of reports. The queue is written at most `WRITES_PER_SECOND` requests a second
(`WRITE_BURST` at once after a quiet spell), creates, updates and deletes together, so that churn in a big
cluster (or a policy change that moves every workload's results) never turns into a burst of writes at the
API server: it takes longer to show instead. A report whose turn comes and whose content did not change
costs no write and no share of the budget.
That is the rate kube-controller-manager allows its own clients by default (`--kube-api-qps` 50,
`--kube-api-burst` 100, https://kubernetes.io/docs/reference/command-line-tools-reference/kube-controller-manager/).

A report whose content (`reports.content`) is the one last written or read is not written. When this
replica starts leading, it lists the reports Placer wrote (one paged list, by the managed-by label) and
remembers their content, so a restart or a new leader writes only the reports that differ; the one
PolicyReport per namespace that earlier versions wrote (`placer`) is deleted then.
"""

import logging
import time
from collections.abc import Callable
from typing import TypeAlias

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.cluster.reports.reports import (
    API_VERSION,
    CLUSTER_REPORT_NAME,
    LEGACY_REPORT_NAME,
    MANAGED_BY_SELECTOR,
    Key,
    content,
    reports_path,
)
from webhook.support.typing import JSONObject

log = logging.getLogger(__name__)

Build: TypeAlias = Callable[[Key], JSONObject | None]
"""The report as it should be now (None: there should be none)."""
WRITES_PER_SECOND = 50.0
WRITE_BURST = 100
LIST_PAGE = 500


class WriteBudget:
    """A token bucket: `rate` writes a second, up to `burst` at once."""

    def __init__(self, rate: float, burst: int, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._monotonic = monotonic
        self._last = monotonic()

    def take(self) -> bool:
        now = self._monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


class ReportWriter:
    """Creates, replaces and deletes Placer's reports through a queue written at a bounded rate."""

    def __init__(self, api: KubeApi, *, rate: float = WRITES_PER_SECOND, burst: int = WRITE_BURST,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._budget = WriteBudget(rate, burst, monotonic)
        self._written: dict[Key, tuple[bytes, str]] = {}
        """By report: (digest of the content, resourceVersion) as last written or read."""
        self._queue: dict[Key, None] = {}
        """Reports that may have changed, oldest first (a dict for its order)."""
        self.seeded = False
        self.writes = 0
        """Requests that wrote (create, replace, delete)."""

    def mark(self, key: Key) -> None:
        """The report may have changed (or should be there, or not be there any more): look at it in turn."""
        self._queue.setdefault(key, None)

    def knows(self, key: Key) -> bool:
        """Whether the report exists, as far as this writer knows (written or read)."""
        return key in self._written

    def forget(self, key: Key) -> None:
        """The report went with its namespace or its workload (the garbage collector deletes it)."""
        self._written.pop(key, None)
        self._queue.pop(key, None)

    def forget_all(self) -> None:
        """Leadership lost: another leader writes meanwhile; list again when leading again."""
        self._written.clear()
        self._queue.clear()
        self.seeded = False

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def seed(self) -> None:
        """Remember the content of every report Placer wrote, and delete the per-namespace ones of old."""
        query = {"labelSelector": MANAGED_BY_SELECTOR, "limit": str(LIST_PAGE)}
        found: dict[Key, tuple[bytes, str]] = {}
        legacy: list[tuple[str, str]] = []
        while True:
            try:
                page = self._api.get(f"/apis/{API_VERSION}/policyreports", query)
            except ApiError as error:
                if error.code != 403:
                    raise
                log.warning("policy reports: cannot list them (%s): the RBAC of an earlier version? Apply "
                            "deploy/components/policy-reports again; meanwhile each report found is read "
                            "before it is replaced", error)
                self.seeded = True
                return
            for item in page.get("items") or []:
                metadata = item.get("metadata") or {}
                key = (str(metadata.get("namespace")), str(metadata.get("name")))
                found[key] = (content(item), str(metadata.get("resourceVersion") or ""))
                if key[1] == LEGACY_REPORT_NAME:
                    legacy.append(key)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
            query = {**query, "continue": str(token)}
        try:
            stored = self._api.get(f"{reports_path()}/{CLUSTER_REPORT_NAME}")
            found[None] = (content(stored), str((stored.get("metadata") or {}).get("resourceVersion") or ""))
        except ApiError as error:
            if error.code != 404:
                raise
        self._written.update(found)
        for old in legacy:
            self.mark(old)
        self.seeded = True
        log.info("policy reports: %d found, %d per-namespace reports of an earlier version to delete",
                 len(found), len(legacy))

    def flush(self, build: Build) -> int:
        """Write what changed among the reports waiting, in turn, as far as the budget allows; `build(key)`
        makes each as it should be now. Returns the requests made."""
        made = 0
        while self._queue:
            key = next(iter(self._queue))
            report = build(key)
            known = self._written.get(key)
            digest = content(report) if report is not None else None
            if (report is None and known is None) or (known is not None and known[0] == digest):
                del self._queue[key]  # nothing to write: it is as it should be
                continue
            if not self._budget.take():
                break
            del self._queue[key]
            made += 1
            try:
                if report is None or digest is None:
                    self._delete(key)
                else:
                    self._write(key, report, digest)
            except TransportError as error:
                self.mark(key)  # the API server is away: the rest waits too
                log.warning("policy reports not written: %s", error)
                break
            except ApiError as error:
                log.warning("policy report %s not written: %s", _title(key), error)
        return made

    def _write(self, key: Key, report: JSONObject, digest: bytes) -> None:
        path = reports_path(key[0] if key is not None else None)
        name = key[1] if key is not None else CLUSTER_REPORT_NAME
        known = self._written.get(key)
        if known is None:
            try:
                written = self._api.create(path, report)
            except ApiError as error:
                if error.code != 409:
                    raise
                stored = self._api.get(f"{path}/{name}")  # written before this writer knew of it
                self._written[key] = (content(stored), str(stored["metadata"].get("resourceVersion") or ""))
                self.mark(key)
                return
        else:
            body = {**report, "metadata": {**report["metadata"], "resourceVersion": known[1]}}
            try:
                written = self._api.replace(f"{path}/{name}", body)
            except ApiError as error:
                if error.code not in (404, 409):
                    raise
                self._written.pop(key, None)  # deleted, or written by someone else: look again
                self.mark(key)
                return
        self._written[key] = (digest, str((written.get("metadata") or {}).get("resourceVersion") or ""))
        self.writes += 1

    def _delete(self, key: Key) -> None:
        assert key is not None, "the cluster report is never deleted"
        try:
            self._api.delete(f"{reports_path(key[0])}/{key[1]}")
        except ApiError as error:
            if error.code != 404:
                raise
        self._written.pop(key, None)
        self.writes += 1


def _title(key: Key) -> str:
    return "of the cluster" if key is None else f"{key[0]}/{key[1]}"

