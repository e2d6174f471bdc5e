"""Server TLS: TLS 1.2+, modern ciphers, optional client certificates, and reload of rotated files.

gunicorn asks for an SSL context for every accepted connection. Returning a cached context keeps that
cheap; checking the files' fingerprints every second lets cert-manager or a Secret update rotate the
certificate without a restart. Connections already open keep the context they were accepted with, so
in-flight requests never fail; a half-written pair (new certificate, old key) fails to load and the
previous context keeps serving until the pair is consistent.
"""

import hashlib
import logging
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Forward-secret AEAD suites only for TLS 1.2; TLS 1.3 suites are all modern and not set here.
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


class SteadyTimeoutSocket(ssl.SSLSocket):
    """A TLS connection whose timeout changes are skipped when they change nothing.

    gunicorn sets a connection's timeout or blocking mode four or five times per request, mostly to the
    value it has already (`setblocking(True)` before each request, `settimeout(prior)` after each check for
    an unread body). Each is an `ioctl` during which Python lets another thread take the GIL: under load,
    a hand-off between threads and its context switches, per call. The mode of the file descriptor follows
    the timeout (None: blocking; any number: non-blocking), so when the timeout is already the one asked
    for, the descriptor is already in the mode that goes with it.
    """

    def settimeout(self, value: float | None) -> None:
        if value != self.gettimeout():
            super().settimeout(value)

    def setblocking(self, flag: bool) -> None:
        self.settimeout(None if flag else 0.0)


def server_context(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    """A server-side context; with `client_ca`, clients must present a certificate it signed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    context.sslsocket_class = SteadyTimeoutSocket
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class ReloadingContext:
    """An SSL context that follows its files; usable as gunicorn's `ssl_context` hook."""

    def __init__(self, cert: Path, key: Path, client_ca: Path | None, *, check_interval: float = 1.0) -> None:
        self._files = [p for p in (cert, key, client_ca) if p is not None]
        self._args = (cert, key, client_ca)
        self._interval = check_interval
        self._lock = threading.Lock()
        self._checked = time.monotonic()
        self._digest = self._fingerprint()
        self._context = server_context(*self._args)

    def __call__(
        self, config: Any = None, default_factory: Callable[[], ssl.SSLContext] | None = None
    ) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked >= self._interval and self._lock.acquire(blocking=False):
            try:
                self._checked = now
                self._reload_if_changed()
            finally:
                self._lock.release()
        return self._context

    def _reload_if_changed(self) -> None:
        digest = self._fingerprint()
        if digest == self._digest:
            return
        try:
            context = server_context(*self._args)
        except (OSError, ssl.SSLError) as error:
            log.warning("new TLS files do not load yet (%s); still serving the previous certificate", error)
            return
        self._context, self._digest = context, digest
        log.info("TLS certificate reloaded from %s", self._args[0])

    def _fingerprint(self) -> str:
        """A hash of the files' contents: mounted Secrets change by symlink swap, with no reliable mtime."""
        digest = hashlib.sha256()
        for path in self._files:
            try:
                digest.update(path.read_bytes())
            except OSError:
                digest.update(b"<missing>")
        return digest.hexdigest()
