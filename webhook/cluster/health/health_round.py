"""The controller's health work in each round: publish this replica's counts, read every replica's (leader),
and find out whether PodGroups are served when a policy asks for them.

Everything here is paced by its own interval: the controller's loop runs about once a second, and none of it
needs to. Readings that count what the previous ones counted are not handed over again (the same object), so
an idle leader does not compute every policy's health anew each time it reads them.
"""

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.cluster.health.recent_counts import WINDOW_SECONDS, ReplicaWindow
from webhook.cluster.health.replica_reports import PUBLISH_INTERVAL, ReplicaPublisher, collect
from webhook.gang.pod_groups import API_VERSION

log = logging.getLogger(__name__)

POD_GROUP_CHECK_INTERVAL = 60.0


class HealthRound:
    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        publisher: ReplicaPublisher | None,
        window: float = WINDOW_SECONDS,
        interval: float = PUBLISH_INTERVAL,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`publisher`: this replica's (None where workers count nothing: no multiprocess directory)."""
        self._api = api
        self._namespace = namespace
        self._publisher = publisher
        self._window = window
        self._interval = interval
        self._clock = clock
        self._monotonic = monotonic
        self._next_collect = 0.0
        self._readings: Mapping[str, ReplicaWindow] | None = None

    @property
    def window_seconds(self) -> int:
        return int(self._window)

    def publish(self) -> None:
        """Every replica, every round: its counts to its Lease when due."""
        if self._publisher is not None:
            self._publisher.publish_if_due()

    def readings(self) -> Mapping[str, ReplicaWindow] | None:
        """The leader's view of every replica's counts, read again when due (None until read once)."""
        now = self._monotonic()
        if now >= self._next_collect:
            self._next_collect = now + self._interval
            try:
                readings = collect(self._api, self._namespace, now=self._clock(), window=self._window)
            except (ApiError, TransportError) as error:
                log.warning("rule counts of the replicas not read: %s", error)
            else:
                if self._readings is None or _counted(readings) != _counted(self._readings):
                    self._readings = readings  # else the same object: nothing to compute again (status_writer)
        return self._readings

    def not_leading(self) -> None:
        """Leadership lost: read afresh when it comes back (what was read may be old by then)."""
        self._readings, self._next_collect = None, 0.0


def _counted(readings: Mapping[str, ReplicaWindow]) -> dict[str, tuple[Any, Any]]:
    """What the policies' health is made of (`policy_health.combine`): each replica's counts and problems,
    not the times at which it read them."""
    return {replica: (reading.counts, reading.problems) for replica, reading in readings.items()}


class PodGroupApiCheck:
    """Whether the API server serves PodGroups (`/apis/scheduling.x-k8s.io/v1alpha1`), asked at most once a
    minute and only while some serving policy asks for PodGroups; every replica asks for its own workers."""

    def __init__(self, api: KubeApi, *, interval: float = POD_GROUP_CHECK_INTERVAL,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._interval = interval
        self._monotonic = monotonic
        self._next = 0.0
        self.served: bool | None = None

    def check(self, wanted: bool) -> bool | None:
        """True or False once asked while `wanted`; None when no policy wants PodGroups."""
        if not wanted:
            self.served, self._next = None, 0.0
            return None
        now = self._monotonic()
        if now < self._next:
            return self.served
        self._next = now + self._interval
        try:
            self._api.get(f"/apis/{API_VERSION}")
        except ApiError as error:
            if error.code == 404:
                self.served = False
            else:
                log.warning("PodGroup API discovery failed: %s", error)
            return self.served
        except TransportError as error:
            log.warning("PodGroup API discovery failed: %s", error)
            return self.served
        self.served = True
        return True
