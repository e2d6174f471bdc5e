"""The main process notices a rotated serving certificate, and only once the new pair loads."""

import os
from pathlib import Path

from webhook.commands.certs import issue
from webhook.server.certificate_watch import CertificateWatch


def _replace(path: Path, data: bytes) -> None:
    staging = path.with_name(path.name + ".tmp")
    staging.write_bytes(data)
    os.replace(staging, path)


def test_a_rotated_pair_is_noticed_once_and_a_half_written_one_not_at_all(tmp_path: Path) -> None:
    first = issue(tmp_path / "first", ["localhost"])
    second = issue(tmp_path / "second", ["localhost"])
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "tls.crt", live / "tls.key"
    _replace(cert, first.cert.read_bytes())
    _replace(key, first.key.read_bytes())
    watch = CertificateWatch(cert, key, None)
    assert not watch.rotated()
    _replace(cert, second.cert.read_bytes())  # the new certificate, the old key: does not load
    assert not watch.rotated()
    _replace(key, second.key.read_bytes())
    assert watch.rotated()
    assert not watch.rotated()  # said once
