"""The cluster controller as a child of `placer serve`'s main process, restarted if it ever exits.

Why a separate process: the main process forks workers whenever one is replaced, and forking a process that
runs watch threads risks inheriting held locks. A child started with fork+exec has none of that, and a crash in it
(or in the `kubernetes` client) cannot touch the workers, which keep serving the last published state.
"""

import logging
import subprocess
import sys
import time
from collections.abc import Callable

from webhook.support.config import Settings

log = logging.getLogger(__name__)


class ControllerProcess:
    def __init__(
        self, settings: Settings, *, monotonic: Callable[[], float] = time.monotonic, max_delay: float = 60.0
    ) -> None:
        assert settings.cluster_state is not None
        self._command = [
            sys.executable,
            "-m",
            "webhook.cluster.process",
            "--state",
            str(settings.cluster_state),
            "--log-level",
            settings.log_level,
            *(["--kubeconfig", str(settings.kubeconfig)] if settings.kubeconfig else []),
            *(["--context", settings.context] if settings.context else []),
            *(["--exemption-key", str(settings.exemption_key)] if settings.exemption_key else []),
        ]
        if settings.webhook_configuration:  # kept to what the policies act on: the file ones count as well
            self._command += ["--webhook-configuration", settings.webhook_configuration,
                              *(f"--policies={path}" for path in settings.policies)]
        self._monotonic = monotonic
        self._max_delay = max_delay
        self._process: subprocess.Popen[bytes] | None = None
        self._delay = 1.0
        self._restart_at = 0.0
        self._started_at = 0.0

    def supervise(self) -> None:
        """Start the controller, or restart it (with a growing delay if it keeps failing) when it has exited.

        Called from the main process's supervisor thread about once a second; never blocks.
        """
        if self._process is not None:
            code = self._process.poll()
            if code is None:
                if self._monotonic() - self._started_at > 60:
                    self._delay = 1.0  # it has been up a minute: the next failure starts a fresh backoff
                return
            log.error("cluster controller exited (code %s); restarting in %.0fs", code, self._delay)
            self._process = None
            self._restart_at = self._monotonic() + self._delay
            self._delay = min(self._delay * 2, self._max_delay)
        if self._monotonic() < self._restart_at:
            return
        self._process = subprocess.Popen(self._command)
        self._started_at = self._monotonic()
        log.info("cluster controller started (pid %d)", self._process.pid)

    def pids(self) -> set[int]:
        """The controller's process id, if it runs: the one child of the main process that is no worker."""
        process = self._process
        return {process.pid} if process is not None else set()

    def stop(self, timeout: float = 5.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
