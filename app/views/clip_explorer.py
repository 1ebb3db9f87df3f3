"""Clip explorer: every measure's clip interval at one budget, drawn, tabulated and exported."""

import streamlit as st

from divclip import theory
from divclip.app.export import FORMATS, interval_spec, method_export
from divclip.app.figures import (
    add_intersection,
    divergence_curves,
    intersection_bounds,
    interval_chart,
    surrogate_figure,
)
from divclip.app.intervals import clip_intervals, table_csv, table_rows
from divclip.app.methods import label_for
from divclip.app.page_parts import formula_latex, share_link, show_messages
from divclip.app.presets import (
    DELTA_MAX,
    DELTA_MIN,
    EPS_MAX,
    EPS_MIN,
    EXPLORER_SPEC,
    P_MAX,
    P_MIN,
    PRESETS,
    kl3_delta_matching,
    matching_preset,
)
from divclip.app.state import PageState
from divclip.theory.spec import method_string

_SUFFIX = {"overrides": "sh", "yaml": "yaml", "python": "py"}
state = PageState("explorer", EXPLORER_SPEC)
url_warnings = state.init()
NOTICE = "explorer._notice"  # a message from a button callback, shown once on the next run


def match_delta_to_eps_low() -> None:
    delta, notice = kl3_delta_matching(st.session_state[state.key("eps_low")])
    state.set({"delta": delta})
    if notice:
        st.session_state[NOTICE] = notice


st.title("Clip explorer")
st.markdown(
    "Clipping on a divergence, **D(r) ≤ δ**, keeps the ratio r = π_θ/π_old inside an interval [l, u] — so every "
    "measure below *is* a ratio clip, just with its own, usually asymmetric, bounds. Move δ (or the ratio "
    "clip's ε) and read where each measure clips, what that does to the PPO surrogate, and the equivalent "
    "ε to paste into verl or TRL. The address bar holds the whole view: copy it to share."
)
show_messages(url_warnings, kind="warning")
show_messages([st.session_state.pop(NOTICE)] if NOTICE in st.session_state else [], kind="warning")

with st.sidebar:
    st.subheader("Presets")
    cols = st.columns(2)
    for i, preset in enumerate(PRESETS.values()):
        cols[i % 2].button(preset.name, help=preset.description, on_click=state.set, args=(preset.values,),
                           width="stretch", key=f"explorer.preset.{preset.name}")
    st.subheader("Budget")
    st.slider("δ — divergence budget", DELTA_MIN, DELTA_MAX, step=0.0001, format="%.4f", key=state.key("delta"),
              help="Every measure except the ratio clip keeps D(r) ≤ δ. GRPO's ε_low = 0.2 is KL3 at δ ≈ 0.0231.")
    st.button("Match δ to ε_low under KL3", on_click=match_delta_to_eps_low, width="stretch", key="explorer.match",
              help="Sets δ so that KL3's lower bound is 1 − ε_low (ATR-GRPO's choice).")
    st.slider("ε_low — ratio clip, lower side", EPS_MIN, EPS_MAX, step=0.01, format="%.2f",
              key=state.key("eps_low"))
    st.slider("ε_high — ratio clip, upper side", EPS_MIN, EPS_MAX, step=0.01, format="%.2f",
              key=state.key("eps_high"), help="DAPO's clip-higher uses 0.28 with ε_low = 0.2.")
    st.slider("p = π_old(a) — per-token measures", P_MIN, P_MAX, step=0.001, format="%.3f", key=state.key("p"),
              help="Binary KL and binary TV depend on the old probability of the sampled token.")
    st.multiselect("Measures", tuple(theory.MEASURES), format_func=label_for, key=state.key("measures"))
    st.button("Reset", on_click=state.reset, type="primary", width="stretch", icon=":material/restart_alt:",
              key="explorer.reset")

values = state.values()
query = state.sync()
active = matching_preset(values)
if active:
    st.caption(f"Preset: **{active}** — {PRESETS[active].description}")

intervals, errors = clip_intervals(values["measures"], values["delta"], values["eps_low"], values["eps_high"],
                                   values["p"])
show_messages(errors, kind="error")
if not values["measures"]:
    st.info("Choose at least one measure in the sidebar.")

left, right = st.columns(2)
left.plotly_chart(divergence_curves(intervals, values["delta"]), key="explorer.curves")
right.plotly_chart(divergence_curves(intervals, values["delta"], log_space=True), key="explorer.curves_log")

maths, bars = st.columns(2, vertical_alignment="center")
with maths:
    st.markdown("**Each measure and its interval**")
    for iv in intervals:
        st.latex(formula_latex(iv))
with bars:
    st.plotly_chart(add_intersection(interval_chart(intervals), intervals), key="explorer.intervals")
    if (both := intersection_bounds(intervals)) is not None:
        st.caption(f"Shaded: the intersection [{both[0]:.6f}, {both[1]:.6f}], where every chosen measure holds at "
                   "once (a method string joins them with '&', e.g. `kl3:0.023144&binary_tv:0.2`).")

st.plotly_chart(surrogate_figure(intervals), key="explorer.surrogate")

st.subheader("Equivalent ratio clip per measure")
st.table(table_rows(intervals), hide_index=True)
st.download_button("Table as CSV", table_csv(intervals), file_name="divclip_intervals.csv", mime="text/csv",
                   icon=":material/download:")

# verl/TRL export: one chosen method at a time, complete and paste-safe (`divclip export` prints the same text).
st.subheader("Export one method to verl or TRL")
specs = {}
for iv in intervals:
    spec = interval_spec(iv)
    specs[f"{iv.method} — {iv.label} ({method_string(spec)})"] = spec
pick_col, fmt_col = st.columns([2, 1])
choice = pick_col.selectbox("Method", list(specs), key="explorer.export_method")
fmt = fmt_col.radio("Format", FORMATS, horizontal=True, key="explorer.export_format",
                    help="overrides: a verl command line (TRL: its --key value flags); yaml; python")
spec = specs[choice]
st.caption(f"Same text as `divclip export --method {method_string(spec)} --engine verl|trl --format {fmt}`. "
           "Each block sets every key it needs once, so pasting it after another method's leaves nothing of "
           "that method in force.")
language = {"overrides": "bash", "yaml": "yaml", "python": "python"}[fmt]
for col, engine, title in zip(st.columns(2), ("verl", "trl"), ("verl 0.9.1", "TRL 1.16")):
    with col:
        st.markdown(f"**{title}**")
        try:
            text = method_export(spec, engine).text(fmt)
        except ValueError as exc:
            st.info(str(exc))
            continue
        st.code(text, language=language, wrap_lines=True)  # st.code has a copy button
        st.download_button(f"{engine} settings", text, file_name=f"divclip_{engine}.{_SUFFIX[fmt]}",
                           mime="text/plain", icon=":material/download:", key=f"explorer.export_{engine}")
st.markdown("**Link to this view**")
st.code(share_link(query), language=None, wrap_lines=True)
