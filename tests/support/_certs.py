"""A certificate authority made in the test, and the server and client certificates a Docker
engine's ``--tlsverify`` and a client's ``DOCKER_CERT_PATH`` need (the ``cryptography`` package;
127.0.0.1 only)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)
_SERVER, _CLIENT = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(folder: Path, name: str, cert: x509.Certificate, key=None) -> None:
    (folder / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        (folder / f"{name}-key.pem" if name != "cert" else folder / "key.pem").write_bytes(pem)


def _cert(subject: str, key, issuer: x509.Name, signer, *, ca: bool = False, usage=None):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + _DAY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == _SERVER:
        names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signer, hashes.SHA256())


def make_certs(folder: Path) -> tuple[Path, Path]:
    """``folder/server`` (``ca.pem``, ``server.pem``, ``server-key.pem``: dockerd's) and
    ``folder/client`` (``ca.pem``, ``cert.pem``, ``key.pem``: a ``DOCKER_CERT_PATH``)."""
    server, client = folder / "server", folder / "client"
    server.mkdir(parents=True)
    client.mkdir(parents=True)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "harbor-openenv test CA")])
    ca = _cert("harbor-openenv test CA", ca_key, ca_name, ca_key, ca=True)
    server_key, client_key = _key(), _key()
    server_cert = _cert("127.0.0.1", server_key, ca_name, ca_key, usage=_SERVER)
    client_cert = _cert("client", client_key, ca_name, ca_key, usage=_CLIENT)
    for where in (server, client):
        _write(where, "ca", ca)
    _write(server, "server", server_cert, server_key)
    _write(client, "cert", client_cert, client_key)
    return server, client
