"""fedqr._prefetch: RDP curves computed ahead in a forked process give the same noise
multipliers, bit for bit, and spare the planner's tables most of their curves."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from fedqr import _prefetch
from fedqr.theory.calibration import RdpNoiseTable

_CHILD = """
import json, sys
from fedqr import _prefetch
started = _prefetch.start(sample_rate=0.02, eps=[1.0, 3.0], delta=[1e-5, 1e-5])
got = _prefetch.curves(0.02, wait_s=60.0)
from fedqr.theory.calibration import RdpNoiseTable
replies = [1, 2, 3, 5, 8, 13, 40, 100, 333, 1000, 2048]
out = {"started": started, "prefetched": len(got)}
for eps in (1.0, 3.0):
    table = RdpNoiseTable(sample_rate=0.02, eps=eps, delta=1e-5)
    out[str(eps)] = [float(z) for z in table.noise_multipliers(replies)]
    out["own_" + str(eps)] = table.rdp_evaluations - len(got)
print(json.dumps(out))
"""


def test_prefetched_curves_give_the_same_multipliers_and_save_the_tables_work() -> None:
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          timeout=300, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["started"] and got["prefetched"] >= 10
    replies = [1, 2, 3, 5, 8, 13, 40, 100, 333, 1000, 2048]
    for eps in (1.0, 3.0):
        alone = RdpNoiseTable(sample_rate=0.02, eps=eps, delta=1e-5, prefetched=False)
        z = alone.noise_multipliers(replies)
        assert np.array_equal(np.asarray(got[str(eps)]), z)  # bit for bit
        # the table computed itself at most a few curves (refinements inside a bracket)
        assert got["own_" + str(eps)] < alone.rdp_evaluations / 2


def test_no_prefetch_where_torch_is_loaded_or_nothing_was_started() -> None:
    import torch  # noqa: F401  (a fork would copy a process whose thread pools may run)

    assert not _prefetch.start(sample_rate=0.05, eps=[1.0], delta=[1e-5])
    assert _prefetch.curves(0.05, wait_s=0.0) == {}


def test_fill_covers_the_reply_counts_it_names() -> None:
    table = RdpNoiseTable(sample_rate=0.01, eps=2.0, delta=1e-5, prefetched=False)
    table.fill(64)
    filled = table.rdp_evaluations
    z = table.noise_multipliers(np.arange(1, 65))
    fresh = RdpNoiseTable(sample_rate=0.01, eps=2.0, delta=1e-5, prefetched=False)
    assert np.array_equal(z, fresh.noise_multipliers(np.arange(1, 65)))
    assert table.rdp_evaluations - filled <= fresh.rdp_evaluations // 2
