"""What `placer serve`'s main process looks after besides granian's workers, once a second in a thread:

- the cluster controller process (with `--kube`), restarted if it exits (`controller_process`);
- the serving certificate: rotated files get fresh workers that serve them (`certificate_watch`);
- the metrics files of exited workers, folded into the totals (`metrics_files`);
- the API server's Kubernetes minor (with `--kube`): workers that check policies against another get
  replaced (`version_watch`);
- and, every 0.2 s in a thread of its own, granian's worker replacements: the worker about to be stopped
  closes its connections after its responses first (`respawn_drain`).

granian runs the workers: it starts them, replaces one that dies, recycles them past their lifetime or memory
limit, and on SIGHUP starts new ones beside the old before stopping those gracefully.
"""

import logging
import os
import signal
import threading
from pathlib import Path

from webhook.server.certificate_watch import CertificateWatch
from webhook.server.controller_process import ControllerProcess
from webhook.server.metrics_files import drop_stale_problem_files, fold_dead_processes
from webhook.server.respawn_drain import RespawnWatch
from webhook.server.version_watch import ClusterVersionWatch

log = logging.getLogger(__name__)

INTERVAL = 1.0


class Supervisor:
    def __init__(self, controller: ControllerProcess | None, certificate: CertificateWatch,
                 metrics_directory: Path | None, versions: ClusterVersionWatch | None = None,
                 respawns: RespawnWatch | None = None) -> None:
        self.controller = controller
        self.respawns = respawns
        self.versions = versions
        self.certificate = certificate
        self.metrics_directory = metrics_directory
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="placer-supervisor", daemon=True)

    def start(self) -> None:
        """granian's startup hook: before the workers are started."""
        if self.controller is not None:
            self.controller.supervise()
        if self.versions is not None and not self.versions.wait_for_first_discovery():
            log.warning("API server version not discovered yet: policies are checked against Kubernetes %s "
                        "until it is", self.versions.built_with)
        self._thread.start()
        if self.respawns is not None:
            self.respawns.start()

    def stop(self) -> None:
        """granian's shutdown hook: once the workers have stopped."""
        if self.respawns is not None:
            self.respawns.stop()
        self._stopping.set()
        self._thread.join(INTERVAL + 5.0)
        if self.controller is not None:
            self.controller.stop()
        self._fold_metrics()

    def _run(self) -> None:
        while not self._stopping.wait(INTERVAL):
            try:
                self.tick()
            except Exception:  # this thread must never end while the server runs
                log.exception("supervising the server")

    def tick(self) -> None:
        if self.controller is not None:
            self.controller.supervise()
        if self.versions is not None and (minor := self.versions.changed()) is not None:
            log.info("the API server is Kubernetes %s now: new workers check policies against it", minor)
            os.kill(os.getpid(), signal.SIGHUP)
        if self.certificate.rotated():
            os.kill(os.getpid(), signal.SIGHUP)  # granian: new workers beside the old, then the old stop
        self._fold_metrics()

    def _fold_metrics(self) -> None:
        if self.metrics_directory is not None:
            fold_dead_processes(self.metrics_directory)
            drop_stale_problem_files(self.metrics_directory)
