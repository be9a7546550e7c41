"""Certificates and keys for the testbed: one CA, the apiserver's serving cert, an admin client.

EC P-256 keys: generated in milliseconds (RSA would cost a noticeable part of start-up)
and accepted by every Kubernetes component, including as the service-account signing key.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=7)
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", "10.96.0.1")


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files under a directory."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def apiserver_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.directory / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.directory / "admin.key"

    @property
    def service_account_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def service_account_public_key(self) -> Path:
        return self.directory / "sa.pub"


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _leaf(ca_key, ca_name, subject, usage, extra_extensions=()) -> tuple:
    key = _new_key()
    builder = _builder(subject, ca_name, key.public_key())
    builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
    builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), False)
    for extension in extra_extensions:
        builder = builder.add_extension(extension, False)
    return key, builder.sign(ca_key, hashes.SHA256())


def generate_pki(directory: Path) -> Pki:
    """Write a CA, the apiserver serving pair, an admin (system:masters) pair and a SA key."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    ca_key = _new_key()
    ca_name = _name("fracnb-testbed-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki.ca_key, ca_key)
    _write_cert(pki.ca_cert, ca_cert)

    san = x509.SubjectAlternativeName(
        [x509.DNSName(name) for name in APISERVER_DNS_NAMES]
        + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in APISERVER_IPS]
    )
    server_key, server_cert = _leaf(ca_key, ca_name, _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, [san])
    _write_key(pki.apiserver_key, server_key)
    _write_cert(pki.apiserver_cert, server_cert)

    admin_key, admin_cert = _leaf(
        ca_key,
        ca_name,
        _name("fracnb-testbed-admin", "system:masters"),
        ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    _write_key(pki.admin_key, admin_key)
    _write_cert(pki.admin_cert, admin_cert)

    service_account_key = _new_key()
    _write_key(pki.service_account_key, service_account_key)
    pki.service_account_public_key.write_bytes(
        service_account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


def issue_serving_cert(pki: Pki, directory: Path, dns_names: tuple[str, ...], ips: tuple[str, ...]) -> Path:
    """Sign a serving pair with the testbed CA into ``directory`` as tls.crt/tls.key (the names
    controller-runtime and Kubernetes' generic apiserver look for); returns ``directory``."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    ca_name = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes()).subject
    san = x509.SubjectAlternativeName(
        [x509.DNSName(name) for name in dns_names] + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    )
    subject = _name(dns_names[0] if dns_names else ips[0])
    key, cert = _leaf(ca_key, ca_name, subject, ExtendedKeyUsageOID.SERVER_AUTH, [san])
    directory.mkdir(parents=True, exist_ok=True)
    _write_key(directory / "tls.key", key)
    _write_cert(directory / "tls.crt", cert)
    return directory
