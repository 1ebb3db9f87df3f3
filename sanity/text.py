"""The `divclip check` report as plain text (the `--json` output is the report dict itself)."""

from __future__ import annotations


def _g(x, fmt: str = ".4g") -> str:
    return "—" if x is None else format(x, fmt)


def _table(header, rows) -> list[str]:
    rows = [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = []
    for row in (header, tuple("-" * w for w in widths), *rows):
        lines.append("  " + "  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
    return lines


def format_report(report: dict) -> str:
    out: list[str] = []
    if report["config"]:
        out += _config_lines(report["config"])
    if report.get("launches"):
        out += _launch_lines(report["launches"])
    if report["budget"]:
        out += _budget_lines(report["budget"])
    out += _warning_lines(report["warnings"])
    if report["rollouts"]:
        out += _rollout_lines(report["rollouts"])
    if report.get("compare"):
        out += _compare_lines(report["compare"])
    if report.get("corrections"):
        out += _correction_lines(report["corrections"])
    if report["notes"]:
        out += ["", "Notes:"] + [f"  - {n}" for n in report["notes"]]
    return "\n".join(out).lstrip("\n") + "\n"


def _config_lines(c: dict) -> list[str]:
    lines = [f"Config {c['name']!r}: {c['framework']} ({c['kind']}); defaults from {c['defaults_from']}"]
    clip = {
        "clip": f"PPO clip on the {c['level']} ratio, {c['measure']} widths ε_low = {_g(c['budget_low'])}, "
        f"ε_high = {_g(c['budget_high'])}",
        "gated": f"DPPO mask, {c['measure']} budget δ_low = {_g(c['budget_low'])}, δ_high = {_g(c['budget_high'])}, "
        f"IS weight truncated at {_g(c['tis_cap'])}",
        "divclip": f"PPO clip by {c['clip_measure']}, budget δ_low = {_g(c['delta_low'])}, "
        f"δ_high = {_g(c['delta_high'])} (per-token bounds, table below)",
        "cispo": f"CISPO weight clip, ε_low = {_g(c['budget_low'])}, ε_high = {_g(c['budget_high'])}"
        + (f", cap {_g(c['cap'])}" if c["cap"] is not None else ""),
        "sapo": "SAPO soft gate (no hard clip)",
        "other": "not analysed",
    }.get(c["form"], f"{c['form']} (not analysed)")
    lines.append(f"  loss {c['loss_mode']!r}: {clip}")
    rb = c.get("ratio_bounds")
    if rb and isinstance(rb[0], dict):
        lines.append("  ratio bounds: " + ", ".join(f"p = {r['p']:g}: [{r['lo']:.6g}, {r['hi']:.6g}]" for r in rb))
    elif rb:
        lines.append(
            f"  ratio bounds: [{rb[0]:.10g}, {rb[1]:.10g}]"
            + (f" ({c['clip_measure']} δ = {c['delta_low']:.6g})" if c.get("clip_measure") else "")
        )
    if c["dual_clip_c"] is not None:
        lines.append(f"  dual clip: c = {_g(c['dual_clip_c'])} (A < 0 capped at -A·c)")
    lines.append(f"  aggregation: {c['loss_agg_mode'] or '—'}; group size: {_g(c['group_size'])}")
    if c.get("correction"):
        lines.append(f"  rollout correction: {c['correction']} (ρ = π_old/π_rollout; docs/theory.md §10)")
    lines.append(
        f"  updates per rollout batch: {_g(c['updates_per_batch'])} "
        f"({'on-policy' if c['on_policy'] else 'off-policy after the first'}): {c['on_policy_reason']}"
    )
    lines.append("  keys read (value, origin):")
    for key, v in c["keys"].items():
        lines.append(f"    {key} = {v['value']!r} ({v['origin']})")
    return lines


def _launch_lines(rows: list) -> list[str]:
    lines = ["", f"Launches ({len(rows)}, in the order the script runs them):"]
    for r in rows:
        head = f"  line {r['line']}: {r['command']}"
        if not r["read"]:
            lines.append(f"{head}: {r['why']}")
            continue
        widths = f"ε_low = {_g(r['budget_low'])}, ε_high = {_g(r['budget_high'])}"
        schedule = "on-policy" if r["on_policy"] else "off-policy after the first"
        lines.append(
            f"{head}: {r['engine']} {r['loss_mode']!r}, method {r['method'] or 'not modelled'}, {widths}, "
            f"aggregation {r['loss_agg_mode'] or '—'}, group size {_g(r['group_size'])}, "
            f"{_g(r['updates_per_batch'])} update(s) per batch ({schedule})"
            + ("  <- the summary above" if r["summary"] else "")
        )
    return lines


def _budget_lines(b: dict) -> list[str]:
    lines = [""]
    if b["kind"] == "none":
        return lines + ["Budget: no hard clip, so no equivalent divergence budget."]
    if b["kind"] == "divergence":
        lines.append(
            f"Budget: {b['measure']} δ_low = {_g(b['delta_low'])}, δ_high = {_g(b['delta_high'])}; "
            "ratio interval per old-token probability p:"
        )
        lines += _table(
            ("p", "lo", "hi", "ε_low", "ε_high"),
            [(_g(r["p"]), _g(r["lo"]), _g(r["hi"]), _g(r["eps_low"]), _g(r["eps_high"])) for r in b["intervals"]],
        )
    kl3 = b.get("kl3") or {}
    if kl3.get("delta_from_eps_low") is not None:
        lines.append(
            f"KL3: ε_low = {_g(b['eps_low'])} is δ = {kl3['delta_from_eps_low']:.6g}, whose upper width is "
            f"ε_high = {kl3['implied_eps_high']:.4g} ({b.get('source', 'config')}: {_g(b['eps_high'])})"
        )
    lines.append(
        f"Equivalent budgets of ε_low = {_g(b['eps_low'])}, ε_high = {_g(b['eps_high'])} ({b['level']} level):"
    )
    lines += _table(
        ("measure", "p", "δ(ε_low)", "→ ε_high", "δ(ε_high)", "→ ε_low"),
        [
            (
                r["measure"],
                _g(r["p"]),
                _g(r["delta_from_eps_low"], ".6g"),
                _g(r["implied_eps_high"]),
                _g(r["delta_from_eps_high"], ".6g"),
                _g(r["implied_eps_low"]),
            )
            for r in b["equivalents"]
        ],
    )
    if b.get("note"):
        lines.append(f"  ({b['note']})")
    return lines


def _warning_lines(warnings: list[dict]) -> list[str]:
    if not warnings:
        return ["", "Warnings: none."]
    lines = ["", f"Warnings ({len(warnings)}):"]
    for w in warnings:
        lines.append(f"  [{w['code']}] {w['message']}")
        lines.append(f"      key: {w['key'] or '—'}; source: {w['source']}")
    return lines


def _rollout_lines(r: dict) -> list[str]:
    signs = ", ".join(f"{k}: {v}" for k, v in r["advantage_signs"].items())
    lines = [
        "",
        f"Rollouts {r['file']!r} ({r['format']}, shape {r['shape']}, {r['dtype']}): {r['n_tokens']} tokens ({signs})",
        f"  {r['ratios']['text']}",
    ] + [f"  ({n})" for n in r["notes"]]
    rows, skipped = [], {}
    for m in r["measures"]:
        if m["problem"]:
            rows.append((m["measure"], "—", "—", "skipped", "", "", ""))
            skipped.setdefault(m["problem"], []).append(m["measure"])
            continue
        budget = m["budget"]
        b = f"ε {budget['eps_low']:g}/{budget['eps_high']:g}" if "eps_low" in budget else f"δ {budget['delta']:.5g}"
        interval = "per token" if m["interval"] is None else f"[{m['interval'][0]:.4f}, {m['interval'][1]:.4f}]"
        rows.append(
            (
                m["measure"],
                b,
                interval,
                f"{m['clipfrac']:.4%}",
                f"{m['clipfrac_low']:.4%}",
                f"{m['clipfrac_high']:.4%}",
                f"{m['dual_clipfrac']:.4%}",
            )
        )
    lines.append(f"Predicted clip fractions ({r['level']} level; from theory.losses.policy_loss):")
    lines += _table(("measure", "budget", "interval", "clipfrac", "low", "high", "dual"), rows)
    lines += [f"  skipped {', '.join(names)}: {why}" for why, names in skipped.items()]
    for m in r["measures"]:
        if m["measure"] == "kl3" and not m["problem"]:
            lines.append("By old-token probability and advantage sign (kl3; cells with tokens):")
            lines += _table(
                ("p bucket", "sign", "tokens", "low", "high"),
                [
                    (b["p_bucket"], b["sign"], b["tokens"], f"{b['frac_low']:.3%}", f"{b['frac_high']:.3%}")
                    for b in m["buckets"]
                    if b["tokens"]
                ],
            )
    h = r["histogram"]
    lines.append(
        f"log r histogram on [{h['edges'][0]:g}, {h['edges'][-1]:g}] "
        f"({len(h['counts'])} bins; under {h['underflow']}, over {h['overflow']}): see --json"
    )
    lines += _sweep_lines(r["sweep"])
    return lines


def _pct(x) -> str:
    return "—" if x is None else f"{x:.3%}"


def _compare_lines(c: dict) -> list[str]:
    """The atlas methods on the file's tokens (`divclip.sanity.compare`)."""
    lines = [
        "",
        f"Methods on these tokens ({c['ratios']}): w = divclip.theory.gradient_weight, 'removed' = share "
        "of Σ|A·r| the method takes away (negative: it adds)",
    ]
    rows, cells, problems = [], [], []
    for m in c["methods"]:
        if m["problem"]:
            rows.append((m["method"], m["family"], "—", "—", "—", "—"))
            problems.append(f"  {m['method']}: {m['problem']}")
            continue
        e = m["entropy"]
        rows.append(
            (
                m["method"],
                m["family"],
                _pct(m["clipfrac"]),
                _pct(m["removed"]),
                f"{e['would_raise']['tokens']} ({_pct(e['would_raise']['removed'])})",
                f"{e['would_lower']['tokens']} ({_pct(e['would_lower']['removed'])})",
            )
        )
        cells += [
            (m["method"], b["p_bucket"], b["sign"], b["tokens"], _pct(b["clipfrac"]), _pct(b["removed"]))
            for b in m["buckets"]
            if b["tokens"]
        ]
    lines += (
        _table(("method", "family", "clipfrac", "removed", "clipped, raise entropy", "clipped, lower entropy"), rows)
        + problems
    )
    lines.append(
        f"  entropy side: {c['entropy_rule']}; a clipped token with (log q − mean)(A − mean) < 0 would "
        "have raised entropy"
    )
    lines.append("By old-token probability and advantage sign (cells with tokens):")
    lines += _table(("method", "p bucket", "sign", "tokens", "clipfrac", "removed"), cells)
    return lines


def _sweep_lines(sweep: dict) -> list[str]:
    grid = sweep["grid"]
    picks = list(range(0, len(grid), 8))
    names = list(sweep["measures"])
    lines = ["δ sweep (clipfrac at budget δ; ε for ratio):"]
    lines += _table(
        ("δ",) + tuple(names),
        [(f"{grid[i]:.2g}",) + tuple(f"{sweep['measures'][n]['clipfrac'][i]:.3%}" for n in names) for i in picks],
    )
    return lines


def _correction_lines(section: dict) -> list[str]:
    """The rollout corrections on the file's rollout_log_prob (`divclip.sanity.corrections`)."""
    m = section["mismatch"]
    lines = [
        "",
        f"Rollout corrections on {section['file']!r} ({m['tokens']} tokens; ρ = π_old/π_rollout):",
        f"  drift d = mean log ρ = {m['drift_mean_log_rho']:+.4g} per token (std {m['std_log_rho']:.4g}); "
        f"k1 mean {m['k1']['mean']:.4g}, k3 mean {m['k3']['mean']:.4g} (q99 {m['k3']['q99']:.4g}, "
        f"max {m['k3']['max']:.4g}); median length {m['median_length']:.0f}",
    ]
    rows = []
    for e in section["corrections"]:
        w = e["weight"] or {}
        cross = ", ".join(f"{k} at L={v:.0f}" for k, v in e["crossing_length"].items()) or "—"
        rows.append(
            (
                e["label"],
                e["correction"] if e["correction"] != e["label"] else "",
                f"{e['kept_token_fraction']:.3f}",
                f"{e['kept_seq_fraction']:.3f}",
                _g(w.get("ess")),
                "—" if not w else f"{w['min']:.3g}/{w['mean']:.3g}/{w['max']:.3g}",
                cross,
            )
        )
    header = ("correction", "string", "kept tok", "kept seq", "ESS", "w min/mean/max", "crosses")
    return lines + _table(header, rows)
