"""The serving certificate's files, watched so that a rotated pair is served without a restart.

granian's workers read the certificate and key when they start. cert-manager or a Secret update replaces
the files (by symlink swap, with no reliable mtime), so their contents are hashed every second; when they
change and the new pair loads, the main process asks granian for fresh workers (SIGHUP: each new worker
starts beside an old one, which then stops gracefully, so no request is refused meanwhile). A half-written
pair (new certificate, old key) does not load: the workers keep serving the previous one until the pair
is consistent.
"""

import hashlib
import logging
import ssl
from pathlib import Path

log = logging.getLogger(__name__)


class CertificateWatch:
    def __init__(self, cert: Path, key: Path, client_ca: Path | None) -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self._digest = self._fingerprint()

    def rotated(self) -> bool:
        """Whether the files changed since the last call that said so, into a pair that loads."""
        digest = self._fingerprint()
        if digest == self._digest:
            return False
        try:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(certfile=str(self.cert), keyfile=str(self.key))
            if self.client_ca is not None:
                context.load_verify_locations(cafile=str(self.client_ca))
        except (OSError, ssl.SSLError) as error:
            log.warning("new TLS files do not load yet (%s); still serving the previous certificate", error)
            return False
        self._digest = digest
        log.info("TLS certificate changed in %s: starting workers that serve it", self.cert)
        return True

    def _fingerprint(self) -> str:
        digest = hashlib.sha256()
        for path in (self.cert, self.key, self.client_ca):
            if path is None:
                continue
            try:
                digest.update(path.read_bytes())
            except OSError:
                digest.update(b"<missing>")
        return digest.hexdigest()
