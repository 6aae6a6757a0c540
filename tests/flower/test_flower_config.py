"""The Flower app's run configuration: round trip, errors naming the key, the engine's twin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedqr.data import DatasetName
from fedqr.flower.config import FlowerRunConfig
from fedqr.privacy import Mechanism
from fedqr.sim.config import NoiseSeeding, Selection


def test_run_config_round_trip() -> None:
    cfg = FlowerRunConfig(num_clients=4, clients_per_round=2, rounds=3, eps=(1.0, 2.0, 3.0, 4.5),
                          dataset=DatasetName.DIGITS, mechanism=Mechanism.LAPLACE, clip=20.0,
                          sample_rate=1.0, state_dir="/tmp/s")
    table = cfg.to_run_config()
    assert table["eps"] == "1.0,2.0,3.0,4.5" and table["num-clients"] == 4
    assert all(isinstance(v, bool | int | float | str) for v in table.values())
    assert FlowerRunConfig.from_run_config(table) == cfg


def test_sim_config_is_per_reply_round_robin() -> None:
    sim = FlowerRunConfig(num_clients=3, clients_per_round=2, rounds=5, seed=7).sim_config()
    assert sim.noise_seeding is NoiseSeeding.PER_REPLY
    assert sim.selection is Selection.ROUND_ROBIN and sim.repeats == 1 and sim.seed == 7


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ({"num-clients": 0}, "num_clients must be in [1, 10000000], got num_clients=0"),
        ({"clients-per-round": 11}, "clients_per_round must be in [1, num_clients=10]"),
        ({"eps": "-1"}, "eps must be > 0"),
        ({"eps": "a,b"}, "eps must be a number or comma-separated per-client numbers"),
        ({"mechanism": "cauchy"}, "mechanism must be one of laplace, gaussian, none"),
        ({"rounds": 2.5}, "rounds must be a int, got rounds=2.5"),
        ({"round-timeout": 0}, "round_timeout must be > 0"),
        ({"min-replies": 0}, "min_replies must be in [1, clients_per_round=10]"),
        ({"fraction": 1.5}, "fraction must be in (0, 1]"),
        ({"colour": "red"}, "run config keys must be among"),
    ],
)
def test_bad_run_config_names_the_key(table: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        FlowerRunConfig.from_run_config(table)
    assert needle in str(info.value)


def test_cli_module_does_not_import_flwr() -> None:
    code = ("import sys, fedqr.flower, fedqr.flower.cli, fedqr.flower.client_logic, "
            "fedqr.flower.server_logic; assert 'flwr' not in sys.modules, 'flwr imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_supernode_checks_its_rows_without_importing_torch(tmp_path: Path) -> None:
    """``fedqr flower supernode`` reads and checks the node's rows before it replaces itself
    with the SuperNode process (which imports torch once): without ``--model`` that check
    needs NumPy only, not torch, dp-accounting or flwr (3 s of a SuperNode's start)."""
    path = tmp_path / "client.npz"
    np.savez(path, x=np.ones((4, 3), np.float32), y=np.array([0, 1, 0, 1]))
    code = ("import sys; from pathlib import Path; "
            "from fedqr.flower.cli_parties import _check_node_model as check; "
            f"model, owner = check(Path({str(path)!r}), model=None, hidden='16', "
            "standardize=True, client_column='client', label_column='label', client_id=None); "
            "assert model is None and owner; "
            "heavy = [m for m in ('torch', 'dp_accounting', 'flwr') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
