"""Small explicit JSON encoding of the DP events fedqr charges.

Only a fixed set of event types is encoded; decoding never imports modules named in the
file (unlike ``DpEvent.from_named_tuple``), so a ledger file cannot run code. Floats go
through ``json`` as their shortest ``repr`` and round-trip exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attr
import dp_accounting
from dp_accounting import dp_event

from fedqr._atomic import write_json_atomic
from fedqr.privacy._checks import check_int

__all__ = [
    "LEDGER_FORMAT",
    "LEDGER_VERSION",
    "check_ledger_header",
    "decode_charges",
    "decode_event",
    "encode_event",
    "write_json_atomic",
]

LEDGER_FORMAT = "fedqr.privacy.ledger"
LEDGER_VERSION = 1
_LEDGER_KEYS = ("client_id", "eps", "delta", "accountant", "charges")

JsonEvent = dict[str, Any]


def encode_event(event: dp_accounting.DpEvent) -> JsonEvent:
    """JSON-ready dict for a Laplace, Gaussian, Poisson-sampled, composed or no-op event."""
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return {"type": "laplace", "noise_multiplier": float(event.noise_multiplier)}
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return {"type": "gaussian", "noise_multiplier": float(event.noise_multiplier)}
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        return {
            "type": "poisson_sampled",
            "sampling_probability": float(event.sampling_probability),
            "event": encode_event(event.event),
        }
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return {
            "type": "self_composed",
            "count": int(event.count),
            "event": encode_event(event.event),
        }
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return {"type": "composed", "events": [encode_event(e) for e in event.events]}
    if isinstance(event, dp_accounting.NoOpDpEvent):
        return {"type": "no_op"}
    fields = _leaf_fields(event)
    if fields is not None:  # any other mechanism's event with numeric fields, by class name
        return {"type": "leaf", "class": type(event).__name__, "fields": fields}
    raise ValueError(
        "event must be a Laplace, Gaussian, PoissonSampled, SelfComposed, Composed or NoOp "
        f"DpEvent to be saved, got event={event!r}"
    )


def _leaf_fields(event: dp_accounting.DpEvent) -> dict[str, int | float] | None:
    """The fields of an attrs DpEvent whose fields are all numbers, else ``None``."""
    if not attr.has(type(event)):
        return None
    values = attr.asdict(event, recurse=False)
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values.values()):
        return {k: v for k, v in values.items()}
    return None


def _field(data: JsonEvent, key: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        what = "number" if isinstance(kind, tuple) else kind.__name__
        raise ValueError(f"event field {key!r} must be a {what}, got event={data!r}")
    return value


def decode_event(data: object) -> dp_accounting.DpEvent:
    """Inverse of :func:`encode_event`; ``ValueError`` on anything malformed."""
    if not isinstance(data, dict):
        raise ValueError(f"event must be a JSON object, got event={data!r}")
    kind = data.get("type")
    if kind in ("laplace", "gaussian"):
        m = float(_field(data, "noise_multiplier", (int, float)))
        cls = dp_accounting.LaplaceDpEvent if kind == "laplace" else dp_accounting.GaussianDpEvent
        return cls(noise_multiplier=m)
    if kind == "poisson_sampled":
        q = float(_field(data, "sampling_probability", (int, float)))
        inner = decode_event(data.get("event"))
        return dp_accounting.PoissonSampledDpEvent(sampling_probability=q, event=inner)
    if kind == "self_composed":
        count = int(_field(data, "count", int))
        return dp_accounting.SelfComposedDpEvent(event=decode_event(data.get("event")), count=count)
    if kind == "composed":
        events = _field(data, "events", list)
        return dp_accounting.ComposedDpEvent(events=[decode_event(e) for e in events])
    if kind == "no_op":
        return dp_accounting.NoOpDpEvent()
    if kind == "leaf":
        cls = getattr(dp_event, str(data.get("class")), None)
        fields = _field(data, "fields", dict)
        ok = isinstance(cls, type) and issubclass(cls, dp_accounting.DpEvent) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in fields.values())
        if not ok:
            raise ValueError(f"event must name a dp_accounting DpEvent with numeric fields, "
                             f"got event={data!r}")
        leaf: dp_accounting.DpEvent = cls(**fields)  # type: ignore[misc]
        return leaf
    raise ValueError(
        "event type must be one of 'laplace', 'gaussian', 'poisson_sampled', "
        f"'self_composed', 'composed', 'no_op', got type={kind!r}"
    )


def check_ledger_header(data: object) -> None:
    """``ValueError`` unless ``data`` is a ledger mapping of a known format and version."""
    if not isinstance(data, Mapping) or data.get("format") != LEDGER_FORMAT:
        raise ValueError(f"data must be a mapping with format={LEDGER_FORMAT!r}, got data={data!r}")
    if data.get("version") != LEDGER_VERSION:
        raise ValueError(f"version must be {LEDGER_VERSION}, got version={data.get('version')!r}")
    missing = [k for k in _LEDGER_KEYS if k not in data]
    if missing:
        raise ValueError(f"data must have keys {missing}, got keys={sorted(data)}")


def decode_charges(items: object) -> list[tuple[dp_accounting.DpEvent, int]]:
    """Decode ``[{"event": ..., "count": n}, ...]`` into ``(event, count)`` pairs."""
    if not isinstance(items, list):
        raise ValueError(f"charges must be a list, got charges={items!r}")
    out = []
    for item in items:
        if not isinstance(item, Mapping) or "event" not in item:
            raise ValueError(f"each charge must have keys 'event' and 'count', got {item!r}")
        out.append((decode_event(item["event"]), check_int("count", item.get("count"), minimum=0)))
    return out
