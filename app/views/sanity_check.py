"""Sanity check: what a verl/TRL clip setting means, whether it binds, which tokens it clips, what KL3 would do.

A thin page: uploads go as bytes to `divclip.sanity.report.report_from_uploads` (the same safe loaders as
`divclip check`; nothing is unpickled), figures come from `divclip.sanity.figures`.
"""

import json
import math
from pathlib import Path

import streamlit as st

from divclip.app.figures import log_axis
from divclip.app.page_parts import figure, rounded_rows
from divclip.app.state import format_number
from divclip.app.token_terms import example_token
from divclip.engines import ENGINES
from divclip.engines import verl as verl_engine
from divclip.sanity import figures
from divclip.sanity.compare import compare_bucket_rows, compare_rows
from divclip.sanity.compare import parse_methods as parse_compare_methods
from divclip.sanity.corrections import correction_rows
from divclip.sanity.report import jsonable, report_from_uploads
from divclip.theory import MEASURES

CONFIG_TYPES = ["yaml", "yml", "json", "txt", "sh", "py"]
ROLLOUT_TYPES = ["npz", "parquet", "jsonl", "safetensors"]
EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
# Example inputs shipped with the app: (config file or None, rollout file or None) per button.
EXAMPLES = {
    "verl DAPO config + rollouts": ("verl_dapo.yaml", "rollouts_example.jsonl"),
    "TRL GSPO config + rollouts": ("trl_gspo.yaml", "rollouts_example.jsonl"),
    "Rollouts only": (None, "rollouts_example.jsonl"),
    "Rollouts with a bf16 mismatch": (None, "rollouts_mismatch.jsonl"),
}
EXAMPLE_KEY = "sanity_example"
LINK_KEY = "sanity._link"  # the ε/measure query a link brought, applied once per new link


def example_file(name: str) -> tuple[str, bytes]:
    return name, (EXAMPLES_DIR / name).read_bytes()


def choose_example(label: str | None) -> None:
    st.session_state[EXAMPLE_KEY] = label


def apply_link() -> str | None:
    """ε_low / ε_high / measure from the URL (links from the explorer and the proof) into the options, once per
    link; returns what was applied, for a note."""
    query = st.query_params.to_dict()
    wanted = {k: query[k] for k in ("eps_low", "eps_high", "measure") if k in query}
    if not wanted or st.session_state.get(LINK_KEY) == wanted:
        return None
    st.session_state[LINK_KEY] = wanted
    applied = []
    for key in ("eps_low", "eps_high"):
        if key in wanted:
            try:
                value = float(wanted[key])
            except ValueError:
                value = math.nan
            if math.isfinite(value) and 1e-6 <= value <= 10.0:
                st.session_state[f"sanity_{key}"] = value
                applied.append(f"{key} = {value:g}")
            else:
                st.warning(f"{key}={wanted[key]!r} in the link is not a number in [1e-06, 10]; ignored.")
    if "measure" in wanted:
        if wanted["measure"] in MEASURES:
            st.session_state["sanity_measure"] = wanted["measure"]
            applied.append(f"measure = {wanted['measure']}")
        else:
            st.warning(f"measure={wanted['measure']!r} in the link is not one of {', '.join(MEASURES)}; ignored.")
    return ", ".join(applied) or None


st.title("Sanity check a clip setting")
st.write(
    "Before a long run: upload the config you will train with (a verl YAML or launch script of hydra overrides, a "
    "TRL `GRPOConfig` as JSON/YAML/flags/Python, an OpenRLHF or slime launch command, an AReaL or SkyRL YAML), "
    "and optionally a batch of rollouts with per-token "
    "`old_log_prob`, `advantages`, `response_mask` (and `log_prob`). The report says what the clip means as a "
    "divergence budget, whether it can bind at all, which tokens it would clip, and what KL3 would do instead."
)

linked = apply_link()
if linked:
    st.info(f"From the link: {linked} (in Options below). They override the config's ε.")

with st.container(border=True, key="sanity-examples"):
    st.markdown("**No files at hand? Try an example** — or download one to see the format.")
    labels = list(EXAMPLES)  # two buttons a row: each label whole at 1024 px and up
    cols = [c for i in range(0, len(labels), 2) for c in st.columns(2)]
    for col, label in zip(cols, labels):
        col.button(
            label,
            on_click=choose_example,
            args=(label,),
            width="stretch",
            key=f"sanity.example.{label}",
            icon=":material/play_arrow:",
        )
    names = sorted({n for pair in EXAMPLES.values() for n in pair if n})
    cols = [c for i in range(0, len(names), 3) for c in st.columns(3)]  # three file names a row
    for col, name in zip(cols, names):
        col.download_button(
            name,
            (EXAMPLES_DIR / name).read_bytes(),
            file_name=name,
            icon=":material/download:",
            key=f"sanity.download.{name}",
            width="stretch",
            on_click="ignore",
        )

left, right = st.columns(2)
config_file = left.file_uploader("Config", type=CONFIG_TYPES, key="sanity_config")
rollout_file = right.file_uploader("Rollouts", type=ROLLOUT_TYPES, key="sanity_rollouts")
overrides_text = st.text_area(
    "Hydra overrides (key=value, on top of the config)",
    key="sanity_overrides",
    placeholder=f"{verl_engine.ROLES['eps_high']}=0.28",
)
with st.expander("Options", expanded=bool(linked)):
    c1, c2, c3 = st.columns(3)
    intended = c1.selectbox("Measure the clip should express", ["(none)"] + list(MEASURES), key="sanity_measure")
    eps_low = c2.number_input(
        "ε_low override", min_value=1e-6, max_value=10.0, value=None, format="%.4g", key="sanity_eps_low"
    )
    eps_high = c3.number_input(
        "ε_high override", min_value=1e-6, max_value=10.0, value=None, format="%.4g", key="sanity_eps_high"
    )
    sigma = c1.number_input(
        "σ of log r (noise model)",
        min_value=0.0,
        max_value=5.0,
        value=None,
        format="%.4g",
        key="sanity_sigma",
        help="Empty: the file's log_prob, else 0.05.",
    )
    seed = int(c2.number_input("Noise seed", min_value=0, value=0, step=1, key="sanity_seed"))
    framework = c3.selectbox("Framework", ["auto", *ENGINES], key="sanity_framework")
    methods_text = st.text_input(
        "Compare methods on the rollouts (atlas names or method strings)",
        key="sanity_methods",
        placeholder="dcpo,grpo,dapo",
        help="Clip fraction, share of |gradient| removed and the entropy side per method, "
        "from divclip.theory.gradient_weight (`divclip check --methods`).",
    )

config = None if config_file is None else (config_file.name, config_file.getvalue())
rollouts = None if rollout_file is None else (rollout_file.name, rollout_file.getvalue())
example = st.session_state.get(EXAMPLE_KEY)
if example in EXAMPLES:  # an uploaded file replaces the example's file of the same kind
    config_name, rollouts_name = EXAMPLES[example]
    used = []
    if config is None and config_name:
        config, used = example_file(config_name), used + [config_name]
    if rollouts is None and rollouts_name:
        rollouts, used = example_file(rollouts_name), used + [rollouts_name]
    if used:
        st.info(f"Example: {example} (using {', '.join(used)}). Upload your own files to replace it.")
    st.button("Clear the example", on_click=choose_example, args=(None,), key="sanity.example.clear")

if config is None and rollouts is None and not overrides_text.strip():
    st.info("Upload a config and/or a rollout file to start, or try an example above.")
    st.stop()

options = dict(
    framework=None if framework == "auto" else framework,
    intended_measure=None if intended == "(none)" else intended,
    eps_low=eps_low,
    eps_high=eps_high,
    sigma=sigma,
    seed=seed,
)
methods_error = None
if rollouts is not None and methods_text.strip():
    try:  # a typo in the box says so there, with the nearest name, and the rest of the report stays
        parse_compare_methods(methods_text)
        options["methods"] = methods_text
    except ValueError as exc:
        methods_error = str(exc).removeprefix("--methods: ").removeprefix("--methods ")
try:
    report = report_from_uploads(config=config, rollouts=rollouts, overrides_text=overrides_text, **options)
except ValueError as exc:
    report = None
    if rollouts is not None and (config is not None or overrides_text.strip()):
        # A broken config (or overrides box) must not hide the rollout report: check the rollouts alone. If they
        # fail too, the one error above is all there is to say.
        try:
            report = report_from_uploads(config=None, rollouts=rollouts, overrides_text="", **options)
        except ValueError:
            report = None
    st.error(f"Cannot check this input: {exc}")
    if report is None:
        st.stop()
    st.warning(
        "The report below is for the rollouts alone: the config and overrides were left out because of "
        "the error above. The clip is the ε overrides' (Options), else each measure's default budget."
    )
except Exception as exc:  # noqa: BLE001 - no traceback reaches a visitor: one message, whatever went wrong
    st.error(f"Cannot check this input: {type(exc).__name__}: {str(exc)[:300]}")
    st.stop()

# ---------------------------------------------------------------------------------------------- warnings
# Every warning is here, an unknown key (with the nearest known one) or a key written without '=' included.
if report["warnings"]:
    st.subheader(f"Warnings ({len(report['warnings'])})")
    for w in report["warnings"]:
        st.warning(f"**{w['code']}** ({w['key'] or '—'}): {w['message']}\n\n*Source:* {w['source']}")
else:
    st.success("No warnings: the clip can bind, and its widths are on the scale published runs use.")

# ------------------------------------------------------------------------------------------------ config
cfg = report["config"]
if cfg:
    st.subheader(f"Config: {cfg['framework']} `{cfg['loss_mode']}`")
    st.caption(f"Unset keys take the defaults of {cfg['defaults_from']}.")
    m1, m2, m3 = st.columns(3)
    m1.metric(
        "updates per rollout batch",
        f"{cfg['updates_per_batch']:g}",
        "on-policy: clip inert" if cfg["on_policy"] else "off-policy",
        delta_color="off",
    )
    m2.metric("dual clip c", "off" if cfg["dual_clip_c"] is None else f"{cfg['dual_clip_c']:g}")
    m3.metric("level", cfg["level"])
    st.dataframe(
        [{"key": k, "value": str(v["value"]), "origin": v["origin"]} for k, v in cfg["keys"].items()], hide_index=True
    )

# ------------------------------------------------------------------------------------------------ budget
budget = report["budget"]
if budget and budget["kind"] != "none":
    st.subheader("As a divergence budget")
    kl3 = budget.get("kl3") or {}
    if kl3.get("delta_from_eps_low") is not None:
        st.write(
            f"ε_low = {budget['eps_low']:g} is a KL3 budget δ = {kl3['delta_from_eps_low']:.6g}, whose "
            f"upper width is ε_high = {kl3['implied_eps_high']:.4g} "
            f"({budget.get('source', 'config')}: {budget['eps_high']})."
        )
    if budget["kind"] == "divergence":
        st.dataframe(rounded_rows(budget["intervals"]), hide_index=True)
    st.dataframe(
        rounded_rows({k: v for k, v in r.items() if k != "problems"} for r in budget["equivalents"]), hide_index=True
    )
    st.caption("Numbers rounded to 6 significant digits; the JSON download below has them in full.")
    figure(figures.budget_intervals_figure(budget), "divclip_budget_intervals", key="sanity.budget")

# ---------------------------------------------------------------------------------------------- rollouts
ro = report["rollouts"]
if ro:
    st.subheader(f"Rollouts: {ro['n_tokens']} tokens")
    (st.info if ro["ratios"]["source"] == "file" else st.warning)(ro["ratios"]["text"])
    for note in ro["notes"]:
        st.caption(note)
    st.dataframe(
        rounded_rows(
            {
                k: m.get(k)
                for k in (
                    "measure",
                    "clipfrac",
                    "clipfrac_low",
                    "clipfrac_high",
                    "dual_clipfrac",
                    "interval",
                    *(["problem"] if any(m.get("problem") for m in ro["measures"]) else []),  # not a column of Nones
                )
            }
            for m in ro["measures"]
        ),
        hide_index=True,
    )
    figure(figures.log_ratio_histogram_figure(ro), "divclip_log_ratio_histogram", key="sanity.histogram")
    sweep = figures.delta_sweep_figure(ro)
    grid = ro["sweep"]["grid"]
    sweep.update_xaxes(**log_axis(min(grid), max(grid)))  # the app's one log-tick style
    figure(sweep, "divclip_delta_sweep", key="sanity.sweep")
    usable = [m["measure"] for m in ro["measures"] if not m["problem"]]
    pick = st.selectbox(
        "Breakdown for", usable, index=usable.index("kl3") if "kl3" in usable else 0, key="sanity_bucket_measure"
    )
    figure(figures.bucket_figure(ro, pick), "divclip_breakdown", key="sanity.breakdown")
    if rollouts is not None and (token := example_token(*rollouts)) is not None:  # the ratio that moved most
        st.page_link(
            "views/token_explainer.py",
            icon=":material/token:",
            label=f"Explain token ({token['i']}, {token['t']}) in the token explainer: q = {token['q']:.4g}, "
            f"r = {token['r']:.4g}, A = {token['adv']:.4g}",
            query_params={k: format_number(token[k]) for k in ("q", "r", "adv")},
        )

if report.get("corrections"):  # the third policy: rollout_log_prob in the file (divclip.sanity.corrections)
    corr = report["corrections"]
    mis = corr["mismatch"]
    st.subheader(f"Rollout corrections: {mis['tokens']} tokens with the inference engine's log-probs")
    st.caption(
        f"ρ = π_old/π_rollout: drift {mis['drift_mean_log_rho']:+.4g} log ρ per token (std {mis['std_log_rho']:.4g}), "
        f"k3 mean {mis['k3']['mean']:.4g}, q99 {mis['k3']['q99']:.4g}; median length {mis['median_length']:.0f}."
    )
    st.dataframe(rounded_rows(correction_rows(corr)), hide_index=True)
    figure(figures.correction_kept_figure(corr), "divclip_correction_kept", key="sanity.correction_kept")
    if any(e["weight_histogram"] for e in corr["corrections"]):
        figure(figures.correction_weight_figure(corr), "divclip_correction_weights", key="sanity.correction_w")

if methods_error:
    st.subheader("Methods compared on your tokens")
    st.error(f"Compare methods: {methods_error}", icon=":material/error:")
if report.get("compare"):
    cmp = report["compare"]
    st.subheader("Methods on these tokens")
    st.dataframe(rounded_rows(compare_rows(cmp)), hide_index=True)
    st.caption(
        f"w from divclip.theory.gradient_weight; 'removed' is the share of Σ|A·r| the method takes away "
        f"(negative: it adds). Entropy side: {cmp['entropy_rule']}; a clipped token with "
        "(log q − mean)(A − mean) < 0 would have raised entropy."
    )
    st.dataframe(rounded_rows(compare_bucket_rows(cmp)), hide_index=True)

for note in report["notes"]:
    st.caption(note)
st.download_button(
    "Download the report (JSON)",
    json.dumps(jsonable(report), indent=2, ensure_ascii=False),
    file_name="divclip_check.json",
    mime="application/json",
)
