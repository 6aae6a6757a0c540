"""One framework's process: run the requested cases and write their timings as JSON.

    python bench/peers/worker.py --framework opacus --cases laplace-b10,gaussian-b1 \
        --rounds 20 --warmup 3 --threads 2 --out /tmp/opacus.json

A framework that cannot be imported, or a case that fails, is recorded with its error (the
table then says so); nothing is made up in its place.
"""

from __future__ import annotations

import argparse
import importlib
import json
import traceback
from importlib import metadata
from typing import Any

import torch
from workload import CASE_BY_NAME, load_workload

RUNNERS = {  # framework: (module, function, distribution whose version is reported)
    "fedqr": ("fedqr_adapter", "run_fedqr", "fedqr"),
    "opacus": ("peer_opacus", "run_opacus", "opacus"),
    "pfl": ("peer_pfl", "run_pfl", "pfl"),
    "flower": ("peer_flower", "run_flower", "flwr"),
}


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", choices=sorted(RUNNERS), required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    module, func, dist = RUNNERS[args.framework]
    out: dict[str, Any] = {"framework": args.framework, "version": _version(dist),
                           "torch": torch.__version__, "threads": torch.get_num_threads(),
                           "cases": {}}
    try:
        run = getattr(importlib.import_module(module), func)
        if args.framework != "fedqr":
            importlib.import_module({"flower": "flwr"}.get(args.framework, args.framework))
    except Exception as exc:
        out["error"] = f"cannot import {dist}: {type(exc).__name__}: {exc}"
    else:
        wl = load_workload()
        out["data"] = wl.source
        for name in args.cases.split(","):
            try:
                out["cases"][name] = run(CASE_BY_NAME[name], wl, rounds=args.rounds,
                                         warmup=args.warmup)
            except Exception as exc:
                out["cases"][name] = {"error": f"{type(exc).__name__}: {exc}",
                                      "traceback": traceback.format_exc(limit=4)}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
