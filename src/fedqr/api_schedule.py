"""A plan run by :func:`fedqr.simulate` (``schedule=``): what the run must share with it.

A :class:`~fedqr.api_results.PlanResult` recommends T, b and q for one scenario: its data, its
model, its training rule and its budgets. A run that differs in any of them is not the run it
was planned for, and its predicted loss (which the result document prints beside the achieved
one) says nothing about it; such a run is refused, naming what differs.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fedqr.api_results import PlanResult
from fedqr.data.source import DataSource
from fedqr.models.kernel import Kernel
from fedqr.models.torch_kernel import TorchKernel
from fedqr.planner.kernels import code_digest, kernel_identity
from fedqr.sim.config import Selection, SimConfig
from fedqr.sim.result import jsonable

__all__ = ["check_schedule", "model_identity", "model_parts", "same_data", "same_model",
           "same_scenario"]


def check_schedule(schedule: object, *, rounds: int | None, clients_per_round: int | None,
                   sample_rate: float | None) -> None:
    """A plan to run: a :class:`PlanResult` that found a useful schedule, and no T, b or q
    of the caller's beside it that differs from the plan's (one of the two would be ignored;
    the plan's own value, as a budget dictionary shared with :func:`fedqr.plan` gives it, is
    no conflict)."""
    if not isinstance(schedule, PlanResult):
        raise ValueError(f"schedule must be a PlanResult (what fedqr.plan returns), got "
                         f"schedule={type(schedule).__name__}")
    planned: dict[str, float] = {"rounds": schedule.rounds,
                                 "clients_per_round": schedule.clients_per_round,
                                 "sample_rate": schedule.sample_rate}
    for name, value in (("rounds", rounds), ("clients_per_round", clients_per_round),
                        ("sample_rate", sample_rate)):
        if value is not None and not _same_value(value, planned[name]):
            raise ValueError(f"schedule sets rounds, clients_per_round and sample_rate "
                             f"({name}={planned[name]} in this plan); give either schedule "
                             f"or {name}, got both ({name}={value})")
    if not schedule.useful:
        raise ValueError(f"schedule is a plan that found no schedule better than the "
                         f"untrained model (useful=False: {schedule.plan.message}); nothing "
                         "to run: give rounds and clients_per_round to run anyway")


def _same_value(given: object, planned: float) -> bool:
    """Whether a T, b or q given beside a plan is the plan's own (q to float rounding)."""
    if isinstance(given, bool) or not isinstance(given, int | float):
        return False
    return math.isclose(given, planned, rel_tol=1e-12)


def _data_key(identity: dict[str, Any]) -> object:
    """What makes two data sources the same: a file's or arrays' digest, else the recipe of a
    built-in set (its seed aside: another draw of the same recipe)."""
    if "sha256" in identity:
        return identity["sha256"]
    return {k: v for k, v in identity.items() if k != "seed"}


def same_data(schedule: PlanResult, source: DataSource) -> None:
    """``ValueError`` unless the run's data is the data the plan was made for."""
    planned, given = schedule.document["scenario"]["data"], source.identity()
    if _data_key(planned) != _data_key(given):
        def show(i: dict[str, Any]) -> str:
            return f"{i.get('name') or i.get('dataset')!r}, {i.get('num_clients')} clients"

        raise ValueError(f"schedule was planned for other data ({show(planned)}), the run "
                         f"asks data=({show(given)}; {_differences(planned, given)}): plan "
                         "again for this run's data")


_SHOWN = ("dataset", "name", "num_clients", "num_classes", "num_features", "num_train",
          "num_test", "fraction", "partition", "alpha")


def _differences(planned: dict[str, Any], given: dict[str, Any]) -> str:
    """What differs between two data identities, in words (the first few fields)."""
    diff = [f"{k} {planned.get(k)!r} -> {given.get(k)!r}" for k in _SHOWN
            if planned.get(k) != given.get(k)]
    if (planned.get("standardization") is None) != (given.get("standardization") is None):
        diff.append("standardised " + ("no -> yes" if planned.get("standardization") is None
                                        else "yes -> no"))
    if not diff:
        diff.append("the same shape, other rows, labels or split (another file digest)")
    return ", ".join(diff[:4])


def same_scenario(schedule: PlanResult, config: SimConfig, *, kernel: Kernel,
                  planned_default: Callable[[], Kernel]) -> None:
    """``ValueError`` unless the run has the plan's mechanism, clip, per-client budgets,
    accountant, model (:func:`same_model`) and training rule (``planned_default``: the model
    a plan without one was made for)."""
    sc, privacy, n = schedule.document["scenario"], config.privacy, config.num_clients
    checks: list[tuple[str, object, object]] = [
        ("mechanism", sc["mechanism"], privacy.mechanism.value)]
    if sc["mechanism"] == privacy.mechanism.value:  # then the same budgets and clip
        used = privacy.spec.accountant(privacy.accountant)  # the one that sets the noise
        checks += [("clip", float(sc["clip"]), float(privacy.clip)),
                   ("eps", _per(sc["eps"], n), privacy.client_eps(n))]
        if privacy.spec.needs_delta:
            checks.append(("delta", _per(sc["delta"], n), privacy.client_delta(n)))
        checks.append(("accountant", sc.get("accountant"), used.value if used else None))
    _compare(checks)
    same_model(sc, kernel=kernel, planned_default=planned_default)
    _compare([("lr", sc["lr"], jsonable(config.lr)),
              ("selection", Selection.ROUND_ROBIN.value,  # what the twin plans
               config.selection.value),
              ("weight_decay", sc["weight_decay"], config.weight_decay),
              ("aggregation", sc["aggregation"], config.aggregation.value)])


def same_model(scenario: dict[str, Any], *, kernel: Kernel,
               planned_default: Callable[[], Kernel]) -> None:
    """``ValueError`` unless ``kernel`` is the model of the plan's ``scenario`` document: the
    same :func:`model_identity` where the plan records it (``model_identity``) or planned the
    default model, else the same name and size (``model``, all an older plan records)."""
    planned: object
    planned_id: str | None
    if scenario["model"] is None:
        default = planned_default()
        planned, planned_id = default.describe(), model_identity(default)
    else:
        planned, planned_id = scenario["model"], scenario.get("model_identity")
    given = kernel.describe()
    if planned_id is None:
        _compare([("model", planned, given)])
    elif planned_id != model_identity(kernel):
        other = ""
        if planned == given:
            parts, now = scenario.get("model_parts") or {}, model_parts(kernel) or {}
            differ = [name for name in now if name in parts and parts[name] != now[name]]
            other = (f" (another model of that name and size: other {' and '.join(differ)})"
                     if differ else " (another model of that name and size: other layers, "
                     "initial weights, loss or code)")
        raise ValueError(f"schedule was planned for model={_show(planned)}{other}, the run "
                         f"asks model={_show(given)}: plan again for this run's model")


def model_identity(kernel: Kernel) -> str:
    """What makes two models the same for a plan, as a digest: the planner's
    :func:`~fedqr.planner.kernels.kernel_identity` (size, module structure, loss, initial
    weights, the user's code), a torch model's name aside (one factory under another name,
    a ``lambda`` around it, is the same model)."""
    identity = kernel_identity(kernel)
    if isinstance(kernel, TorchKernel):
        identity["describe"] = {k: v for k, v in identity["describe"].items() if k != "name"}
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def model_parts(kernel: Kernel) -> dict[str, str] | None:
    """The parts of a torch model's :func:`model_identity`, each as a short digest, so that a
    refused run can say which one differs: ``layers``, ``initial weights``, ``input shape``,
    ``loss`` (the loss function and its code) and ``code`` (the user's module classes);
    ``None`` for softmax regression and ``linear``, whose name and size say it all."""
    if not isinstance(kernel, TorchKernel):
        return None
    identity = kernel_identity(kernel)
    loss = f"{identity['loss']}:{code_digest([kernel.loss_fn])}"
    modules = kernel.build(torch.Generator().manual_seed(0)).modules()
    return {"layers": _digest(identity["module"]), "initial weights": identity["init_sha256"],
            "input shape": str(identity["input_shape"]), "loss": _digest(loss),
            "code": code_digest([type(m) for m in modules])}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _compare(checks: list[tuple[str, object, object]]) -> None:
    for name, planned, given in checks:
        if planned != given:
            raise ValueError(f"schedule was planned for {name}={_show(planned)}, the run asks "
                             f"{name}={_show(given)}: plan again for this run's {name}")


def _per(values: Sequence[float], n: int) -> tuple[float, ...]:
    v = tuple(float(x) for x in values)
    return v * n if len(v) == 1 else v


def _show(v: object) -> str:
    return repr(v[0]) if isinstance(v, tuple) and len(set(v)) == 1 else repr(v)
