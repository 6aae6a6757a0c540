"""``fedqr flower deploy`` killed by SIGKILL mid-run leaves no Flower process (within 10 s).

Every process the deployment starts gets a parent-death signal, and Flower's own children
(SuperExec, ServerApp) watch their parent's pid, so nothing keeps training or charging a
ledger once ``fedqr`` is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import require_flwr

pytestmark = pytest.mark.slow


def _processes_in(work: Path) -> list[int]:
    """Live processes whose working folder is ``work`` (every Flower process of the run)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and Path(cwd) == work:
            found.append(int(entry))
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")
@pytest.mark.parametrize("sig", [signal.SIGKILL])  # SIGHUP, SIGTERM: the same path
def test_killed_deploy_leaves_no_flower_process(tmp_path: Path, sig: signal.Signals) -> None:
    require_flwr()
    work = (tmp_path / "work").resolve()
    cmd = [sys.executable, "-c", "from fedqr.cli import app; app()", "flower", "deploy",
           "--dataset", "digits", "--num-clients", "2", "--clients-per-round", "2",
           "--rounds", "500",
           "--work-dir", str(work), "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        progress = work / "server-out" / "progress.jsonl"
        while not (progress.is_file() and progress.read_text().strip()):
            assert proc.poll() is None, "fedqr flower deploy ended before round 0"
            assert time.monotonic() < deadline, "round 0 not done within 180 s"
            time.sleep(0.2)
        assert len(_processes_in(work)) >= 4  # SuperLink, its app processes, 2 SuperNodes
    finally:
        os.kill(proc.pid, sig)
        proc.wait()
    deadline = time.monotonic() + 10
    while _processes_in(work) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {pid: _cmdline(pid) for pid in _processes_in(work)}
    for pid in left:  # do not leave them to the other tests
        os.kill(pid, signal.SIGKILL)
    assert not left, f"Flower processes still running 10 s after {sig.name}: {left}"
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")
def test_guard_takes_its_descendants_down(tmp_path: Path) -> None:
    """The guard kills its child's own children, even in a session of their own."""
    script = ("import subprocess, sys, time; "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
              "start_new_session=True); time.sleep(60)")
    guard = subprocess.Popen([sys.executable, "-m", "fedqr.flower.guard", sys.executable, "-c",
                              script], start_new_session=True, cwd=tmp_path)
    deadline = time.monotonic() + 30
    while len(_processes_in(tmp_path.resolve())) < 3:  # guard, child, grandchild
        assert time.monotonic() < deadline, "the guarded processes did not start"
        time.sleep(0.05)
    os.kill(guard.pid, signal.SIGTERM)
    guard.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _processes_in(tmp_path.resolve()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _processes_in(tmp_path.resolve())


def test_a_guard_started_by_a_script_spares_the_script_and_its_other_jobs(
        tmp_path: Path) -> None:
    """A shell script has no job control: its background jobs share its process group. The
    guard (``fedqr flower superlink ... &`` in the heart-disease example) killed that whole
    group when its command ended, the script (exit 137) and its SuperNodes included."""
    script = (f"sleep 5 & S=$!; {sys.executable} -m fedqr.flower.guard true; "
              "kill -0 $S && echo sibling-alive; kill $S")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          start_new_session=True)  # the script leads its own group
    assert done.returncode == 0 and "sibling-alive" in done.stdout, (done.returncode,
                                                                     done.stderr)


@pytest.mark.parametrize("confirmed", [True, False])
def test_an_interrupted_remote_run_is_stopped_on_its_superlink(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, confirmed: bool) -> None:
    """Ctrl-C while another SuperLink runs the ServerApp sends ``flwr stop`` (the ServerApp is
    the SuperLink's child, not fedqr's: it went on charging the clients' ledgers), and says
    whether the SuperLink confirmed it."""
    from fedqr.flower import runner
    from fedqr.flower.config import FlowerRunConfig
    from fedqr.flower.launch import LocalFederation

    stops: list[str] = []

    def submit(cfg: FlowerRunConfig, **_: object) -> tuple[FlowerRunConfig, Path, str]:
        return cfg, tmp_path, "4242"

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    def stop(self: LocalFederation, run_id: str, **_: object) -> bool:
        stops.append(run_id)
        assert self.remote == ("10.0.0.1:9093", None)
        return confirmed

    monkeypatch.setattr(runner, "_submit", submit)
    monkeypatch.setattr(runner, "_await", interrupted)
    monkeypatch.setattr(LocalFederation, "flwr_stop", stop)
    with pytest.raises(runner.RemoteInterrupted) as caught:
        runner.run_remote(FlowerRunConfig(), address="10.0.0.1:9093", ca=None, work=tmp_path,
                          timeout_s=60)
    assert stops == ["4242"]
    said = str(caught.value)
    if confirmed:
        assert said == "run 4242 was stopped on the SuperLink 10.0.0.1:9093 (flwr stop)"
    else:
        assert "may still be running and spending the clients' budgets" in said
        assert "flwr stop 4242" in said


def test_free_ports_lie_below_the_ephemeral_range() -> None:
    """A port of the ephemeral range, free when picked, could be taken by an outgoing
    connection before the Flower process bound it ("address already in use" in a CI run)."""
    import socket

    from fedqr.flower.procs import _ephemeral_low, free_port

    low = _ephemeral_low()
    for _ in range(20):
        port = free_port()
        assert low <= 2048 or 1024 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # still free
