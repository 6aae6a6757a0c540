"""Bad input to ``fedqr flower supernode | superlink | run | certs``: exit 2, a message naming
the option or file, nothing written, no process started."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.flower.certs import make_certs
from fedqr.flower.cli import flower_app


def _invoke(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(flower_app, args)
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture
def good_data(tmp_path: Path) -> Path:
    path = tmp_path / "client.npz"
    np.savez(path, x=np.zeros((4, 3), np.float32), y=np.array([0, 1, 0, 1]))
    return path


@pytest.fixture
def listening() -> Iterator[int]:
    """A TCP port something listens on (a port in use)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _supernode(tmp_path: Path, data: Path, port: int, *extra: str) -> list[str]:
    return ["supernode", "--superlink", f"127.0.0.1:{port}", "--data", str(data), "--eps", "1",
            "--state-dir", str(tmp_path / "state"), *extra]


@pytest.mark.parametrize("content, needle", [
    (None, "--data: no such file"),
    (b"not a zip", "is not a NumPy .npz file"),
    ({"x": np.zeros((4, 3))}, "must hold arrays 'x' and 'y'"),
    ({"x": np.zeros((4, 3)), "y": np.zeros(5, dtype=int)}, "x of shape (n, p) and y of shape"),
    ({"x": np.zeros((4, 3)), "y": np.zeros(4)}, "y in"),
    ({"x": np.full((4, 3), np.nan), "y": np.zeros(4, dtype=int)}, "must be finite numbers"),
])
def test_bad_data_file_is_named(tmp_path: Path, listening: int, content: object,
                                needle: str) -> None:
    data = tmp_path / "client.npz"
    if isinstance(content, bytes):
        data.write_bytes(content)
    elif isinstance(content, dict):
        np.savez(data, **content)
    code, text = _invoke(_supernode(tmp_path, data, listening, "--insecure"))
    assert code == 2 and needle in text and "--data" in text, text
    assert not (tmp_path / "state").exists()


def test_unreachable_superlink_is_named(tmp_path: Path, good_data: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    code, text = _invoke(_supernode(tmp_path, good_data, port, "--insecure"))
    assert code == 2 and f"--superlink: cannot reach 127.0.0.1:{port}" in text, text
    assert not (tmp_path / "state").exists()


def test_certificate_that_does_not_match_is_named(tmp_path: Path, good_data: Path) -> None:
    make_certs(tmp_path / "a", hosts=["127.0.0.1"], num_nodes=1)
    make_certs(tmp_path / "b", hosts=["127.0.0.1"], num_nodes=1)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "a" / "superlink.pem", tmp_path / "a" / "superlink.key")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = int(server.getsockname()[1])

    def serve() -> None:  # a TLS server with CA a's certificate
        conn, _ = server.accept()
        try:
            with context.wrap_socket(conn, server_side=True):
                pass
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        code, text = _invoke(_supernode(tmp_path, good_data, port, "--root-certificates",
                                        str(tmp_path / "b" / "ca.pem"), "--auth-key",
                                        str(tmp_path / "b" / "node-0")))
    finally:
        thread.join(timeout=10)
        server.close()
    assert code == 2 and "--root-certificates" in text and "does not verify" in text, text
    assert not (tmp_path / "state").exists()


def test_superlink_port_in_use_is_named(tmp_path: Path, listening: int) -> None:
    code, text = _invoke(["superlink", "--port", str(listening), "--insecure",
                          "--state-dir", str(tmp_path / "link")])
    assert code == 2 and f"--port: cannot listen on 127.0.0.1:{listening}" in text, text
    assert not (tmp_path / "link").exists()


def test_insecure_outside_loopback_is_refused(tmp_path: Path, good_data: Path) -> None:
    code, text = _invoke(["superlink", "--host", "0.0.0.0", "--insecure",
                          "--state-dir", str(tmp_path / "link")])
    assert code == 2 and "not a loopback address" in text, text
    args = _supernode(tmp_path, good_data, 9093, "--insecure")
    args[2] = "10.1.2.3:9093"
    code, text = _invoke(args)
    assert code == 2 and "--superlink=10.1.2.3 is not a loopback address" in text, text
    code, text = _invoke(["superlink", "--state-dir", str(tmp_path / "link")])
    assert code == 2 and "--certs DIR is required" in text, text
    assert not (tmp_path / "link").exists() and not (tmp_path / "state").exists()


def test_run_needs_a_reachable_superlink(tmp_path: Path) -> None:
    code, text = _invoke(["run", "--superlink", "127.0.0.1:1", "--insecure", "--dataset",
                          "digits", "--out", str(tmp_path / "out")])
    assert code == 2 and "--superlink: cannot reach 127.0.0.1:1" in text, text
    code, text = _invoke(["deploy", "--superlink", "127.0.0.1:1", "--out",
                          str(tmp_path / "out")])
    assert code == 2 and "only used there" in text, text
    assert not (tmp_path / "out").exists()


def test_certs_refuse_to_overwrite(tmp_path: Path) -> None:
    assert _invoke(["certs", str(tmp_path / "c"), "--nodes", "2"])[0] == 0
    names = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert names == ["ca.key", "ca.pem", "node-0", "node-0.pub", "node-1", "node-1.pub",
                     "superlink.key", "superlink.pem"]
    assert (tmp_path / "c" / "node-0").stat().st_mode & 0o077 == 0  # private: owner only
    code, text = _invoke(["certs", str(tmp_path / "c")])
    assert code == 2 and "already holds ca.pem" in text, text


def test_a_port_in_time_wait_is_free_and_a_listener_is_not() -> None:
    """A SuperLink restarted right after it stopped: its closed connections linger in
    TIME-WAIT on the port for about a minute and must not block the restart."""
    from fedqr.flower.parts import check_port_free

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = int(listener.getsockname()[1])
    with pytest.raises(ValueError, match=f"--port: cannot listen on 127.0.0.1:{port}"):
        check_port_free("--port", "127.0.0.1", port)
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the server side closes first: its end stays in TIME-WAIT
    client.close()
    listener.close()
    check_port_free("--port", "127.0.0.1", port)  # no error


@pytest.mark.parametrize(("args", "needle"), [
    (["{tmp}/file"], "directory must be a folder path, got directory="),
    (["/proc/fedqr-certs"], "directory must be a writable location"),
    (["{tmp}/c", "--nodes", str(10**30)], "--nodes must be in [1, 10000]"),
    (["{tmp}/c", "--host", ""], "--host must be a host name or address (1 to 64 characters, "
                                "no spaces), got --host=''"),
    (["{tmp}/c", "--host", "a b"], "got --host='a b'"),
])
def test_certs_refuse_bad_places_and_values(tmp_path: Path, args: list[str],
                                            needle: str) -> None:
    (tmp_path / "file").write_text("x")
    code, text = _invoke(["certs", *[a.replace("{tmp}", str(tmp_path)) for a in args]])
    assert code == 2 and needle in text, text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_state_folder_serves_one_clients_rows(tmp_path: Path, listening: int,
                                                good_data: Path) -> None:
    """A node restarted on its state folder with another client's file is refused (its rows
    would be charged to the first client's ledger); the same client's file is not."""
    from fedqr.flower.state_owner import OWNER_FILE, bind_state, data_owner

    state = tmp_path / "state"
    state.mkdir()
    first = data_owner(good_data, client=None)
    assert first.startswith("sha256 ")
    bind_state(state, data=good_data, owner=first)  # the first start records the owner
    bind_state(state, data=good_data, owner=first)  # a restart with the same file: fine
    other = tmp_path / "other.npz"
    np.savez(other, x=np.ones((4, 3), np.float32), y=np.array([0, 1, 0, 1]))
    code, text = _invoke(_supernode(tmp_path, other, listening, "--insecure"))
    assert code == 2, text
    assert f"--state-dir {state} holds the ledger of {first}" in text
    assert "give this client its own --state-dir" in text
    named = tmp_path / "named"
    named.mkdir()
    bind_state(named, data=good_data, owner=data_owner(good_data, client="3"))
    bind_state(named, data=other, owner="client 3")  # the same client, its data updated
    with pytest.raises(ValueError, match=r"holds the ledger of client 3 .* rows of client 4"):
        bind_state(named, data=other, owner="client 4")
    assert sorted(p.name for p in named.iterdir()) == [OWNER_FILE]


def test_a_certificate_for_a_public_host_also_covers_the_loopback(tmp_path: Path) -> None:
    """`certs --host server.example.org` covered that name alone: the SuperLink's own server
    app process (SuperExec), which connects over 127.0.0.1, failed its TLS handshake and the
    run never started (a tester's walkthrough of deployment.md)."""
    from cryptography import x509

    code, text = _invoke(["certs", str(tmp_path / "c"), "--host", "server.example.org",
                          "--host", "10.0.0.1", "--nodes", "1"])
    assert code == 0, text
    cert = x509.load_pem_x509_certificate((tmp_path / "c" / "superlink.pem").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = set(san.get_values_for_type(x509.DNSName))
    addresses = {str(a) for a in san.get_values_for_type(x509.IPAddress)}
    assert names == {"server.example.org", "localhost"}
    assert addresses == {"10.0.0.1", "127.0.0.1"}
    assert "CN=server.example.org" in cert.subject.rfc4514_string()
    # what strict verifiers (openssl verify -x509_strict) require of the chain
    ca = x509.load_pem_x509_certificate((tmp_path / "c" / "ca.pem").read_bytes())
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ski


def test_a_supernode_s_auth_key_is_checked_before_it_starts(tmp_path: Path,
                                                            good_data: Path) -> None:
    """Flower exited 1 with its own log ("Unable to parse the private key file", "All
    SuperNodes must be registered") after the state folder was written."""
    make_certs(tmp_path / "c", hosts=["127.0.0.1"], num_nodes=1)
    ca, key = tmp_path / "c" / "ca.pem", tmp_path / "c" / "node-0"
    tls = ["--root-certificates", str(ca)]
    for extra, needle in [
        ([], "--auth-key KEY is required with TLS: the SuperLink admits registered "
             "SuperNodes only"),
        (["--auth-key", f"{key}.pub"], "--auth-key must be a SuperNode's private key (node-<i> "
                                       "of fedqr flower certs), got --auth-key="),
        (["--auth-key", f"{key}.pub"], ".pub' (a public key: give the file without .pub)"),
        (["--auth-key", str(ca)], "--auth-key must be a SuperNode's private key"),
    ]:
        code, text = _invoke(_supernode(tmp_path, good_data, 9, *tls, *extra))
        assert code == 2 and needle in text, text
        assert not (tmp_path / "state").exists()


def test_register_takes_a_public_key_only(tmp_path: Path) -> None:
    make_certs(tmp_path / "c", hosts=["127.0.0.1"], num_nodes=1)
    code, text = _invoke(["register", str(tmp_path / "c" / "node-0"), "--superlink",
                          "127.0.0.1:9", "--root-certificates", str(tmp_path / "c" / "ca.pem")])
    assert code == 2 and "PUBLIC_KEY must be a SuperNode's public key (node-<i>.pub of fedqr " \
                          "flower certs)" in text and "(a private key, which never leaves its " \
                          "client: give node-<i>.pub)" in text, text


def test_a_command_without_the_planner_does_not_offer_auto(tmp_path: Path) -> None:
    """``--sample-rate 1.5`` on deploy said "or 'auto'", which deploy then refuses."""
    code, text = _invoke(["deploy", "--dataset", "digits", "--num-clients", "3", "--rounds",
                          "2", "--sample-rate", "1.5", "--out", str(tmp_path / "o")])
    assert code == 2 and "--sample-rate must be in [1e-09, 1], got --sample-rate=1.5" in text, text
    code, text = _invoke(["simulate", "--dataset", "digits", "--rounds", "0", "--out",
                          str(tmp_path / "o")])
    assert code == 2 and "--rounds must be an integer in [1, 10000000], got" in text, text


def test_flower_s_console_text_is_printed_as_words() -> None:
    """``register`` printed Flower's colour codes as text (``[91mERROR [0m``)."""
    from fedqr.flower.parts import plain_text

    said = "\x1b[91mERROR \x1b[0m:  Exit Code: 500\n╭──────╮\n│ Public key already in use. │\n"
    assert plain_text(said) == "ERROR : Exit Code: 500 Public key already in use."
