"""`divclip realloc`: where mass can move and where it does move on a small categorical policy.

Advantages that start with a minus need `--adv=-1,1,0.5` (argparse would read `-1,1,0.5` as an option).
`run` raises ValueError naming the argument on bad input (`divclip.cli.main`: one line, exit 2).
"""

from __future__ import annotations

import argparse
import json
import math

from divclip.theory.measures import MEASURES
from divclip.theory.reallocation import (
    DEFAULT_BUCKET_EDGES,
    DEFAULT_COMPARE_SPECS,
    DEFAULT_EPOCHS,
    DEFAULT_LR,
    MAX_ABS_ADVANTAGE,
    MAX_ACTIONS,
    check_advantages,
    check_probs,
    constrained_optimum,
    feasible_region,
    make_buckets,
)
from divclip.theory.spec import PRESETS, ClipSpec, parse_method, spec_label


class _LibraryHelp(argparse.HelpFormatter):
    """Fills the `{name}`s of this parser's help texts from the library when the help is printed, not when the
    parser is built: the defaults live in `divclip.theory.reallocation`, which imports torch."""

    def _get_help_string(self, action):
        if not action.help or "{" not in action.help:
            return action.help
        from divclip.theory.softmax_dynamics import MAX_EPOCHS, MAX_LR

        return action.help.format(
            measures=sorted(MEASURES),
            presets=sorted(PRESETS),
            epochs=DEFAULT_EPOCHS,
            lr=DEFAULT_LR,
            max_actions=MAX_ACTIONS,
            max_adv=MAX_ABS_ADVANTAGE,
            max_epochs=MAX_EPOCHS,
            max_lr=MAX_LR,
            buckets=",".join(f"{e:g}" for e in DEFAULT_BUCKET_EDGES),
            compare=list(DEFAULT_COMPARE_SPECS),
        )


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "realloc",
        help="where probability mass can and does move under a clip measure (feasible box, LP optimum, PPO epochs)",
        description="Feasible new probabilities, the one-step constrained optimum and multi-epoch softmax PG "
        "for a categorical π_old. Negative first values need '=': --adv=-1,1,0.5.",
        formatter_class=_LibraryHelp,
    )
    p.add_argument(
        "--probs",
        required=True,
        help="π_old as comma-separated probabilities summing to 1 (2 to {max_actions} actions)",
    )
    p.add_argument("--adv", required=True, help="one advantage per action, comma-separated, each in ±{max_adv:g}")
    p.add_argument(
        "--measure",
        required=True,
        help="a method string: a preset {presets}, a measure {measures} at the δ matching GRPO's "
        "lower bound, or e.g. kl3:0.02, ratio:0.2:0.28, binary_kl:0.05/gated; a bare measure also takes the flags",
    )
    p.add_argument("--delta", type=float, help="divergence budget δ (for 'ratio': a symmetric width ε)")
    p.add_argument("--eps-low", type=float, help="'ratio' only: lower clip width")
    p.add_argument("--eps-high", type=float, help="'ratio' only: upper clip width")
    p.add_argument(
        "--form",
        "--mode",
        dest="form",
        default="clip",
        help="loss form: clip (PPO), gated (DPPO), cispo (default clip; --mode is its old name, kept for one release)",
    )
    p.add_argument("--epochs", type=int, help="PPO epochs on one batch ({epochs}; at most {max_epochs})")
    p.add_argument("--lr", type=float, help="gradient step on the logits ({lr}; at most {max_lr:g})")
    p.add_argument("--buckets", help="confidence bucket edges ({buckets})")
    p.add_argument("--compare", action="store_true", help="also compare the presets {compare}")
    p.add_argument("--json", action="store_true")
    return p


def _numbers(flag: str, text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated numbers, got {text!r}") from None


def _spec(args):
    flags = {"--delta": args.delta, "--eps-low": args.eps_low, "--eps-high": args.eps_high}
    given = [flag for flag, v in flags.items() if v is not None] + (["--form"] if args.form != "clip" else [])
    if not given or args.measure not in MEASURES:
        if given:
            what = "is a preset" if args.measure in PRESETS else "is a full method string"
            raise ValueError(
                f"--measure {args.measure} {what}: it takes no {'/'.join(given)}; put the budget and options in "
                f"the string (e.g. 'kl3:0.02/gated') or give a bare measure with the flags"
            )
        try:
            spec = parse_method(args.measure)
        except ValueError as exc:
            raise ValueError(f"--measure must be a measure, a preset or a method string: {exc}") from None
        return (args.measure if args.measure in PRESETS else spec_label(spec)), spec
    if args.measure == "ratio" and args.delta is not None:
        if args.eps_low is not None or args.eps_high is not None:
            raise ValueError("--measure ratio takes --delta (symmetric width) or --eps-low/--eps-high, not both")
        spec = ClipSpec("ratio", eps_low=args.delta, eps_high=args.delta, form=args.form)
    else:
        spec = ClipSpec(args.measure, delta=args.delta, eps_low=args.eps_low, eps_high=args.eps_high, form=args.form)
    return spec_label(spec), spec


def _fmt(x: float, w: int = 8) -> str:
    x = round(x, 12) + 0.0 if math.isfinite(x) else x  # no "-0.0000" for a -4e-17 rounding residue
    return f"{x:>{w}.4f}" if math.isfinite(x) else f"{'inf' if x > 0 else 'nan':>{w}}"


def _print_feasible(label, f) -> None:
    import numpy as np

    print(f"π_old = {np.round(f.probs, 6).tolist()}   A = {f.adv.tolist()}   spec: {label}")
    print("\nFeasible region: new probability of each action (ratio interval × π_old, capped at 1)")
    heads = ("lo", "hi", "q_min", "q_max", "room↑", "room↓")
    print(f"{'action':>6} {'p':>8} {'A':>7} " + " ".join(f"{h:>8}" for h in heads) + "  bucket")
    for i, p in enumerate(f.probs):
        cells = (f.lo[i], f.hi[i], f.q_min[i], f.q_max[i], f.room_up[i], f.room_down[i])
        bucket = f.bucket_labels[f.bucket_index[i]]
        print(f"{i:>6} {_fmt(p)} {f.adv[i]:>7.3g} " + " ".join(_fmt(x) for x in cells) + f"  {bucket}")
    print(
        f"A>0 actions can gain at most {f.max_gain_positive:.4f}; "
        f"A<0 actions can give up at most {f.max_release_negative:.4f}"
    )


def _print_optimum(o) -> None:
    print("\nOne-step optimum max Σ π_new·A over that box (exact LP)")
    for i in range(o.probs.size):
        where = "at hi" if o.at_upper[i] else "at lo" if o.at_lower[i] else "inside"
        print(f"{i:>6} π_new = {o.probs_new[i]:.4f}  Δ = {o.delta[i]:+.4f}  ({where})")
    k = o.probs.size
    flows = [f"{i}→{j} {o.flow[i, j]:.4f}" for i in range(k) for j in range(k) if o.flow[i, j] > 1e-12]
    print(
        f"flow: {', '.join(flows) or 'none'};  gain Σ Δ·A = {o.gain:.4f};  ΔH = {o.entropy_change:+.4f};  "
        f"KL(old‖new) = {o.kl_old_new:.4f}"
    )


def _print_drift(d) -> None:
    import numpy as np

    print(f"\nSoftmax PG on the logits, exact expected group, lr = {d.lr:g}, {d.epochs} epoch(s) on one batch")
    print(f"{'epoch':>5}  {'π_new':<28} {'ratio':<28} {'clipped':<8} {'KL':>7} {'H':>7}  net mass by bucket")
    for e in range(d.epochs):
        marks = [f"{i}{'↓' if lo else '↑'}" for i, (lo, hi) in enumerate(zip(d.clipped_low[e], d.clipped_high[e]))
                 if lo or hi]  # fmt: skip
        probs, ratio = str(np.round(d.probs[e + 1], 4).tolist()), str(np.round(d.ratio[e + 1], 4).tolist())
        print(
            f"{e + 1:>5}  {probs:<28} {ratio:<28} {','.join(marks) or '-':<8} {d.kl_old_new[e]:>7.4f} "
            f"{d.entropy[e + 1]:>7.4f}  {np.round(d.net_mass_by_bucket[e], 4).tolist()}"
        )
    print(f"buckets {list(d.bucket_labels)}; 'clipped': that epoch's gradient was zeroed at lo (↓) or hi (↑)")


_COMPARE_COLUMNS = {
    "max_gain_positive": "gain≤", "lp_gain_high_pos": "LP conf", "lp_gain_low_pos": "LP rare",
    "lp_entropy_change": "LP ΔH", "dyn_gain_high_pos": "PG conf", "dyn_gain_low_pos": "PG rare",
    "dyn_entropy_change": "PG ΔH", "dyn_kl": "PG KL",
}  # fmt: skip


def _print_comparison(c) -> None:
    print(
        f"\nComparison (A>0 actions: confident {list(c.high_pos_actions)}, rare {list(c.low_pos_actions)}; "
        f"LP = one-step optimum, PG = after {c.epochs} epoch(s))"
    )
    width = max(len(r.label) for r in c.rows)
    print(f"{'spec':<{width}} {'lo':>7} {'hi':>7} " + " ".join(f"{h:>8}" for h in _COMPARE_COLUMNS.values()))
    for r in c.rows:
        cells = " ".join(_fmt(getattr(r, col)) for col in _COMPARE_COLUMNS)
        print(f"{r.label:<{width}} {r.lo_min:>7.4f} {r.hi_max:>7.4f} {cells}")


def run(args) -> int:
    """Run `divclip realloc`; prints a report (or JSON) and returns 0. Bad input raises ValueError."""
    from divclip.theory.comparison import compare_measures

    # Validate with the flags' names, then hand the raw numbers on so that the library renormalises once.
    probs, adv = _numbers("--probs", args.probs), _numbers("--adv", args.adv)
    p = check_probs(probs, "--probs")
    check_advantages("--adv", adv, p.size, "--probs")
    edges = list(DEFAULT_BUCKET_EDGES) if args.buckets is None else _numbers("--buckets", args.buckets)
    make_buckets(p, edges)
    label, spec = _spec(args)
    feas = feasible_region(probs, adv, spec, bucket_edges=edges)
    opt = constrained_optimum(probs, adv, spec, bucket_edges=edges)
    specs = {name: name for name in DEFAULT_COMPARE_SPECS} if args.compare else {}
    specs.setdefault(label, spec)  # a preset already in the table keeps its place
    comp = compare_measures(
        probs,
        adv,
        specs,
        lr=DEFAULT_LR if args.lr is None else args.lr,
        epochs=DEFAULT_EPOCHS if args.epochs is None else args.epochs,
        bucket_edges=edges,
    )
    drift = next(r.drift for r in comp.rows if r.label == label)
    if args.json:
        out = {"spec": label, "feasible": feas.to_dict(), "optimum": opt.to_dict(), "drift": drift.to_dict()}
        if args.compare:
            out["comparison"] = comp.to_dict()
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    _print_feasible(label, feas)
    _print_optimum(opt)
    _print_drift(drift)
    if args.compare:
        _print_comparison(comp)
    return 0
