"""Certificates for the webhook: a CA and a serving certificate signed by it (`placer certs`).

ECDSA P-256 keys: fast to generate and to handshake with, and accepted by every supported kube-apiserver.
The CA goes into the webhook configuration's `caBundle`; the serving certificate names the Service.
"""

import argparse
import base64
import datetime
import ipaddress
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.support.config import DEFAULT_CERTS


@dataclass(frozen=True, slots=True)
class IssuedCertificates:
    ca_cert: Path
    cert: Path
    key: Path

    def ca_bundle(self) -> str:
        """The base64 `caBundle` value for a webhook configuration."""
        return base64.b64encode(self.ca_cert.read_bytes()).decode()


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names the API server may use to reach a Service."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


CA_DAYS = 3650


def issue(out: Path, hosts: list[str], *, days: int = 365, common_name: str | None = None) -> IssuedCertificates:
    """Write `ca.crt`, `ca.key`, `tls.crt` and `tls.key` (keys mode 0600) into `out` for the given names and IPs.

    A CA already in `out` (`ca.crt` + `ca.key`) that outlives the new certificate signs it again: renewing the
    serving certificate then leaves the webhooks' `caBundle` unchanged, so rotation needs no caBundle update
    and no request fails. Otherwise a new CA, valid for ten years, is made.
    """
    out.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _reusable_ca(out, days) or _new_ca(out)
    ca_name = ca_cert.subject
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or hosts[0])])
    cert = _signed(
        subject,
        issuer=ca_name,
        public_key=key.public_key(),
        signing_key=ca_key,
        days=days,
        extensions=[
            (x509.SubjectAlternativeName([_general_name(host) for host in dict.fromkeys(hosts)]), False),
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), False),
        ],
    )
    issued = IssuedCertificates(out / "ca.crt", out / "tls.crt", out / "tls.key")
    _write_private_key(issued.key, key)
    # the key first, then the certificate: a reader that sees the new certificate finds its key
    issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return issued


def _reusable_ca(out: Path, days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    try:
        ca_cert = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
        ca_key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), password=None)
    except (OSError, ValueError):
        return None
    expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=days)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey) or ca_cert.not_valid_after_utc < expires:
        return None
    return ca_cert, ca_key


def _new_ca(out: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "placer-webhook-ca")])
    ca_usage = x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=True,
        crl_sign=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )
    ca_cert = _signed(
        ca_name,
        issuer=ca_name,
        public_key=ca_key.public_key(),
        signing_key=ca_key,
        days=CA_DAYS,
        extensions=[
            (x509.BasicConstraints(ca=True, path_length=0), True),
            (ca_usage, True),
        ],
    )
    _write_private_key(out / "ca.key", ca_key)
    (out / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return ca_cert, ca_key


def ensure_dev_certificates(directory: Path) -> IssuedCertificates | None:
    """Create certificates for localhost and 127.0.0.1 when `directory` has none; None if present."""
    if (directory / "tls.crt").exists() and (directory / "tls.key").exists():
        return None
    return issue(directory, ["localhost", "127.0.0.1", "::1"], days=365, common_name="localhost")


def _signed(
    subject: x509.Name,
    *,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    signing_key: ec.EllipticCurvePrivateKey,
    days: int,
    extensions: list[tuple[x509.ExtensionType, bool]],
) -> x509.Certificate:
    """A certificate valid from five minutes ago (clock skew) for `days` days."""
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signing_key, hashes.SHA256())


def _write_private_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    """PKCS#8 PEM, created with mode 0600 so the key is never readable by others, even for a moment."""
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o600)


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def add_parser(commands: Any) -> None:
    """`placer certs` and its flags."""
    certs = commands.add_parser("certs", help="write a CA and a serving certificate for the webhook Service")
    certs.add_argument("--out", default=str(DEFAULT_CERTS), metavar="DIR",
                       help="directory for ca.crt, ca.key, tls.crt and tls.key (default: %(default)s)")
    certs.add_argument("--service", default="placer", metavar="NAME",
                       help="the webhook's Service, named in the certificate (default: %(default)s)")
    certs.add_argument("--namespace", default="placer-system", metavar="NS",
                       help="the Service's namespace (default: %(default)s)")
    certs.add_argument("--host", action="append", default=None, metavar="DNS_OR_IP",
                       help="another name or IP address for the certificate (repeatable)")
    certs.add_argument("--days", type=int, default=365, metavar="N",
                       help="days the serving certificate is valid (default: %(default)s)")
    certs.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    hosts = [*service_names(args.service, args.namespace), *(args.host or [])]
    issued = issue(Path(args.out), hosts, days=args.days, common_name=f"{args.service}.{args.namespace}.svc")
    print(f"wrote {issued.ca_cert}, {issued.cert}, {issued.key} for: {', '.join(hosts)}", file=sys.stderr)
    print(issued.ca_bundle())
    return 0
