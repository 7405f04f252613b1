"""4. CPU per delivery, per process, against the bare client's CPU per request.

No new measurement: the figures come from scenario 2's fresh drain (one worker; CPU from
`/proc` per process, from the first request the sink receives to the last delivery recorded,
divided by the deliveries) and from scenario 1 (the bare aiohttp client's own process time per
request at its best concurrency: the cost of an HTTP request in Python on this machine, with
nothing else to do). Postgres is the postmaster, its shared processes (WAL writer,
checkpointer, ...) and every backend of the drain's database (other databases' backends on a
shared server are left out).

Targets: the worker ≤ 1.3x the bare client's CPU per request, Postgres ≤ 100 µs per delivery.
For information: the sink, the 2-worker drain, and PgQueuer's and Graphile Worker's best points
(when scenario 3 ran).
"""

from __future__ import annotations

from typing import Any

from benchmarks.common import Run

NAME = "cpu"
TITLE = "4. CPU per delivery"
WORKER_TARGET = 1.3
POSTGRES_TARGET_US = 100.0
TARGET_TEXT = "worker ≤ 1.3x bare client's CPU/request; Postgres ≤ 100 µs/delivery"


def workers_us(per: dict[str, float]) -> float:
    return float(sum(v for k, v in per.items() if k.startswith("worker")))


async def run(r: Run) -> dict[str, Any]:
    ceiling = await r.require("ceiling")
    drain = await r.require("drain")
    if ceiling.get("error") or drain.get("error"):
        raise RuntimeError("scenario 1 or 2 failed; nothing to compare")
    client_us = ceiling["measured"].get("client_cpu_us_per_request")
    if not client_us:
        raise RuntimeError("scenario 1 did not report the client's CPU per request")
    per = drain["measured"]["cpu_us_per_delivery"]
    worker = workers_us(per)
    postgres = per.get("postgres")
    worker_ratio = worker / client_us
    worker_met = worker_ratio <= WORKER_TARGET
    postgres_met = postgres <= POSTGRES_TARGET_US if postgres is not None else None
    two = drain.get("two_workers", {}).get("cpu_us_per_delivery", {})
    peer = r.results.get("peer")
    peer_best = None
    graphile_best = None
    if peer and not peer.get("error"):
        peer_best = {
            "point": peer["baseline"]["name"],
            "cpu_us_per_job": peer["baseline"].get("cpu_us_per_job"),
        }
        graphile_baseline = (peer.get("graphile") or {}).get("baseline")
        if graphile_baseline:
            graphile_best = {
                "point": graphile_baseline["name"],
                "cpu_us_per_job": graphile_baseline.get("cpu_us_per_job"),
            }
    r.log(
        f"cpu: worker {worker:.0f} µs/delivery = {worker_ratio:.2f}x the bare client's "
        f"{client_us:.0f} µs/request; Postgres {postgres} µs/delivery"
    )
    rows = [
        {
            "label": "4. CPU per delivery: worker",
            "measured": f"worker {worker:.0f} µs/delivery (sink {per.get('sink', '—')} µs)",
            "baseline": f"bare client {client_us:.0f} µs/request",
            "ratio": f"{worker_ratio:.2f}x",
            "target": "≤ 1.3x the bare client's CPU/request",
            "met": worker_met,
        },
        {
            "label": "4a. CPU per delivery: Postgres",
            "measured": f"Postgres {postgres} µs/delivery"
            if postgres is not None
            else "not measured (server not on this machine)",
            "baseline": "—",
            "ratio": f"{postgres / POSTGRES_TARGET_US:.2f} of target" if postgres else "—",
            "target": "≤ 100 µs/delivery",
            "met": postgres_met,
        },
    ]
    notes = [
        "from scenario 2's fresh drain (1 worker) and scenario 1's best level; "
        "µs per delivery: " + ", ".join(f"{k} {v}" for k, v in per.items())
    ]
    if two:
        notes.append(
            "2-worker drain, µs per delivery: " + ", ".join(f"{k} {v}" for k, v in two.items())
        )
    if peer_best and peer_best["cpu_us_per_job"]:
        notes.append(
            "PgQueuer's best point, µs per job: "
            + ", ".join(f"{k} {v}" for k, v in peer_best["cpu_us_per_job"].items())
        )
    if graphile_best and graphile_best["cpu_us_per_job"]:
        notes.append(
            "Graphile Worker's best point, µs per job: "
            + ", ".join(f"{k} {v}" for k, v in graphile_best["cpu_us_per_job"].items())
        )
    return {
        "title": TITLE,
        "parameters": {
            "source": "scenario 2 (fresh drain, 1 worker) and scenario 1 (best level)",
            "deliveries": drain["measured"]["deliveries"],
            "postgres_counted": "postmaster, shared processes, backends of the drain's database",
        },
        "measured": {
            "value": worker,
            "unit": "µs CPU per delivery (worker)",
            "cpu_us_per_delivery": per,
            "postgres_us_per_delivery": postgres,
            "two_workers_cpu_us_per_delivery": two,
            "peer_best": peer_best,
            "graphile_best": graphile_best,
        },
        "baseline": {
            "name": "bare aiohttp client, CPU per request (scenario 1)",
            "value": client_us,
            "unit": "µs",
        },
        "ratio": worker_ratio,
        "target": {
            "text": TARGET_TEXT,
            "worker_ratio_max": WORKER_TARGET,
            "postgres_us_max": POSTGRES_TARGET_US,
        },
        "met": worker_met and bool(postgres_met),
        "rows": rows,
        "notes": notes,
        "summary": {
            "measured": rows[0]["measured"] + f"; Postgres {postgres} µs",
            "baseline": rows[0]["baseline"],
            "ratio": rows[0]["ratio"],
        },
    }
