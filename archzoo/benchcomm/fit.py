"""The α–β model of ``archzoo bench comm``, one fit per engine (and link):
``t ≈ α·rounds + bytes/β`` with ``rounds`` the most rounds any rank took part in and ``bytes``
the most bytes one rank sent per call, fitted by least squares on relative error over the timed
rows of the explicit topologies (star, tree, butterfly, ring), with α, 1/β ≥ 0.
"""

from __future__ import annotations

import math

import numpy as np

from archzoo.benchcomm.measure import EXPLICIT
from archzoo.benchcomm.report import engine


def fit_alpha_beta(rounds, nbytes, times) -> dict[str, float]:
    """Fit ``t ≈ α·rounds + nbytes/β`` by least squares on relative error, α ≥ 0, 1/β ≥ 0.

    Returns ``alpha_s`` (s per round), ``inv_beta_s_per_byte``, ``beta_Bps`` (bytes/s, inf when
    the bandwidth term vanishes), ``rows`` and ``median_rel_err`` (median |model − t| / t).
    """
    r = np.asarray(rounds, np.float64)
    b = np.asarray(nbytes, np.float64)
    t = np.asarray(times, np.float64)
    ok = np.isfinite(t) & (t > 0)
    r, b, t = r[ok], b[ok], t[ok]
    if t.size < 2:
        raise ValueError(f"need at least 2 timed rows to fit α and β, got {t.size}")
    a = np.stack([r / t, b / t], axis=1)  # rows scaled by 1/t: residuals are relative errors
    y = np.ones_like(t)

    def sse(x: np.ndarray) -> float:
        return float(np.sum((a @ x - y) ** 2))

    x, *_ = np.linalg.lstsq(a, y, rcond=None)
    if np.any(x < 0):  # two unknowns: the constrained optimum has one of them at 0
        cands = []
        for k in (0, 1):
            col = a[:, k]
            c = np.zeros(2)
            denom = float(col @ col)
            c[k] = max(0.0, float(col @ y) / denom) if denom > 0 else 0.0
            cands.append(c)
        x = min(cands, key=sse)
    alpha, inv_beta = float(x[0]), float(x[1])
    model = alpha * r + inv_beta * b
    return {"alpha_s": alpha, "inv_beta_s_per_byte": inv_beta,
            "beta_Bps": (1.0 / inv_beta) if inv_beta > 0 else math.inf,
            "rows": int(t.size),
            "median_rel_err": float(np.median(np.abs(model - t) / t))}



def fit_engines(rows: list[dict]) -> dict[str, dict[str, float]]:
    """One α–β fit per engine (and link) over the timed rows of the explicit topologies."""
    fits = {}
    for be in dict.fromkeys(engine(r) for r in rows):
        use = [r for r in rows if engine(r) == be and r["topology"] in EXPLICIT
               and r["time_s"]]
        if len(use) < 2:
            continue
        fits[be] = fit_alpha_beta([r["rounds_max"] for r in use], [r["bytes_max"] for r in use],
                                  [r["time_s"] for r in use])
    for r in rows:
        f = fits.get(engine(r))
        r["model_s"] = (f["alpha_s"] * r["rounds_max"] + f["inv_beta_s_per_byte"] * r["bytes_max"]
                        if f and r["topology"] in EXPLICIT else None)
    return fits


