"""fedqr: federated learning with client-side differential privacy (FedSGD-DPC).

Plans the number of queries T and replies per round b under per-client privacy
budgets, and simulates the resulting training fast (batched clients and repeats).

The public API (keyword-only; see ``docs/api.md``)::

    import fedqr
    data = fedqr.FederatedData.from_file("clients.csv", test_share=0.25)
    budget = dict(data=data, model="mlp", mechanism="laplace", eps=4.0, clip=5.0)
    plan = fedqr.plan(**budget)  # plan.useful is False where no schedule helps
    result = fedqr.simulate(schedule=plan, **budget)  # refused for a plan that is not useful

Names are imported on first use, so ``import fedqr`` (and ``fedqr --help``) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedqr._lazy import lazy_names
from fedqr._threads import prefer_passive_wait

prefer_passive_wait()  # before torch starts OpenMP: see fedqr._threads

__version__ = "0.1.0"

_EXPORTS = {
    "FederatedData": "fedqr.data.federated",
    "DataSpec": "fedqr.data.spec",
    "PlanResult": "fedqr.api",
    "PrivateDataWarning": "fedqr.api_results",
    "SimulationResult": "fedqr.api",
    "plan": "fedqr.api",
    "simulate": "fedqr.api",
    "make_kernel": "fedqr.models.zoo",
    "Mechanism": "fedqr.privacy",
    "DataUse": "fedqr.planner",
    "PrivacyBudgetExceeded": "fedqr.privacy",
}

__all__ = ["DataSpec", "DataUse", "FederatedData", "Mechanism", "PlanResult",
           "PrivacyBudgetExceeded", "PrivateDataWarning", "SimulationResult", "__version__",
           "make_kernel", "plan", "simulate"]

if TYPE_CHECKING:
    from fedqr.api import PlanResult, SimulationResult, plan, simulate
    from fedqr.api_results import PrivateDataWarning
    from fedqr.data.federated import FederatedData
    from fedqr.data.spec import DataSpec
    from fedqr.models.zoo import make_kernel
    from fedqr.planner import DataUse
    from fedqr.privacy import Mechanism, PrivacyBudgetExceeded


__getattr__ = lazy_names("fedqr", _EXPORTS, globals())
