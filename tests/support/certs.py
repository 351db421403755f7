"""Certificates a TLS test makes for itself: a CA, a server certificate for 127.0.0.1,
client certificates (trusted, from another CA, expired, revoked) and a CRL."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_NOW = datetime.datetime.now(datetime.UTC)
_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


@dataclass
class _Ca:
    name: x509.Name
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Issued:
    cert_path, key_path = path.with_suffix(".crt"), path.with_suffix(".key")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Issued(cert_path, key_path)


def _ca(cn: str) -> _Ca:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(cn)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOW - _DAY)
        .not_valid_after(_NOW + 30 * _DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return _Ca(name, key, cert)


def _leaf(
    ca: _Ca, cn: str, server: bool, expired: bool = False
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = (_NOW - 10 * _DAY, _NOW - 2 * _DAY) if expired else (_NOW - _DAY, _NOW + 30 * _DAY)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(ca.key, hashes.SHA256()), key


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA that signed the server and the trusted clients
    server: Issued
    client: Issued  # CN "device-1"
    other_ca_client: Issued  # signed by a CA the broker does not trust
    expired: Issued
    revoked: Issued
    crl: Path  # lists ``revoked``


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    ca, other = _ca("ternmq test CA"), _ca("somebody else's CA")
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    server = _write(directory / "server", *_leaf(ca, "localhost", server=True))
    client = _write(directory / "client", *_leaf(ca, "device-1", server=False))
    stranger = _write(directory / "stranger", *_leaf(other, "device-2", server=False))
    expired = _write(directory / "expired", *_leaf(ca, "device-3", server=False, expired=True))
    revoked_cert, revoked_key = _leaf(ca, "device-4", server=False)
    revoked = _write(directory / "revoked", revoked_cert, revoked_key)
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.name)
        .last_update(_NOW - _DAY)
        .next_update(_NOW + 30 * _DAY)
        .add_revoked_certificate(
            x509.RevokedCertificateBuilder()
            .serial_number(revoked_cert.serial_number)
            .revocation_date(_NOW - _DAY)
            .build()
        )
        .sign(ca.key, hashes.SHA256())
    )
    crl_path = directory / "ca.crl"
    crl_path.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    return Certs(ca_path, server, client, stranger, expired, revoked, crl_path)
