"""`placer serve`: Placer's application in granian's worker processes, over TLS.

granian (Rust: hyper and rustls on tokio) holds the connections, reads requests and writes responses; a
connection is a task of its runtime, not a Python thread, so a client that is slow to send or to read holds
nothing that another request needs. Each worker is a process with one Python thread: its event loop reads
a review's body asynchronously, then answers it synchronously (`app.PlacerApp`). The main process
supervises the workers (granian) and the rest (`supervisor`); a worker about to be replaced closes its
connections after its responses first (`respawn_drain`).
"""

import functools
import logging
import os
from pathlib import Path
from typing import Any

from granian import Granian
from granian.constants import HTTPModes, Interfaces, Loops, SSLProtocols
from granian.http import HTTP1Settings
from granian.log import LogLevels

from webhook.server.certificate_watch import CertificateWatch
from webhook.server.controller_process import ControllerProcess
from webhook.server.respawn_drain import RespawnWatch
from webhook.server.supervisor import Supervisor
from webhook.server.version_watch import ClusterVersionWatch
from webhook.server.worker_app import build_worker_app
from webhook.support.config import Settings
from webhook.support.metrics import MULTIPROC_ENV

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 10
"""How long a stopping worker may take to answer the requests it holds before it is killed."""
RESPAWN_INTERVAL_SECONDS = 6.0
"""How long a new worker has to load its policies before the one it replaces is stopped; longer than
granian's crash-loop window, so that a fresh worker dying during a replacement costs its own requests only.

granian 2.8 stops the whole server when a worker dies within 5.5 s of being started (the main loop in
granian/server/common.py; the window is not an option) and measures that when its main loop next looks,
which during a `SIGHUP` replacement is only once every worker has been replaced (it replaces them one after
the other, waiting `respawn_interval` after starting each new one). With 3.5 s, a new worker killed in its
first seconds (an OOM kill) was found 3.5-5.5 s after its start and taken for a crash loop: every worker
stopped and `placer serve` exited 1. With more than 5.5 s, any worker started by a replacement is older
than the window by the time granian looks, so its death is replaced like any other; a worker granian
starts to replace a dead one (without waiting) and that dies within 5.5 s again is still a crash loop
(`tests/e2e/test_worker_deaths.py`)."""
EVENT_LOOP = Loops.asyncio
"""The workers' event loop, named rather than left to granian's `auto`, which takes rloop, else uvloop, when
either happens to be installed: the suite tests the standard loop, and rloop 0.5.0 measured no faster here
with a p99 of 17-21 ms against 5 ms (docs/serving.md)."""
GRANIAN_LOGGERS = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {},
    "handlers": {},
    "loggers": {
        "_granian": {"handlers": [], "propagate": True},
        "granian.access": {"handlers": [], "propagate": True},
    },
}
"""granian's own log lines go to the root logger: JSON lines on stderr, like Placer's (`logs`)."""


def granian_server(settings: Settings) -> Any:
    """granian's server (`granian.Granian`, its process-per-worker server on this Python) for `settings`."""
    host, port = settings.host_port
    return Granian(
        "webhook.server.worker_app:build_worker_app",  # named in logs; the app is built by `serve`'s loader
        address=host,
        port=port,
        interface=Interfaces.RSGI,
        loop=EVENT_LOOP,
        workers=settings.workers,
        http=HTTPModes.http1,
        websockets=False,
        http1_settings=HTTP1Settings(header_read_timeout=max(1, int(min(settings.idle_timeout, 60.0) * 1000))),
        log_level=LogLevels(settings.log_level),
        log_dictconfig=GRANIAN_LOGGERS,
        ssl_cert=settings.tls_cert,
        ssl_key=settings.tls_key,
        ssl_protocol_min=SSLProtocols.tls12,
        ssl_ca=settings.client_ca,
        ssl_client_verify=settings.client_ca is not None,
        respawn_failed_workers=True,
        respawn_interval=RESPAWN_INTERVAL_SECONDS,
        workers_kill_timeout=SHUTDOWN_GRACE_SECONDS,
        workers_lifetime=settings.worker_lifetime,
        workers_max_rss=settings.worker_max_rss_mib,
        rss_sample_interval=settings.rss_sample_interval,
    )


def serve(settings: Settings) -> None:
    """Run until SIGTERM or SIGINT, then stop gracefully: the workers answer what they hold first."""
    server = granian_server(settings)
    controller = ControllerProcess(settings) if settings.cluster_state is not None else None
    metrics = os.environ.get(MULTIPROC_ENV)
    versions = ClusterVersionWatch(settings.cluster_state) if settings.cluster_state is not None else None
    respawns = RespawnWatch(settings.workers, interval=RESPAWN_INTERVAL_SECONDS,
                            others=controller.pids if controller is not None else set)
    supervisor = Supervisor(controller, CertificateWatch(settings.tls_cert, settings.tls_key, settings.client_ca),
                            Path(metrics) if metrics else None, versions, respawns)
    server.on_startup(supervisor.start)
    server.on_shutdown(supervisor.stop)
    try:
        server.serve(target_loader=functools.partial(build_worker_app, settings), wrap_loader=False)
    except SystemExit as stopped:
        if stopped.code:  # granian stops with an error only when a worker died and it would not replace it
            log.error("placer serve stops: workers die as soon as they start (a crash loop): a worker died "
                      "within 5.5 s of being started to replace one that had died; the container's restart "
                      "starts them again")
        raise
