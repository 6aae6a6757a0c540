"""The table of bench/peers/run.py: plain text for the terminal, Markdown for results.md."""

from __future__ import annotations

from typing import Any

from workload import CASES

FRAMEWORKS = ("fedqr", "opacus", "pfl", "flower")
HEADER = ("case", "fedqr", "Opacus", "pfl", "Flower", "floor", "fastest peer / fedqr",
          "fedqr / floor", "fedqr, eval off")


def _cell(result: dict[str, Any], case: str) -> str:
    if "error" in result and not result.get("cases"):
        return "n/a"
    r = result.get("cases", {}).get(case)
    if r is None:
        return "n/a"
    if "error" in r:
        return "error"
    return f"{r['ms_min']:.1f}"


def _eval_off(doc: dict[str, Any], case: str) -> str:
    r = doc["results"]["fedqr"].get("cases", {}).get(case, {}).get("eval_off")
    return f"{r['ms_min']:.1f}" if r else "n/a"


def _rows(doc: dict[str, Any]) -> list[tuple[str, ...]]:
    rows = []
    for case in CASES:
        rat = doc["ratios"][case.name]
        peer = rat["fastest_peer_over_fedqr"]
        mine = rat["fedqr_over_floor"]
        rows.append((case.name, *(_cell(doc["results"][fw], case.name) for fw in FRAMEWORKS),
                     f"{doc['floors'][case.name]['floor_ms']:.2f}",
                     f"{peer:.3g}x ({rat['fastest_peer']})" if peer else "n/a",
                     f"{mine:.1f}x" if mine else "n/a", _eval_off(doc, case.name)))
    return rows


def _notes(doc: dict[str, Any]) -> list[str]:
    notes = []
    for fw in FRAMEWORKS:
        res = doc["results"][fw]
        if "error" in res:
            notes.append(f"{fw}: {res['error']}")
        for case, r in res.get("cases", {}).items():
            if "error" in r:
                notes.append(f"{fw} {case}: {r['error']}")
    return notes


def _versions(doc: dict[str, Any]) -> str:
    parts = []
    for fw in FRAMEWORKS:
        res = doc["results"][fw]
        version = res.get("version") or ("not installed" if "torch" in res else "not run")
        parts.append(f"{fw} {version}")
    torch_v = next((r["torch"] for r in doc["results"].values() if "torch" in r), "?")
    return ", ".join(parts) + f", torch {torch_v}, Python {doc['python']}"


def _preamble(doc: dict[str, Any]) -> list[str]:
    m = doc["machine_floor"]
    return [
        f"date: {doc['date']}; machine: {doc['machine']}; torch threads: {doc['threads']}; "
        f"1-minute load average before / after: {doc['load_average'][0]} / "
        f"{doc['load_average'][1]}",
        f"data: {doc['data']}",
        f"versions: {_versions(doc)}",
        f"ms per round: the fastest of {doc['rounds_timed']} timed rounds after "
        f"{doc['warmup_rounds']} warm-up rounds (the least disturbed on a shared machine; "
        "results.json has the median, mean and max); test loss evaluated every round",
        f"floor: measured GEMM {m['gemm_gflops']:.0f} GFLOP/s, memory {m['mem_gbps']:.1f} GB/s;"
        " max(FLOPs / GEMM rate, training bytes / bandwidth) of one round",
    ]


def render_table(doc: dict[str, Any]) -> str:
    rows = [HEADER, *_rows(doc)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = [*_preamble(doc), ""]
    for r in rows:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    for case in ("laplace-b10", "gaussian-b10"):
        f = doc["floors"][case]
        lines.append(f"floor {case}: {f['gflop']:.3f} GFLOP, {f['mbytes']:.1f} MB "
                     f"-> {f['floor_ms']:.2f} ms")
    lines += [f"note: {n}" for n in _notes(doc)]
    return "\n".join(lines)


def render_markdown(doc: dict[str, Any]) -> str:
    lines = ["# bench/peers: latest measured results", "",
             "Written by `python bench/peers/run.py` (`make bench-peers`); see README.md for "
             "what each framework is made to do and what is timed.", ""]
    lines += [f"- {p}" for p in _preamble(doc)] + [""]
    lines.append("| " + " | ".join(HEADER) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(HEADER) - 1)) + "|")
    lines += ["| " + " | ".join(r) + " |" for r in _rows(doc)]
    lines.append("")
    lines.append("Times in ms per round (fastest timed round); floor in ms. Floors of the "
                 "b = 10 cases: "
                 + "; ".join(f"{c}: {doc['floors'][c]['gflop']:.3f} GFLOP, "
                             f"{doc['floors'][c]['mbytes']:.1f} MB -> "
                             f"{doc['floors'][c]['floor_ms']:.2f} ms"
                             for c in ("laplace-b10", "gaussian-b10")) + ".")
    notes = _notes(doc)
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
