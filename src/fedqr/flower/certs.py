"""``fedqr flower certs``: a CA, the SuperLink's TLS certificate and one key pair per SuperNode.

Made with the ``cryptography`` package:

- ``ca.pem`` / ``ca.key``: a self-signed certificate authority (EC P-384). ``ca.pem`` goes to
  every SuperNode (``--root-certificates``); ``ca.key`` stays with whoever issues certificates.
- ``superlink.pem`` / ``superlink.key``: the SuperLink's certificate, signed by the CA, valid
  for the given host names and addresses (subject alternative names).
- ``node-<i>`` (OpenSSH EC P-384 private key) / ``node-<i>.pub``: SuperNode ``i``'s
  authentication key pair (Flower's node authentication). The private key goes to that
  client only; the public key is registered with the SuperLink.

Private keys are written with mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedqr._atomic import check_writable_dir

VALID_DAYS = 365


def _write(path: Path, data: bytes, *, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fedqr"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _san(hosts: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


MAX_NODES = 10_000
"""The most SuperNode key pairs one call makes."""


LOOPBACK_HOSTS = ("localhost", "127.0.0.1")
"""Names the SuperLink's certificate always covers besides the hosts given: the SuperLink's
own Flower process for server apps (SuperExec) connects to it over the loopback, and a
certificate for ``--host server.example.org`` alone failed its TLS handshake (the run never
started)."""


def make_certs(out: Path, *, hosts: list[str], num_nodes: int) -> list[Path]:
    """Write the CA, the SuperLink's certificate for ``hosts`` (and
    :data:`LOOPBACK_HOSTS`) and ``num_nodes`` key pairs.

    Returns the files written. ``out`` must not hold certificates already (nothing is
    overwritten).

    Raises
    ------
    ValueError
        If a host is not a name or address, ``num_nodes`` < 1 or ``out`` already holds
        ``ca.pem``.
    """
    if not 1 <= num_nodes <= MAX_NODES:
        raise ValueError(f"--nodes must be in [1, {MAX_NODES}], got --nodes={num_nodes}")
    bad = [h for h in hosts if not 1 <= len(h) <= 64 or any(c.isspace() for c in h)]
    if bad:
        raise ValueError(f"--host must be a host name or address (1 to 64 characters, no "
                         f"spaces), got --host={bad[0]!r}")
    hosts = [*hosts, *(h for h in LOOPBACK_HOSTS if h not in hosts)]
    check_writable_dir("directory", out)  # a file, or a place nothing can be written
    if (out / "ca.pem").exists():
        raise ValueError(f"{out} already holds ca.pem: give an empty folder (nothing is "
                         "overwritten)")
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca = (x509.CertificateBuilder().subject_name(_name("fedqr CA")).issuer_name(_name("fedqr CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(_key_usage(cert_sign=True), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA384()))
    link_key = ec.generate_private_key(ec.SECP384R1())
    link = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
            .public_key(link_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(_san(hosts), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(link_key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA384()))
    pem = serialization.Encoding.PEM
    written = {
        out / "ca.pem": (ca.public_bytes(pem), False),
        out / "ca.key": (_private_pem(ca_key), True),
        out / "superlink.pem": (link.public_bytes(pem), False),
        out / "superlink.key": (_private_pem(link_key), True),
    }
    for i in range(num_nodes):
        key = ec.generate_private_key(ec.SECP384R1())
        written[out / f"node-{i}"] = (key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption()), True)
        written[out / f"node-{i}.pub"] = (key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH), False)
    for path, (data, private) in written.items():
        _write(path, data, private=private)
    return list(written)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    """The CA signs certificates (and CRLs); the SuperLink's EC key signs its TLS handshakes:
    strict verifiers (``openssl verify -x509_strict``, Python 3.13's default context) refuse a
    chain without these, and without the key identifiers."""
    return x509.KeyUsage(digital_signature=not cert_sign, content_commitment=False,
                         key_encipherment=False, data_encipherment=False,
                         key_agreement=not cert_sign, key_cert_sign=cert_sign,
                         crl_sign=cert_sign, encipher_only=False, decipher_only=False)


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
