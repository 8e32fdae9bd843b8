"""Test certificates made on the spot (the `cryptography` package): a CA, a server certificate for
127.0.0.1/localhost, client certificates signed by that CA, and a client certificate of another
CA (untrusted). PEM files as Kafka's PEM keystores hold them: key + certificate chain in one file."""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str, org: str = "Kray tests") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org), x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject, issuer, public_key, signing_key, *, ca: bool, sans=()) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key, password: str | None = None) -> bytes:
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


@dataclass
class Authority:
    name: x509.Name
    key: object
    cert: x509.Certificate

    @classmethod
    def make(cls, cn: str) -> "Authority":
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(cn)
        return cls(name, key, _cert(name, name, key.public_key(), key, ca=True))

    def issue(self, cn: str, *, server: bool = False) -> tuple[bytes, bytes]:
        """(certificate PEM, unencrypted PKCS#8 key PEM)"""
        key = ec.generate_private_key(ec.SECP256R1())
        sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))] if server else []
        cert = _cert(_name(cn), self.name, key.public_key(), self.key, ca=False, sans=sans)
        return _pem(cert), _key_pem(key)

    @property
    def pem(self) -> bytes:
        return _pem(self.cert)


@dataclass
class TestPki:
    directory: Path
    ca_file: Path
    server_keystore: Path  # key + certificate chain (PEM keystore file)
    server_cert: bytes
    server_key: bytes
    client_cert: Path
    client_key: Path
    untrusted_cert: Path
    untrusted_key: Path


def make_pki(directory: Path) -> TestPki:
    directory.mkdir(parents=True, exist_ok=True)
    ca, rogue = Authority.make("Kray test CA"), Authority.make("Rogue CA")
    server_cert, server_key = ca.issue("localhost", server=True)
    client_cert, client_key = ca.issue("alice-client")
    rogue_cert, rogue_key = rogue.issue("mallory-client")
    files = {"ca.pem": ca.pem, "server.keystore.pem": server_key + server_cert + ca.pem,
             "client.pem": client_cert, "client.key": client_key, "rogue.pem": rogue_cert, "rogue.key": rogue_key}
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return TestPki(directory, directory / "ca.pem", directory / "server.keystore.pem", server_cert + ca.pem,
                   server_key, directory / "client.pem", directory / "client.key", directory / "rogue.pem",
                   directory / "rogue.key")
