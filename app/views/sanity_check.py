"""Sanity check: what a verl/TRL clip setting means, whether it binds, which tokens it clips, what KL3 would do.

A thin page: uploads go as bytes to `divclip.sanity.report.report_from_uploads` (the same safe loaders as
`divclip check`; nothing is unpickled), figures come from `divclip.sanity.figures`.
"""

import json

import streamlit as st

from divclip.sanity import figures
from divclip.sanity.report import jsonable, report_from_uploads
from divclip.theory import MEASURES

CONFIG_TYPES = ["yaml", "yml", "json", "txt", "sh"]
ROLLOUT_TYPES = ["npz", "parquet", "jsonl", "safetensors"]

st.title("Sanity check a clip setting")
st.write(
    "Before a long run: upload the verl config (YAML or a launch script of hydra overrides) or TRL "
    "`GRPOConfig` (JSON/YAML) you will train with, and optionally a batch of rollouts with per-token "
    "`old_log_prob`, `advantages`, `response_mask` (and `log_prob`). The report says what the clip means as a "
    "divergence budget, whether it can bind at all, which tokens it would clip, and what KL3 would do instead."
)

left, right = st.columns(2)
config_file = left.file_uploader("Config", type=CONFIG_TYPES, key="sanity_config")
rollout_file = right.file_uploader("Rollouts", type=ROLLOUT_TYPES, key="sanity_rollouts")
overrides_text = st.text_area("Hydra overrides (key=value, on top of the config)", key="sanity_overrides",
                              placeholder="actor_rollout_ref.actor.clip_ratio_high=0.28")
with st.expander("Options"):
    c1, c2, c3 = st.columns(3)
    intended = c1.selectbox("Measure the clip should express", ["(none)"] + list(MEASURES), key="sanity_measure")
    eps_low = c2.number_input("ε_low override", min_value=1e-6, max_value=10.0, value=None, format="%.4g",
                              key="sanity_eps_low")
    eps_high = c3.number_input("ε_high override", min_value=1e-6, max_value=10.0, value=None, format="%.4g",
                               key="sanity_eps_high")
    sigma = c1.number_input("σ of log r (noise model)", min_value=0.0, max_value=5.0, value=None, format="%.4g",
                            key="sanity_sigma", help="Empty: the file's log_prob, else 0.05.")
    seed = int(c2.number_input("Noise seed", min_value=0, value=0, step=1, key="sanity_seed"))
    framework = c3.selectbox("Framework", ["auto", "verl", "trl"], key="sanity_framework")

if config_file is None and rollout_file is None and not overrides_text.strip():
    st.info("Upload a config and/or a rollout file to start.")
    st.stop()

try:
    report = report_from_uploads(
        config=None if config_file is None else (config_file.name, config_file.getvalue()),
        rollouts=None if rollout_file is None else (rollout_file.name, rollout_file.getvalue()),
        overrides_text=overrides_text,
        framework=None if framework == "auto" else framework,
        intended_measure=None if intended == "(none)" else intended,
        eps_low=eps_low,
        eps_high=eps_high,
        sigma=sigma,
        seed=seed,
    )
except ValueError as exc:
    st.error(f"Cannot check this input: {exc}")
    st.stop()
except Exception as exc:  # noqa: BLE001 - no traceback reaches a visitor: one message, whatever went wrong
    st.error(f"Cannot check this input: {type(exc).__name__}: {str(exc)[:300]}")
    st.stop()

# ---------------------------------------------------------------------------------------------- warnings
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
    m1.metric("updates per rollout batch", f"{cfg['updates_per_batch']:g}",
              "on-policy: clip inert" if cfg["on_policy"] else "off-policy", delta_color="off")
    m2.metric("dual clip c", "off" if cfg["dual_clip_c"] is None else f"{cfg['dual_clip_c']:g}")
    m3.metric("level", cfg["level"])
    st.dataframe([{"key": k, "value": str(v["value"]), "origin": v["origin"]} for k, v in cfg["keys"].items()],
                 hide_index=True)

# ------------------------------------------------------------------------------------------------ budget
budget = report["budget"]
if budget and budget["kind"] != "none":
    st.subheader("As a divergence budget")
    kl3 = budget.get("kl3") or {}
    if kl3.get("delta_from_eps_low") is not None:
        st.write(f"ε_low = {budget['eps_low']:g} is a KL3 budget δ = {kl3['delta_from_eps_low']:.6g}, whose "
                 f"upper width is ε_high = {kl3['implied_eps_high']:.4g} (config: {budget['eps_high']}).")
    if budget["kind"] == "divergence":
        st.dataframe(budget["intervals"], hide_index=True)
    st.dataframe([{k: v for k, v in r.items() if k != "problems"} for r in budget["equivalents"]], hide_index=True)
    st.plotly_chart(figures.budget_intervals_figure(budget))

# ---------------------------------------------------------------------------------------------- rollouts
ro = report["rollouts"]
if ro:
    st.subheader(f"Rollouts: {ro['n_tokens']} tokens")
    (st.info if ro["ratios"]["source"] == "file" else st.warning)(ro["ratios"]["text"])
    for note in ro["notes"]:
        st.caption(note)
    st.dataframe([{k: m.get(k) for k in ("measure", "clipfrac", "clipfrac_low", "clipfrac_high", "dual_clipfrac",
                                          "interval", "problem")} for m in ro["measures"]], hide_index=True)
    st.plotly_chart(figures.log_ratio_histogram_figure(ro))
    st.plotly_chart(figures.delta_sweep_figure(ro))
    usable = [m["measure"] for m in ro["measures"] if not m["problem"]]
    pick = st.selectbox("Breakdown for", usable, index=usable.index("kl3") if "kl3" in usable else 0,
                        key="sanity_bucket_measure")
    st.plotly_chart(figures.bucket_figure(ro, pick))

for note in report["notes"]:
    st.caption(note)
st.download_button("Download the report (JSON)", json.dumps(jsonable(report), indent=2, ensure_ascii=False),
                   file_name="divclip_check.json", mime="application/json")
