"""The command lines of the two sides (a SuperLink, a SuperNode) and their start-up checks.

Shared by ``fedqr flower superlink`` / ``supernode`` / ``run`` (one party each, on its own
machine) and ``fedqr flower deploy`` (all of them on 127.0.0.1).
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import sys
from dataclasses import dataclass
from pathlib import Path

from fedqr.flower.certs import is_loopback

NodeConfigValue = str | int | float


@dataclass(frozen=True, kw_only=True)
class LinkTls:
    """The SuperLink's TLS files (``fedqr flower certs``) and whether it admits only
    registered SuperNodes."""

    certfile: Path
    keyfile: Path
    ca: Path
    auth: bool = True


def split_address(name: str, address: str) -> tuple[str, int]:
    """``HOST:PORT`` as ``(host, port)``.

    Raises
    ------
    ValueError
        Naming the option, if it is not ``HOST:PORT`` with a port in 1..65535.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{name} must be HOST:PORT with a port in 1..65535, got "
                         f"{name}={address!r}")
    return host.strip("[]"), int(port)


def check_insecure(name: str, host: str, *, insecure: bool, force: bool) -> None:
    """Refuse ``--insecure`` for an address other than this machine unless forced."""
    if insecure and not is_loopback(host) and not force:
        raise ValueError(f"{name}={host} is not a loopback address: --insecure would send "
                         "models and replies in clear text; use TLS (fedqr flower certs), or "
                         "add --force-insecure if the network is private")


def check_port_free(name: str, host: str, port: int) -> None:
    """Raise ``ValueError`` naming the option if ``host:port`` cannot be bound.

    Bound as the servers bind (``SO_REUSEADDR``): a listener is found, but the closed
    connections of a SuperLink just stopped (TIME-WAIT, about a minute) do not block its
    restart on the same port.
    """
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                       socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ValueError(f"{name}: cannot listen on {host}:{port} ({e.strerror}); is the "
                             "port in use?") from None


def check_superlink(host: str, port: int, *, ca: Path | None, timeout_s: float = 5.0) -> None:
    """Connect to the SuperLink; with ``ca``, verify its certificate (TLS handshake).

    Raises
    ------
    ValueError
        Naming ``--superlink`` (unreachable) or ``--root-certificates`` (no match).
    """
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as e:
        raise ValueError(f"--superlink: cannot reach {host}:{port} "
                         f"({e.strerror or e}); is the SuperLink running and the port "
                         "open?") from None
    with sock:
        if ca is None:
            return
        try:
            context = ssl.create_default_context(cafile=str(ca))
        except (ssl.SSLError, OSError) as e:
            raise ValueError(f"--root-certificates: {ca} is not a PEM CA certificate "
                             f"({e})") from None
        try:
            with context.wrap_socket(sock, server_hostname=host):
                pass
        except ssl.SSLError as e:
            raise ValueError(f"--root-certificates: {ca} does not verify the SuperLink's "
                             f"certificate at {host}:{port} ({e})") from None


def check_file(name: str, path: Path) -> Path:
    """``path``, resolved, if it is a readable file."""
    if not path.is_file():
        raise ValueError(f"{name}: no such file: {path}")
    return path.resolve()


def plain_text(text: str) -> str:
    """Flower's console output as one line of words: without its colour codes and box
    drawing (printed as text, they read ``[91mERROR [0m``)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return " ".join(re.sub(r"[\u2500-\u257f]+", " ", text).split())


def check_node_key(name: str, path: Path, *, private: bool) -> Path:
    """``path``, resolved, if it is a SuperNode's OpenSSH elliptic-curve key of the kind
    Flower reads (``private``: ``node-<i>`` of ``fedqr flower certs``, which the SuperNode signs
    with; else ``node-<i>.pub``, which the SuperLink registers); ``ValueError`` naming
    ``name`` otherwise (Flower exits with its own error code and text)."""
    from cryptography.hazmat.primitives.asymmetric import ec

    path = check_file(name, path)
    raw = path.read_bytes()
    want = ("private key (node-<i> of fedqr flower certs)" if private
            else "public key (node-<i>.pub of fedqr flower certs)")
    key, why = _ssh_key(raw, private=private)
    if key is None:
        if _ssh_key(raw, private=not private)[0] is not None:
            why = ("a public key: give the file without .pub" if private else
                   "a private key, which never leaves its client: give node-<i>.pub")
        raise ValueError(f"{name} must be a SuperNode's {want}, got {name}={str(path)!r} "
                         f"({why})")
    if not isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        raise ValueError(f"{name} must be a SuperNode's {want}, an elliptic-curve key, got "
                         f"{name}={str(path)!r} (a {type(key).__name__})")
    return path


def _ssh_key(raw: bytes, *, private: bool) -> tuple[object | None, str]:
    """The OpenSSH private or public key in ``raw``, or ``None`` and why not."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import (
        load_ssh_private_key,
        load_ssh_public_key,
    )

    try:
        return (load_ssh_private_key(raw, None) if private else load_ssh_public_key(raw)), ""
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        return None, f"not an OpenSSH key: {e}"


def superlink_args(*, host: str, port: int, tls: LinkTls | None,
                   simulation: bool = False) -> list[str]:
    """fedqr's SuperLink process (:mod:`fedqr.flower.link_main`: Flower's ``flower-superlink``
    with a configurable node expiry) and its arguments (insecure when ``tls`` is ``None``)."""
    args = [sys.executable, "-m", "fedqr.flower.link_main", "--host", host, "--port", str(port),
            "--disable-runtime-dependency-installation"]
    if tls is None:
        args.append("--insecure")
    else:
        args += ["--ssl-certfile", str(tls.certfile), "--ssl-keyfile", str(tls.keyfile),
                 "--ssl-ca-certfile", str(tls.ca)]
        if tls.auth:
            args.append("--enable-supernode-auth")
    if simulation:
        args.append("--simulation")
    return args


def node_config_text(config: dict[str, NodeConfigValue]) -> str:
    """Flower's ``--node-config`` string (strings quoted)."""
    return " ".join(f"{k}={json.dumps(v) if isinstance(v, str) else v}"
                    for k, v in config.items())


def supernode_args(*, superlink: str, runtime_port: int, node_config: dict[str, NodeConfigValue],
                   root_cert: Path | None, auth_key: Path | None) -> list[str]:
    """fedqr's SuperNode process (:mod:`fedqr.flower.node_main`) and its arguments."""
    args = [sys.executable, "-m", "fedqr.flower.node_main", "--superlink", superlink,
            "--isolation", "process", "--host", "127.0.0.1", "--port", str(runtime_port),
            "--node-config", node_config_text(node_config)]
    args += ["--root-certificates", str(root_cert)] if root_cert is not None else ["--insecure"]
    if auth_key is not None:
        args += ["--auth-supernode-private-key", str(auth_key)]
    return args


def cli_config(address: str, *, ca: Path | None) -> dict[str, object]:
    """The ``flwr`` CLI's ``config.toml`` naming this SuperLink as federation ``fedqr``."""
    conn: dict[str, object] = {"address": address}
    if ca is None:
        conn["insecure"] = True
    else:
        conn["root-certificates"] = str(ca)
    return {"superlink": {"default": "fedqr", "fedqr": conn}}
