"""`placer certs` output, and renewal that keeps the CA (so the webhooks' caBundle stays valid)."""

import stat
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from webhook.commands.certs import issue, service_names


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_renewing_in_the_same_directory_keeps_the_ca_and_signs_the_new_certificate_with_it(tmp_path: Path) -> None:
    names = service_names("placer", "placer-system")
    first = issue(tmp_path, names)
    ca_before, cert_before = first.ca_cert.read_bytes(), first.cert.read_bytes()
    second = issue(tmp_path, names)
    assert second.ca_cert.read_bytes() == ca_before, "the caBundle must not change on renewal"
    assert second.cert.read_bytes() != cert_before
    ca, cert = _load(second.ca_cert), _load(second.cert)
    public_key = ca.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert sans == names
    for key in ("ca.key", "tls.key"):
        assert stat.S_IMODE((tmp_path / key).stat().st_mode) == 0o600


def test_a_ca_that_would_expire_before_the_new_certificate_is_replaced(tmp_path: Path) -> None:
    first = issue(tmp_path, ["placer"])
    ca_before = first.ca_cert.read_bytes()
    issue(tmp_path, ["placer"], days=4000)  # longer than the ten-year CA
    assert first.ca_cert.read_bytes() != ca_before
    _load(first.cert).verify_directly_issued_by(_load(first.ca_cert))


def test_a_new_directory_gets_its_own_ca(tmp_path: Path) -> None:
    a = issue(tmp_path / "a", ["placer"])
    b = issue(tmp_path / "b", ["placer"])
    assert a.ca_cert.read_bytes() != b.ca_cert.read_bytes()
