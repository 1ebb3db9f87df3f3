"""The Study page's figure and tables, from a committed `divclip study` summary (no training, no statistics here:
every number is read from the file the study wrote).

`load_results(path)` reads and checks the file; `curves_figure(task)` draws held-out accuracy against the RL
step, one line per method (the mean over seeds) inside a band of ± one standard deviation over seeds;
`method_rows(task)` and `comparison_rows(task)` are the two tables; `claim_lines(task)` the paper's claims.
"""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go

RESULTS = Path(__file__).resolve().parent / "examples" / "study_results.json"
"""The committed results of the study docs/evidence.md describes."""
MAX_RESULTS_BYTES = 8 * 2**20
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
_METRIC_NAMES = {
    "final_accuracy": "final accuracy",
    "final_pass_at_k": "final pass@k",
    "auc": "area under curve",
    "steps_to_90": "steps to 90 %",
    "entropy_mean": "entropy (mean)",
}


def load_results(path=RESULTS) -> dict:
    """The summary JSON at `path`; ValueError (naming the file) when it is missing, too large or not a summary.
    Read as JSON only, never evaluated."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"study results {str(path)!r} do not exist; `divclip study` writes summary.json")
    if path.stat().st_size > MAX_RESULTS_BYTES:
        raise ValueError(f"study results {str(path)!r} are over {MAX_RESULTS_BYTES} bytes")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"study results {str(path)!r} are not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), dict) or not data["tasks"]:
        raise ValueError(f"study results {str(path)!r} have no 'tasks': not a `divclip study` summary")
    return data


def wall_seconds(results: dict) -> float:
    """The study's wall time: its first invocation plus any reruns (`cost.earlier_invocations`)."""
    cost = results.get("cost") or {}
    return float(sum(c.get("wall_s") or 0.0 for c in [*cost.get("earlier_invocations", []), cost]))


def _band_colour(hex_colour: str, alpha: float = 0.18) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _drawn(task: dict, methods) -> set:
    """The method names a figure draws: `methods` (None: every method of the task) and the baseline."""
    names = set(task["methods"]) if methods is None else set(methods)
    unknown = names - set(task["methods"])
    if unknown:
        raise ValueError(f"methods must be methods of the task {sorted(task['methods'])}, got {sorted(unknown)}")
    return names | {task["baseline"]}


def curves_figure(task: dict, title: str = "", methods=None) -> go.Figure:
    """Held-out greedy accuracy against the RL step: mean over seeds (line) and ± one sd (band), per method
    (`methods`: the names drawn beside the baseline; None: all; each keeps its colour of the whole list)."""
    fig = go.Figure()
    drawn = _drawn(task, methods)
    for i, (name, row) in enumerate(task["methods"].items()):
        curve = row.get("curve")
        if not curve or name not in drawn:
            continue
        colour = COLOURS[i % len(COLOURS)]
        steps = curve["steps"]
        fig.add_trace(
            go.Scatter(
                x=steps + steps[::-1],
                # an accuracy lies in [0, 1]: the band is cut there (mean ± sd of a skewed spread can pass 1)
                y=[min(1.0, v) for v in curve["hi"]] + [max(0.0, v) for v in curve["lo"][::-1]],
                fill="toself",
                mode="lines",
                fillcolor=_band_colour(colour),
                line=dict(width=0),
                hoverinfo="skip",
                showlegend=False,
                name=f"{row['label']} ± sd",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=curve["mean"],
                mode="lines+markers",
                line=dict(color=colour, width=2),
                name=f"{row['label']} (n = {row['n_seeds']})",
                hovertemplate="step %{x}: accuracy %{y:.3f}<extra>" + row["label"] + "</extra>",
            )
        )
    fig.update_layout(
        title=title or None,
        xaxis_title="RL step",
        yaxis_title="held-out accuracy (greedy)",
        yaxis_range=[0, 1.02],
        height=420,
        margin=dict(l=60, r=20, t=50 if title else 20, b=50),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )
    return fig


def _round(v, digits: int = 4):
    return None if v is None else round(v, digits)


def _show(v) -> str:
    return "n/a" if v is None else f"{v:+.3g}"


def difference_figure(task: dict, methods=None) -> go.Figure:
    """Each method's held-out accuracy minus the baseline's on the same seed, in points, against the RL step:
    one thin line per seed and the mean over seeds (the paired view the statistics use); `methods`: the names
    drawn (None: every method but the baseline)."""
    fig = go.Figure()
    base = task["methods"][task["baseline"]]
    if not base.get("curve") or "per_seed" not in base["curve"]:
        return fig
    drawn = _drawn(task, methods)
    for i, (name, row) in enumerate(task["methods"].items()):
        if name == task["baseline"] or not row.get("curve") or name not in drawn:
            continue
        colour = COLOURS[i % len(COLOURS)]
        steps = row["curve"]["steps"]
        diffs = [
            [100 * (a - b) for a, b in zip(x, y)] for x, y in zip(row["curve"]["per_seed"], base["curve"]["per_seed"])
        ]
        for seed, d in zip(task["seeds"], diffs):
            fig.add_trace(
                go.Scatter(
                    x=steps,
                    y=d,
                    mode="lines",
                    line=dict(color=_band_colour(colour, 0.35), width=1),
                    showlegend=False,
                    hovertemplate=f"seed {seed}, step %{{x}}: %{{y:+.1f}} points<extra>{row['label']}</extra>",
                )
            )
        mean = [sum(col) / len(col) for col in zip(*diffs)]
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=mean,
                mode="lines+markers",
                line=dict(color=colour, width=3),
                name=f"{row['label']} − {base['label']}, mean of {len(diffs)} seeds",
            )
        )
    fig.add_hline(y=0, line=dict(color="#444", width=1, dash="dot"))
    fig.update_layout(
        xaxis_title="RL step",
        yaxis_title=f"accuracy minus {base['label']} (points)",
        height=380,
        margin=dict(l=60, r=20, t=20, b=50),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )
    return fig


def method_rows(task: dict) -> list[dict]:
    """One row per method: means (and the final accuracy's sd) over seeds, clip fractions by side."""
    rows = []
    for row in task["methods"].values():
        rows.append(
            {
                "method": row["label"],
                "seeds": row["n_seeds"],
                "final accuracy": _round(row["final_accuracy"]["mean"]),
                "sd": _round(row["final_accuracy"]["std"]),
                "pass@k": _round(row["final_pass_at_k"]["mean"]),
                "AUC": _round(row["auc"]["mean"]),
                "steps to 90 %": _round(row["steps_to_90"]["mean"]),
                "entropy": _round(row["entropy_mean"]["mean"]),
                "clip A<0": _round(row["clipfrac_low"]["mean"]),
                "clip A>0": _round(row["clipfrac_high"]["mean"]),
            }
        )
    return rows


def comparison_rows(task: dict) -> list[dict]:
    """One row per (metric, method): the paired difference to the baseline, its interval, p (Holm), MDE, verdict."""
    labels = {k: v["label"] for k, v in task["methods"].items()}
    rows = []
    for metric, comparisons in task["comparisons"].items():
        for c in comparisons:
            rows.append(
                {
                    "metric": _METRIC_NAMES.get(metric, metric),
                    "method": labels.get(c["method"], c["method"]),
                    "verdict": c["verdict"],
                    f"minus {labels[task['baseline']]}": _round(c["diff"]),
                    "interval": f"[{_show(c['ci_low'])}, {_show(c['ci_high'])}]",
                    "p (Holm)": _round(c["p_holm"]),
                    "smallest detectable": _round(c["mde"]),
                }
            )
    return rows


def claim_lines(task: dict, methods=None) -> list[str]:
    """The paper's three claims as measured, one Markdown line each, per compared method (`methods`: those
    shown; None: all)."""
    lines = []
    for method, claims in task.get("claims", {}).items():
        if methods is not None and method not in methods:
            continue
        label = task["methods"][method]["label"]
        for c in claims.values():
            est, lo, hi = (c[k] for k in ("estimate", "ci_low", "ci_high"))
            show = lambda v: "n/a" if v is None else f"{v:.3g}"  # noqa: E731
            lines.append(
                f"**{label}**, {c['what']}: {show(est)} (95 % interval {show(lo)} to {show(hi)}; paper: "
                f"{c['claimed']:g}). {c['verdict'].capitalize()}."
            )
    return lines


__all__ = [
    "RESULTS",
    "claim_lines",
    "comparison_rows",
    "curves_figure",
    "difference_figure",
    "load_results",
    "method_rows",
    "wall_seconds",
]
