"""The planner: predict the final test loss of every schedule (T, b, q) and pick the best.

The twin (:mod:`fedqr.planner.twin`) simulates every schedule on a proxy of the clients'
data with the deployment's exact privacy noise; :func:`make_plan` searches the schedules and
returns a :class:`Plan`. It sits above :mod:`fedqr.sim` (it runs the engine's passes).
"""

from fedqr.planner.plan import PLANNER_VERSION, Plan, PlanNotUseful, ProxyChoice, make_plan
from fedqr.planner.scenario import DataUse, Method, Scenario
from fedqr.planner.search import Prediction, SearchSettings

__all__ = ["PLANNER_VERSION", "DataUse", "Method", "Plan", "PlanNotUseful", "Prediction",
           "ProxyChoice", "Scenario", "SearchSettings", "make_plan"]
