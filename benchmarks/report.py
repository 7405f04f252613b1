"""summary.md (one row per scenario), plot.png, and the table in benchmarks/README.md."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import orjson

from benchmarks import sweeps
from benchmarks.common import ROOT
from benchmarks.scenarios import ORDER

README = ROOT / "README.md"
START = "<!-- results:start -->"
END = "<!-- results:end -->"


def load(results_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for name in ORDER:
        path = results_dir / f"{name}.json"
        if path.exists():
            out[name] = orjson.loads(path.read_bytes())
    return out


def met_text(met: bool | None, info: bool = False) -> str:
    text = {True: "✅ yes", False: "❌ no", None: "—"}[met]
    return f"{text} (info)" if info and met is not None else text


def rows_of(name: str, r: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """The summary table's rows for one result: its `rows` when it has them (one per target
    or variant), else one row from its `summary`."""
    if r.get("rows") and not r.get("error"):
        return [
            (
                row["label"],
                row.get("measured", "—"),
                row.get("baseline", "—"),
                row.get("ratio", "—"),
                row.get("target", "—"),
                met_text(row.get("met"), bool(row.get("info"))),
            )
            for row in r["rows"]
        ]
    s = r.get("summary", {})
    return [
        (
            r.get("title", name),
            s.get("measured", "—"),
            s.get("baseline", "—"),
            s.get("ratio", "—"),
            r.get("target", {}).get("text", "—"),
            met_text(r.get("met")),
        )
    ]


def write_summary(results_dir: Path) -> str:
    results = load(results_dir)
    lines = []
    if results:
        first = next(iter(results.values()))
        m = first.get("machine", {})
        server = first.get("server") or {}
        dates = sorted(r.get("date", "") for r in results.values())
        commits = sorted({str(r.get("git_commit")) for r in results.values()})
        quick = any(r.get("quick") for r in results.values())
        lines.append(
            f"Machine: {m.get('cpu_count')} cores ({m.get('cpu_model', '?')}), "
            f"{m.get('memory_gb', '?')} GB, {m.get('platform', '?')}, Python {m.get('python')}; "
            f"database: {first.get('database')}"
            + (
                f" (Postgres {server.get('server_version')}, fsync {server.get('fsync')}, "
                f"synchronous_commit {server.get('synchronous_commit')}, "
                f"autovacuum {server.get('autovacuum')})"
                if server
                else ""
            )
            + f"; run {dates[0]} → {dates[-1]} (UTC); commit {', '.join(commits)}"
            + ("; **quick run (small sizes)**" if quick else "")
            + "."
        )
        lines.append("")
    lines.append("| scenario | measured | baseline | ratio | target | met |")
    lines.append("|---|---|---|---|---|---|")
    for name, r in results.items():
        for row in rows_of(name, r):
            lines.append("| " + " | ".join(row) + " |")
    notes = [
        f"- {r.get('title', name)}: {note}"
        for name, r in results.items()
        for note in r.get("notes", [])
    ]
    if notes:
        lines += ["", "Notes:", "", *notes]
    text = "\n".join(lines) + "\n"
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "summary.md").write_text("# Benchmark summary\n\n" + text)
    return text


def update_readme(summary: str) -> None:
    """Replace the table between the markers in benchmarks/README.md."""
    if not README.exists():
        return
    text = README.read_text()
    if START not in text or END not in text:
        return
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    README.write_text(f"{head}{START}\n{summary}{END}{tail}")


def graphile_series(results: dict[str, dict[str, Any]]) -> dict[str, dict[int, float]]:
    """Graphile Worker's sweep for the plot: jobs/s per concurrency, one series per batching
    setting (localQueue size, completion batch delay)."""
    graphile: dict[str, dict[int, float]] = {}
    with contextlib.suppress(KeyError, TypeError, AttributeError):
        for point in results["peer"]["graphile"]["points"]:
            if "rate" in point:
                knobs = (
                    f"localQueue {sweeps.off(point['local_queue'])}, "
                    f"delay {sweeps.off(point['batch_delay_ms'])}"
                )
                graphile.setdefault(knobs, {})[point["concurrency"]] = point["rate"]
    return graphile


def draw_graphile(
    ax: Any, graphile: dict[str, dict[int, float]], results: dict[str, dict[str, Any]]
) -> None:
    if not graphile:
        ax.set_visible(False)
        return
    levels = sorted({c for series in graphile.values() for c in series})
    width = 0.8 / len(graphile)
    for k, (name, series) in enumerate(sorted(graphile.items())):
        xs = [i + (k - (len(graphile) - 1) / 2) * width for i in range(len(levels))]
        ax.bar(xs, [series.get(c, 0.0) for c in levels], width=width, label=name)
    with contextlib.suppress(KeyError, TypeError):
        ax.axhline(
            results["drain"]["measured"]["value"],
            color="black",
            linestyle="--",
            linewidth=1,
            label="dispatcher (fresh drain)",
        )
    ax.set_xticks(range(len(levels)), [str(c) for c in levels])
    ax.set_xlabel("Graphile Worker concurrency")
    ax.set_ylabel("jobs/s")
    ax.set_title("Graphile Worker sweep")
    ax.legend(fontsize=6)


def write_plot(results_dir: Path) -> Path | None:
    """Throughput per scenario, the PgQueuer and Graphile Worker sweeps, and the latency
    percentiles."""
    results = load(results_dir)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    bars: list[tuple[str, float]] = []

    def add(label: str, value: Any) -> None:
        if isinstance(value, int | float) and value > 0:
            bars.append((label, float(value)))

    with contextlib.suppress(KeyError, TypeError):
        add("ceiling", results["ceiling"]["measured"]["value"])
    with contextlib.suppress(KeyError, TypeError):
        add("drain\n(fresh)", results["drain"]["measured"]["value"])
        add("drain\nanalyzed", results["drain"]["analyzed"]["rate"])
        add("drain\n2 workers", results["drain"]["two_workers"]["rate"])
    with contextlib.suppress(KeyError, TypeError):
        add("PgQueuer\n(best)", results["peer"]["baseline"]["value"])
    with contextlib.suppress(KeyError, TypeError):
        add("Graphile\n(best)", results["peer"]["graphile"]["baseline"]["value"])
    with contextlib.suppress(KeyError, TypeError):
        add("API\nevents", results["api"]["measured"]["events"]["flat_out"]["ok_rps"])
        add("API\nmessages", results["api"]["measured"]["messages"]["flat_out"]["ok_rps"])
    with contextlib.suppress(KeyError, TypeError):
        add("isolation\n(healthy)", results["isolation"]["baseline"]["value"])
        add("isolation\n(10% hang)", results["isolation"]["measured"]["value"])
        add("isolation\n(1 at 10/s)", results["isolation"]["limited"]["value"])
    with contextlib.suppress(KeyError, TypeError):
        for run in results["replicas"]["measured"]["runs"]:
            add(f"replicas\nx{run['workers']}", run["rate"])
    sweep: dict[str, dict[int, float]] = {}
    with contextlib.suppress(KeyError, TypeError):
        for point in results["peer"]["points"]:
            if "rate" in point:
                limit = f"limit {point['concurrency_limit'] or 'none'}"
                sweep.setdefault(limit, {})[point["batch_size"]] = point["rate"]
    graphile = graphile_series(results)
    latency: dict[str, list[float]] = {}
    with contextlib.suppress(KeyError, TypeError):
        m = results["latency"]["measured"]
        rate = results["latency"]["parameters"]["rate_per_s"]
        latency[f"HTTP API {rate:g}/s"] = [m["p50_ms"], m["p95_ms"], m["p99_ms"]]
        sql = m["sql_outbox"]
        latency[f"SQL outbox {rate:g}/s"] = [sql["p50_ms"], sql["p95_ms"], sql["p99_ms"]]
        c = sql["commit_to_received_ms"]
        latency["SQL commit→received"] = [c["p50"], c["p95"], c["p99"]]
    if not bars and not latency and not sweep and not graphile:
        return None
    fig, (ax1, ax3, ax4, ax2) = plt.subplots(
        1, 4, figsize=(21, 4.8), gridspec_kw={"width_ratios": [4, 2, 2, 2]}
    )
    if bars:
        labels, values = zip(*bars, strict=True)
        ax1.bar(range(len(values)), values, color="#4c72b0")
        ax1.set_xticks(range(len(values)), labels, fontsize=7)
        ax1.set_ylabel("deliveries/s (ceiling, API: requests/s)")
        ax1.set_title("Throughput")
        for i, v in enumerate(values):
            ax1.text(i, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=7)
    if sweep:
        sizes = sorted({b for series in sweep.values() for b in series})
        width = 0.8 / len(sweep)
        for k, (name, series) in enumerate(sorted(sweep.items())):
            xs = [i + (k - (len(sweep) - 1) / 2) * width for i in range(len(sizes))]
            ax3.bar(xs, [series.get(b, 0.0) for b in sizes], width=width, label=name)
        with contextlib.suppress(KeyError, TypeError):
            ax3.axhline(
                results["drain"]["measured"]["value"],
                color="black",
                linestyle="--",
                linewidth=1,
                label="dispatcher (fresh drain)",
            )
        ax3.set_xticks(range(len(sizes)), [str(b) for b in sizes])
        ax3.set_xlabel("PgQueuer batch size")
        ax3.set_ylabel("jobs/s")
        ax3.set_title("PgQueuer sweep")
        ax3.legend(fontsize=7)
    draw_graphile(ax4, graphile, results)
    if latency:
        width = 0.8 / len(latency)
        for k, (name, percentiles) in enumerate(latency.items()):
            xs = [i + (k - (len(latency) - 1) / 2) * width for i in range(3)]
            ax2.bar(xs, percentiles, width=width, label=name)
            for x, v in zip(xs, percentiles, strict=True):
                ax2.text(x, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=6)
        ax2.set_xticks(range(3), ["p50", "p95", "p99"])
        ax2.set_yscale("log")
        top = max(max(v) for v in latency.values())
        low = min(min(v) for v in latency.values())
        # The target line always in view, and room for the legend above the bars.
        ax2.set_ylim(bottom=max(min(low, 50.0) / 3, 0.1), top=max(top, 50.0) * 30)
        ax2.axhline(50, color="red", linestyle="--", linewidth=1, label="target: p99 < 50 ms")
        ax2.set_ylabel("ms (log scale)")
        ax2.set_title("Latency at 1,000 events/s")
        ax2.legend(fontsize=7)
    fig.tight_layout()
    path = results_dir / "plot.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
