"""`placer serve`: the Flask app under gunicorn, over TLS, with threads for keep-alive connections.

The `gthread` worker keeps connections open between requests (the API server reuses them) and serves
several at once per process. Each worker builds its own app after the fork: it loads the policies, starts
its reloader and owns its CEL environment; nothing is shared but the metrics directory.
"""

import logging
import os
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger as GunicornLogger

from webhook.config import Settings
from webhook.logs import JsonFormatter
from webhook.metrics import Metrics, mark_worker_dead
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.files import FilePolicySource, PolicyReloader
from webhook.policy.snapshot import SnapshotHolder
from webhook.server.app import create_app
from webhook.server.tls import ReloadingContext

log = logging.getLogger(__name__)


def build_worker_app(settings: Settings) -> Any:
    """Everything one worker process needs: policies, their reloader, metrics, and the Flask app."""
    compiler = PolicyCompiler()
    required = settings.policies if settings.policies_explicit else ()
    source = FilePolicySource(settings.policies, compiler=compiler, required=required)
    source.refresh()
    holder = SnapshotHolder(source.snapshot())
    metrics = Metrics()
    metrics.observe_policies(len(holder.current.policies), len(holder.current.errors))
    PolicyReloader(source, holder.swap, interval=settings.reload_interval).start()
    log.info("worker %d ready with %d policies", os.getpid(), len(holder.current.policies))
    return create_app(holder=holder, settings=settings, metrics=metrics, compiler=compiler)


class PlacerServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        super().__init__()

    def load_config(self) -> None:
        settings = self.settings
        tls = ReloadingContext(settings.tls_cert, settings.tls_key, settings.client_ca)
        options: dict[str, Any] = {
            "bind": [settings.bind],
            "workers": settings.workers,
            "worker_class": "gthread",
            "threads": settings.threads,
            "certfile": str(settings.tls_cert),
            "keyfile": str(settings.tls_key),
            "ssl_context": tls,
            "do_handshake_on_connect": False,
            # The API server keeps connections open; close idle ones well after its own idle timeout.
            "keepalive": 90,
            "timeout": 30,
            "graceful_timeout": 10,
            # Slow or oversized request heads cannot hold a worker (DESIGN §7).
            "limit_request_line": 8190,
            "limit_request_fields": 100,
            "limit_request_field_size": 8190,
            "loglevel": settings.log_level,
            "accesslog": None,
            "errorlog": "-",
            "logger_class": "webhook.server.gunicorn_app.JsonGunicornLogger",
            "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,
            "child_exit": lambda server, worker: mark_worker_dead(worker.pid),
            "proc_name": "placer",
            # gunicorn's control socket writes under $HOME; the container's root filesystem is read-only.
            "control_socket_disable": True,
        }
        if settings.client_ca is not None:
            options["ca_certs"] = str(settings.client_ca)
        for key, value in options.items():
            if value is not None:
                self.cfg.set(key, value)

    def load(self) -> Any:
        return build_worker_app(self.settings)


class JsonGunicornLogger(GunicornLogger):  # type: ignore[misc]
    """gunicorn's own messages as JSON lines, like Placer's."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(JsonFormatter())
