"""The results of ``archzoo bench comm``: the workers' rows summarised (best time, ratio to
native, maxima, the counts held to archzoo.topology.counts), and what is written into
``--out``: ``comm.csv`` (one row per backend, N, op, size, topology), ``comm.md`` (the table,
the α–β fit and the aims of the issue) and ``comm.png`` (time vs size, one panel per backend ×
op, native dashed).
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path
from typing import Any

from archzoo.benchcomm.measure import EXPLICIT, timed_limit

CSV_FIELDS = [
    "backend", "link", "procs", "op", "size_bytes", "topology", "iters", "repeats", "timed",
    "time_s", "time_median_s", "time_max_s", "ratio_native", "rounds_max", "msgs_max", "bytes_max",
    "bytes_total", "rounds_per_rank", "msgs_per_rank", "bytes_per_rank",
    "expected_rounds_per_rank", "expected_msgs_per_rank", "counts_ok", "model_s",
]




def fmt_size(n: int) -> str:
    for div, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (10 ** 6, "MB"), (1 << 10, "KiB"),
                      (10 ** 3, "KB")):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def fmt_time(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "—"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def engine(row: dict) -> str:
    """A row's engine and link, as the table, fit and figure group them: ``gloo`` on
    loopback, ``gloo over netns:1gbit`` across simulated hosts."""
    link = row.get("link", "loopback")
    return row["backend"] if link == "loopback" else f"{row['backend']} over {link}"


def build_rows(raw_rows: list[dict], fanout: int) -> list[dict[str, Any]]:
    """Summarise the workers' rows: best time, ratio to native, maxima, formula check."""
    from archzoo.topology.counts import expected_counts

    rows = []
    for w in raw_rows:
        times = [x for x in w["times_s"] if x > 0]
        row = {"link": w.get("link", "loopback")}
        row.update({k: w[k] for k in ("backend", "procs", "op", "size_bytes", "topology", "iters",
                                 "repeats", "timed", "rounds_per_rank", "msgs_per_rank",
                                 "bytes_per_rank")})
        row["time_s"] = min(times) if times else None  # noise on a shared machine only adds
        row["time_median_s"] = statistics.median(times) if times else None
        row["time_max_s"] = max(times) if times else None
        native = w["topology"] == "native"
        row["rounds_max"] = None if native else max(w["rounds_per_rank"])
        row["msgs_max"] = None if native else max(w["msgs_per_rank"])
        row["bytes_max"] = None if native else max(w["bytes_per_rank"])
        row["bytes_total"] = None if native else sum(w["bytes_per_rank"])
        if native:
            row["expected_rounds_per_rank"] = row["expected_msgs_per_rank"] = None
            row["counts_ok"] = None
        else:
            exp = expected_counts(w["topology"], w["op"], w["procs"], fanout, 0)
            row["expected_msgs_per_rank"] = [exp[r][0] for r in range(w["procs"])]
            row["expected_rounds_per_rank"] = [exp[r][1] for r in range(w["procs"])]
            row["counts_ok"] = (row["expected_msgs_per_rank"] == w["msgs_per_rank"]
                                and row["expected_rounds_per_rank"] == w["rounds_per_rank"])
        rows.append(row)
    natives = {(engine(r), r["procs"], r["op"], r["size_bytes"]): r["time_s"]
               for r in rows if r["topology"] == "native"}
    for r in rows:
        nat = natives.get((engine(r), r["procs"], r["op"], r["size_bytes"]))
        r["ratio_native"] = (r["time_s"] / nat) if (r["time_s"] and nat) else None
    return rows


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, list):
        return ";".join(str(x) for x in v)
    if isinstance(v, float):
        return f"{v:.9g}"
    return str(v)


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: _cell(r.get(k)) for k in CSV_FIELDS})


def fit_lines(fits: dict[str, dict[str, float]]) -> list[str]:
    out = ["α–β model per engine: t ≈ α·rounds + bytes/β (rounds: most any rank took part in; "
           "bytes: most one rank sent per call), least squares on relative error over the timed "
           f"{'/'.join(EXPLICIT)} rows:"]
    if not fits:
        out.append("  (no timed rows of the explicit topologies: nothing to fit)")
    for be, f in fits.items():
        beta = ("∞ (bandwidth term fitted to 0)" if not math.isfinite(f["beta_Bps"])
                else f"{f['beta_Bps'] / 1e9:.2f} GB/s")
        out.append(f"  {be}: α = {f['alpha_s'] * 1e6:.1f} µs per round, β = {beta}; "
                   f"median |error| {100 * f['median_rel_err']:.0f}% over {f['rows']} rows")
    return out


def aim_lines(rows: list[dict]) -> list[str]:
    """The issue's aims for all-reduce: gloo best explicit ≤ 1.0× native; MPI ≤ 1.5× at N = 2
    and ≤ native + 20 µs per round at ≤ 1 KiB."""
    out = []
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["op"] == "all_reduce" and r["time_s"]:
            groups.setdefault((engine(r), r["procs"], r["size_bytes"]), []).append(r)
    for (be, n, size), rs in sorted(groups.items()):
        nat = next((r for r in rs if r["topology"] == "native"), None)
        exp = [r for r in rs if r["topology"] in EXPLICIT]
        if nat is None or not exp:
            continue
        best = min(exp, key=lambda r: r["time_s"])
        ratio = best["time_s"] / nat["time_s"]
        head = (f"  {be} N={n} {fmt_size(size)}: best explicit {best['topology']} "
                f"{fmt_time(best['time_s'])} = {ratio:.2f}× native {fmt_time(nat['time_s'])}")
        checks = []
        if nat["backend"] == "gloo":
            checks.append(f"≤ 1.0×: {'met' if ratio <= 1.0 else 'not met'}")
        else:
            if n == 2:
                checks.append(f"≤ 1.5×: {'met' if ratio <= 1.5 else 'not met'}")
            if size <= 1024:
                per_round = (best["time_s"] - nat["time_s"]) / max(1, best["rounds_max"])
                checks.append(f"{per_round * 1e6:+.1f} µs/round over native ≤ 20 µs: "
                              f"{'met' if per_round <= 20e-6 else 'not met'}")
        out.append(head + ("; " + "; ".join(checks) if checks else ""))
    if out:
        out.insert(0, "Aims (all-reduce; gloo: best explicit ≤ 1.0× native; mpi: ≤ 1.5× at N = 2, "
                      "≤ native + 20 µs per round at 1 KB):")
    return out


def markdown(rows: list[dict], fits: dict, fanout: int) -> str:
    lines = [f"# archzoo bench comm (fan-out/radix m = {fanout})", "",
             "time: best over the repeats of the max over ranks of the mean per-call time; "
             "rounds: most any rank took part in; msgs: most one rank sent; bytes: all ranks' "
             "sends per call; counts: measured messages and rounds of every rank = the formulas "
             "of archzoo.topology.counts. Native counts are the engine's own (not seen).", ""]
    for be in dict.fromkeys(engine(r) for r in rows):
        for op in dict.fromkeys(r["op"] for r in rows):
            sel = [r for r in rows if engine(r) == be and r["op"] == op]
            if not sel:
                continue
            lines += [f"## {be} {op}", "",
                      "| N | size | topology | time | × native | rounds | msgs/rank | "
                      "bytes total | counts |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
            for r in sel:
                ratio = "1 (baseline)" if r["topology"] == "native" else (
                    f"{r['ratio_native']:.2f}×" if r["ratio_native"] else "—")
                if not r["timed"]:
                    ratio = f"— (N > {timed_limit()}: counts only)"
                dash = "—"
                ok = dash if r["counts_ok"] is None else ("ok" if r["counts_ok"] else "MISMATCH")
                lines.append(
                    f"| {r['procs']} | {fmt_size(r['size_bytes'])} | {r['topology']} | "
                    f"{fmt_time(r['time_s'])} | {ratio} | "
                    f"{dash if r['rounds_max'] is None else r['rounds_max']} | "
                    f"{dash if r['msgs_max'] is None else r['msgs_max']} | "
                    f"{dash if r['bytes_total'] is None else fmt_size(r['bytes_total'])} | {ok} |")
            lines.append("")
    lines += fit_lines(fits)
    aims = aim_lines(rows)
    if aims:
        lines += ["", *aims]
    return "\n".join(lines) + "\n"


def figure(rows: list[dict], path: Path) -> bool:
    """comm.png: time vs size per topology, one panel per backend × op; False if no matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.ticker import NullLocator
    except ImportError:
        return False
    backends = list(dict.fromkeys(engine(r) for r in rows))
    ops = list(dict.fromkeys(r["op"] for r in rows))
    topologies = list(dict.fromkeys(r["topology"] for r in rows))
    procs = sorted({r["procs"] for r in rows if r["time_s"]})
    sizes = sorted({r["size_bytes"] for r in rows})
    colors = {name: f"C{i}" for i, name in enumerate(topologies)}
    markers = dict(zip(procs, "osD^v<>pPX*h", strict=False))
    fig, axes = plt.subplots(len(backends), len(ops), squeeze=False,
                             figsize=(5.2 * len(ops), 3.8 * len(backends)))
    for i, be in enumerate(backends):
        for j, op in enumerate(ops):
            ax = axes[i][j]
            for name in topologies:
                for n in procs:
                    pts = sorted((r["size_bytes"], r["time_s"]) for r in rows
                                 if (engine(r), r["op"], r["topology"], r["procs"])
                                 == (be, op, name, n) and r["time_s"])
                    if pts:
                        xs, ys = zip(*pts, strict=True)
                        ax.plot(xs, ys, color=colors[name], marker=markers.get(n, "o"),
                                linestyle="--" if name == "native" else "-", markersize=4)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(sizes, [fmt_size(x) for x in sizes])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_title(f"{be} {op}")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel("time per call (s)")
            ax.grid(True, which="both", alpha=0.3)
    handles = [Line2D([], [], color=colors[t], linestyle="--" if t == "native" else "-", label=t)
               for t in topologies]
    handles += [Line2D([], [], color="gray", marker=markers[n], linestyle="", label=f"N={n}")
                for n in procs]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


