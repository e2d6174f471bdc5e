"""The keys of exemption seals as a file holds them now: `--exemption-key FILE`, or the state directory's copy
of the Secret Placer keeps (`webhook.cluster.exemption_key`), followed when the file changes.

A worker asks for the seals on every admission; the file is looked at (one `stat`) at most once a second, and
read again only when it changed: a key rotated in the Secret reaches every worker within a second of the
controller writing it. A file that is missing or unusable means no seals (never another key): an exempt
request is then answered with a warning that its workload's pods will be refused (`NO_KEY_WARNING`).
"""

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from webhook.engine.exemption_seal import ExemptionKeyError, OwnerLookup, Seals, read_keys

log = logging.getLogger(__name__)

CHECK_INTERVAL = 1.0
"""Seconds between two looks at the key file."""


class SealKeys:
    """`current()`: the seals of the key file as it is now (None while there is none)."""

    def __init__(self, path: Path, owner: OwnerLookup | None = None, *, interval: float = CHECK_INTERVAL,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._owner = owner
        self._interval = interval
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._checked: float | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._seals: Seals | None = None
        self._reported: str | None = None

    def current(self) -> Seals | None:
        now = self._monotonic()
        checked = self._checked
        if checked is not None and now - checked < self._interval:
            return self._seals
        with self._lock:
            if self._checked is None or now - self._checked >= self._interval:
                self._checked = now
                self._refresh()
            return self._seals

    def __call__(self) -> Seals | None:
        return self.current()

    def _refresh(self) -> None:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            self._stamp, self._seals = None, None
            return
        except OSError as error:
            self._failed(f"{self.path}: {error.strerror or error}")
            return
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if stamp == self._stamp:
            return
        try:
            keys = read_keys(self.path)
        except ExemptionKeyError as error:
            self._failed(str(error))
            return
        self._stamp, self._seals, self._reported = stamp, keys.seals(self._owner), None

    def _failed(self, problem: str) -> None:
        """No seals rather than a stale or other key; said once per problem."""
        self._stamp, self._seals = None, None
        if problem != self._reported:
            self._reported = problem
            log.error("exemption seals are off: %s", problem)
