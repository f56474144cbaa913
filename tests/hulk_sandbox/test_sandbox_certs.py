"""The PKI generated in Python: what Go's TLS stack and RBAC need of it."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hulk_sandbox.certs import FIRST_SERVICE_IP, generate, write_kubeconfig


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_pki(tmp_path: Path) -> None:
    pki = generate(tmp_path / "pki")
    ca, server, admin = load(pki.ca_cert), load(pki.apiserver_cert), load(pki.admin_cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for leaf in (server, admin):
        leaf.verify_directly_issued_by(ca)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "kubernetes.default.svc.cluster.local"} <= set(
        sans.get_values_for_type(x509.DNSName)
    )
    ips = set(sans.get_values_for_type(x509.IPAddress))
    assert {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address(FIRST_SERVICE_IP)} <= ips
    usage = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    orgs = admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [o.value for o in orgs] == ["system:masters"]
    for key in (pki.ca_key, pki.admin_key, pki.apiserver_key, pki.sa_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_kubeconfig_is_self_contained(tmp_path: Path) -> None:
    pki = generate(tmp_path / "pki")
    path = tmp_path / "kubeconfig"
    write_kubeconfig(path, "https://127.0.0.1:6443", pki)
    config = yaml.safe_load(path.read_text())
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert config["users"][0]["user"]["client-key-data"]
    from kubernetes import config as kconfig

    api = kconfig.new_client_from_config(config_file=str(path))
    assert api.configuration.host == "https://127.0.0.1:6443"
    api.close()
