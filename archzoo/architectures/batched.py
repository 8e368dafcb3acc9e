"""What GA3C and SEED share: the inference server's flags, their checks, its summary."""

from __future__ import annotations

import argparse

from actors.inference import InferenceServer

DEFAULT_MAX_BATCH = 64
DEFAULT_MAX_WAIT_US = 1000.0


def add_inference_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("batched inference")
    g.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH,
                   help="most requests (each carries all E envs of one actor) per forward pass")
    g.add_argument("--max-wait-us", type=float, default=DEFAULT_MAX_WAIT_US,
                   help="longest wait (µs) after a batch's first request for more requests; "
                        "a batch closes early once every live actor is in it")


def validate_inference(cfg: argparse.Namespace) -> str | None:
    if cfg.max_batch < 1:
        return f"--max-batch must be >= 1, got {cfg.max_batch}"
    if cfg.max_wait_us < 0:
        return f"--max-wait-us must be >= 0, got {cfg.max_wait_us}"
    if cfg.topology != "star":
        return (f"--topology {cfg.topology}: {cfg.arch} has no parameter broadcast to "
                "schedule (inference is central; actors hold no policy); use --topology star")
    return None


def inference_summary(server: InferenceServer | None, client=None) -> dict:
    """summary.json's "inference" entry: batches, mean batch size and latency, dead actors."""
    if server is not None:
        return {**server.stats.summary(), "max_batch": server.max_batch,
                "max_wait_us": server.max_wait_s * 1e6, "dead_actors": server.dead}
    return {"batches": client.seq, "requests": client.seq, "mean_batch_size": 1.0,
            "mean_latency_ms": 1e3 * client.round_trip_s / max(1, client.seq)}
