"""The quick exit of the ``fedqr`` process (:mod:`fedqr.cli._exit`)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from fedqr.cli._exit import exit_status, leave


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (2, 2), (True, 1)])
def test_exit_status_is_pythons(code: object, status: int) -> None:
    assert exit_status(code) == status


def test_exit_status_of_a_message_is_1_and_writes_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_status("stopped: no data") == 1
    assert capsys.readouterr().err == "stopped: no data\n"


def test_leave_returns_while_another_thread_runs() -> None:
    release = threading.Event()
    worker = threading.Thread(target=release.wait)
    worker.start()
    try:
        leave(0)  # would end this test process if it did not wait for the worker
    finally:
        release.set()
        worker.join()


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)


def test_leave_runs_the_exit_handlers_flushes_and_keeps_the_status() -> None:
    done = _python("import atexit, sys\n"
                   "from fedqr.cli._exit import leave\n"
                   "atexit.register(lambda: print('handler ran'))\n"
                   "print('out', end='')\n"
                   "sys.stderr.write('err')\n"
                   "leave(5)\n"
                   "print('not reached')\n")
    assert done.returncode == 5
    assert done.stdout == "outhandler ran\n"
    assert done.stderr == "err"


def test_the_command_exits_with_the_commands_status() -> None:
    ok = _python("import sys; sys.argv = ['fedqr', '--help']; from fedqr.cli import main; main()")
    assert ok.returncode == 0
    assert "plan" in ok.stdout and ok.stdout.rstrip().endswith("╯")
    bad = _python("import sys; sys.argv = ['fedqr', 'no-such-command']\n"
                  "from fedqr.cli import main; main()")
    assert bad.returncode == 2
    assert "no-such-command" in bad.stderr


def test_leave_returns_where_a_stream_cannot_be_flushed() -> None:
    done = _python("import sys\n"
                   "from fedqr.cli._exit import leave\n"
                   "sys.stdout.close()\n"
                   "leave(3)\n"
                   "sys.stderr.write('returned')\n"
                   "sys.exit(4)\n")
    assert done.returncode == 4
    assert done.stderr == "returned"


def test_sigterm_while_the_output_folder_is_written_leaves_no_folder(tmp_path) -> None:
    """SIGTERM arriving while ``fedqr run`` moves its files into ``--out`` stops it as Ctrl-C
    does: the new folder and its staging folder are removed (they were left behind)."""
    out = tmp_path / "run"
    proc = _python(f"""
import os, signal, sys
import fedqr._atomic as atomic
real = atomic.move_into
def move_into(src, dst):
    os.kill(os.getpid(), signal.SIGTERM)
    return real(src, dst)
atomic.move_into = move_into
sys.argv = ["fedqr", "run", "--dataset", "digits", "--mechanism", "gaussian", "--eps", "4",
            "--clip", "5", "--sample-rate", "0.2", "--rounds", "3", "--clients-per-round", "2",
            "--num-clients", "4", "--out", {str(out)!r}]
from fedqr.cli import main
main()
""")
    assert proc.returncode != 0, proc.stderr
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))
