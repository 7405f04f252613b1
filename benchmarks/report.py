"""summary.md (one row per scenario), plot.png, and the table in benchmarks/README.md."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import orjson

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


def met_text(met: bool | None) -> str:
    return {True: "✅ yes", False: "❌ no", None: "—"}[met]


def write_summary(results_dir: Path) -> str:
    results = load(results_dir)
    lines = []
    if results:
        first = next(iter(results.values()))
        m = first.get("machine", {})
        dates = sorted(r.get("date", "") for r in results.values())
        commits = sorted({str(r.get("git_commit")) for r in results.values()})
        quick = any(r.get("quick") for r in results.values())
        lines.append(
            f"Machine: {m.get('cpu_count')} cores ({m.get('cpu_model', '?')}), "
            f"{m.get('memory_gb', '?')} GB, {m.get('platform', '?')}, Python {m.get('python')}; "
            f"database: {first.get('database')}; "
            f"run {dates[0]} → {dates[-1]} (UTC); commit {', '.join(commits)}"
            + ("; **quick run (small sizes)**" if quick else "")
            + "."
        )
        lines.append("")
    lines.append("| scenario | measured | baseline | ratio | target | met |")
    lines.append("|---|---|---|---|---|---|")
    for name, r in results.items():
        s = r.get("summary", {})
        target = r.get("target", {}).get("text", "—")
        lines.append(
            f"| {r.get('title', name)} | {s.get('measured', '—')} | {s.get('baseline', '—')} "
            f"| {s.get('ratio', '—')} | {target} | {met_text(r.get('met'))} |"
        )
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


def write_plot(results_dir: Path) -> Path | None:
    """Throughput per scenario (deliveries/s or req/s) and the latency percentiles."""
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
        add("drain", results["drain"]["measured"]["value"])
    with contextlib.suppress(KeyError, TypeError):
        add("PgQueuer", results["peer"]["baseline"]["value"])
    with contextlib.suppress(KeyError, TypeError):
        add("isolation\n(all healthy)", results["isolation"]["baseline"]["value"])
        add("isolation\n(10% hang)", results["isolation"]["measured"]["value"])
    with contextlib.suppress(KeyError, TypeError):
        for run in results["replicas"]["measured"]["runs"]:
            add(f"replicas x{run['workers']}", run["rate"])
    latency: dict[str, list[float]] = {}
    with contextlib.suppress(KeyError, TypeError):
        m = results["latency"]["measured"]
        rate = results["latency"]["parameters"]["rate_per_s"]
        latency[f"{rate:g}/s publish→received"] = [m["p50_ms"], m["p95_ms"], m["p99_ms"]]
        c = m["commit_to_received_ms"]
        latency[f"{rate:g}/s commit→received"] = [c["p50"], c["p95"], c["p99"]]
        low = m["at_low_rate"]
        latency[f"{low['rate_per_s']:g}/s publish→received"] = [
            low["p50_ms"],
            low["p95_ms"],
            low["p99_ms"],
        ]
    if not bars and not latency:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    if bars:
        labels, values = zip(*bars, strict=True)
        ax1.bar(range(len(values)), values, color="#4c72b0")
        ax1.set_xticks(range(len(values)), labels, fontsize=8)
        ax1.set_ylabel("deliveries/s (ceiling: requests/s)")
        ax1.set_title("Throughput")
        for i, v in enumerate(values):
            ax1.text(i, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=8)
    if latency:
        width = 0.8 / len(latency)
        for k, (name, values) in enumerate(latency.items()):
            xs = [i + (k - (len(latency) - 1) / 2) * width for i in range(3)]
            ax2.bar(xs, values, width=width, label=name)
            for x, v in zip(xs, values, strict=True):
                ax2.text(x, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=7)
        ax2.set_xticks(range(3), ["p50", "p95", "p99"])
        ax2.set_yscale("log")
        ax2.axhline(50, color="red", linestyle="--", linewidth=1, label="target: p99 < 50 ms")
        ax2.set_ylabel("ms (log scale)")
        ax2.set_title("Latency")
        ax2.legend(fontsize=7)
    fig.tight_layout()
    path = results_dir / "plot.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
