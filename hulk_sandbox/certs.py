"""The sandbox's PKI, generated in Python: a CA, the API server's serving certificate, an
admin client certificate (``O=system:masters``), the aggregation layer's front-proxy client
certificate (signed by the same CA), a service-account key pair, and the
kubeconfig that uses them. ECDSA P-256 keys throughout: fast to make, accepted by Go, Python
and kubectl. Everything is written under ``<dir>/pki`` with owner-only permissions.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

FIRST_SERVICE_IP = "10.96.0.1"
SERVICE_CIDR = "10.96.0.0/16"
FRONT_PROXY_CN = "front-proxy-client"
_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
_VALID_FOR = dt.timedelta(days=365)


@dataclass(frozen=True)
class Pki:
    """Paths of the files :func:`generate` writes."""

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def apiserver_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def front_proxy_cert(self) -> Path:
        return self.dir / "front-proxy-client.crt"

    @property
    def front_proxy_key(self) -> Path:
        return self.dir / "front-proxy-client.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        key_encipherment=False,
        content_commitment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALID_FOR)
    )


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _leaf(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName] | None = None,
) -> tuple[bytes, bytes]:
    key = _key()
    builder = (
        _builder(subject, ca.subject, key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def generate(pki_dir: Path) -> Pki:
    """Writes a fresh PKI into ``pki_dir`` (created if needed) and returns its paths."""
    pki = Pki(pki_dir)
    pki_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca_key = _key()
    ca_name = _name("hulk-sandbox-ca")
    ca = (
        _builder(ca_name, ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_usage(ca=True), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(pki.ca_cert, ca.public_bytes(serialization.Encoding.PEM))
    _write(pki.ca_key, _key_pem(ca_key))

    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in _DNS_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", FIRST_SERVICE_IP)]
    cert, key = _leaf(ca, ca_key, _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, sans)
    _write(pki.apiserver_cert, cert)
    _write(pki.apiserver_key, key)

    cert, key = _leaf(ca, ca_key, _name("admin", "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH)
    _write(pki.admin_cert, cert)
    _write(pki.admin_key, key)

    cert, key = _leaf(ca, ca_key, _name(FRONT_PROXY_CN), ExtendedKeyUsageOID.CLIENT_AUTH)
    _write(pki.front_proxy_cert, cert)
    _write(pki.front_proxy_key, key)

    sa = _key()
    _write(pki.sa_key, _key_pem(sa))
    _write(
        pki.sa_pub,
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return pki


def write_kubeconfig(path: Path, server: str, pki: Pki, name: str = "hulk-sandbox") -> None:
    """A self-contained kubeconfig (certificates embedded) for the admin user."""

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority-data": b64(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": b64(pki.admin_cert),
                    "client-key-data": b64(pki.admin_key),
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}],
        "current-context": name,
        "preferences": {},
    }
    _write(path, yaml.safe_dump(config, sort_keys=False).encode())
