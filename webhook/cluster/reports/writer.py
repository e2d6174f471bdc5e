"""Writing Placer's PolicyReports: only what changed, at a bounded rate, the latest content of each.

Reports to write (or delete) are offered as judging finds them and wait in a queue, one entry per report:
a report offered again before it was written is written once, with its latest content. The queue is
written at most `WRITES_PER_SECOND` requests a second (`WRITE_BURST` at once after a quiet spell), creates,
updates and deletes together, so that churn in a big cluster (or a policy change that moves every
workload's results) never turns into a burst of writes at the API server: it takes longer to show instead.
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
        self._queue: dict[Key, JSONObject | None] = {}
        """Reports to write (None: to delete), oldest first."""
        self.seeded = False
        self.writes = 0
        """Requests that wrote (create, replace, delete)."""

    def offer(self, key: Key, report: JSONObject | None) -> None:
        """Write `report` (None: delete it) unless that is what is there already."""
        known = self._written.get(key)
        if report is None:
            if known is None:
                self._queue.pop(key, None)
            else:
                self._queue[key] = None
            return
        if known is not None and known[0] == content(report):
            self._queue.pop(key, None)
        else:
            self._queue[key] = report

    def knows(self, key: Key) -> bool:
        """Whether the report exists, as far as this writer knows (written, read, or waiting to be)."""
        return key in self._written or self._queue.get(key) is not None

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
            self._queue.setdefault(old, None)
        self.seeded = True
        log.info("policy reports: %d found, %d per-namespace reports of an earlier version to delete",
                 len(found), len(legacy))

    def flush(self) -> int:
        """Write what waits, as far as the budget allows; returns the requests made."""
        made = 0
        while self._queue and self._budget.take():
            key, report = next(iter(self._queue.items()))
            del self._queue[key]
            made += 1
            try:
                if report is None:
                    self._delete(key)
                else:
                    self._write(key, report)
            except TransportError as error:
                self._queue.setdefault(key, report)  # the API server is away: the rest waits too
                log.warning("policy reports not written: %s", error)
                break
            except ApiError as error:
                log.warning("policy report %s not written: %s", _title(key), error)
        return made

    def _write(self, key: Key, report: JSONObject) -> None:
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
                self.offer(key, report)
                return
        else:
            body = {**report, "metadata": {**report["metadata"], "resourceVersion": known[1]}}
            try:
                written = self._api.replace(f"{path}/{name}", body)
            except ApiError as error:
                if error.code not in (404, 409):
                    raise
                self._written.pop(key, None)  # deleted, or written by someone else: look again
                self.offer(key, report)
                return
        self._written[key] = (content(report), str((written.get("metadata") or {}).get("resourceVersion") or ""))
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

