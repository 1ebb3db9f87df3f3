"""Custom measure: a user formula D(r[, p]) parsed safely by theory, its clip interval next to KL3's."""

import streamlit as st

from divclip.app.figures import divergence_curves, interval_chart
from divclip.app.intervals import clip_intervals, format_bound, table_rows
from divclip.app.page_parts import figure, formula_latex, number_with_slider, share_link, show_messages
from divclip.app.presets import ATR_DELTA, DELTA_MAX, DELTA_MIN, P_MAX, P_MIN
from divclip.app.state import FloatParam, PageState, TextParam
from divclip.theory import measure_from_formula
from divclip.theory.formula import MAX_FORMULA_CHARS

EXAMPLES = {
    "forward KL": "r*log(r) - r + 1",
    "Hellinger": "(sqrt(r) - 1)**2",
    "Jensen–Shannon-like": "r*log(2*r/(1 + r)) + log(2/(1 + r))",
    "per-token χ²": "p*(r - 1)**2",
}
CUSTOM_SPEC = (
    TextParam("formula", "formula", EXAMPLES["forward KL"], max_chars=MAX_FORMULA_CHARS),
    FloatParam("delta", "δ (divergence budget)", ATR_DELTA, DELTA_MIN, DELTA_MAX),
    FloatParam("p", "p = π_old(a)", 0.1, P_MIN, P_MAX),
)
PARAM = {param.key: param for param in CUSTOM_SPEC}
state = PageState("custom", CUSTOM_SPEC)
url_warnings = state.init()


@st.cache_resource(max_entries=64, show_spinner=False)
def parsed_measure(formula: str):
    """theory's measure for a formula (ValueError with the reason when it is not a valid measure)."""
    return measure_from_formula(formula)


st.title("Custom measure")
st.markdown(
    "Type any divergence D(r) — or D(r, p) with p = π_old(a) — and see the ratio clip it induces next to KL3's at "
    "the same δ. The formula is parsed against a whitelist (numbers, `r`, `p`, `+ − * / **`, `log exp sqrt abs`), "
    "never run as code, and must be 0 at r = 1, falling below 1 and rising above it, so that D ≤ δ is an interval."
)
show_messages(url_warnings, kind="warning")

with st.container(border=True, key="custom-controls"):
    st.markdown("**Examples**")
    # each example's column as wide as its label needs (at equal widths "Jensen–Shannon-like" was cut)
    cols = st.columns([max(len(label), 10) for label in EXAMPLES] + [10])
    for col, (label, text) in zip(cols, EXAMPLES.items()):
        col.button(
            label,
            help=text,
            on_click=state.set,
            args=({"formula": text},),
            width="stretch",
            key=f"custom.example.{label}",
        )
    cols[-1].button(
        "Reset",
        on_click=state.reset,
        type="primary",
        width="stretch",
        icon=":material/restart_alt:",
        key="custom.reset",
    )
    st.text_input(
        "D(r[, p]) =", key=state.key("formula"), max_chars=MAX_FORMULA_CHARS, placeholder="e.g. r*log(r) - r + 1"
    )
    budget, prob = st.columns(2, gap="large")
    with budget:
        number_with_slider(state, PARAM["delta"], log=True, step=1e-4, help=f"Any δ in [{DELTA_MIN:g}, {DELTA_MAX:g}].")
    with prob:
        number_with_slider(
            state,
            PARAM["p"],
            log=False,
            step=0.001,
            fmt="%.6g",
            help=f"Only used if the formula has p; any value in [{P_MIN:g}, {P_MAX:g}].",
        )
values = state.values()
query = state.sync()

measure = None
try:
    measure = parsed_measure(values["formula"])
except ValueError as exc:
    show_messages([str(exc)], kind="error")
except Exception as exc:  # noqa: BLE001 - any formula the parser lets through but cannot evaluate is a message
    show_messages([f"Could not evaluate the formula {values['formula']!r}: {type(exc).__name__}: {exc}"], kind="error")

if measure is not None:
    intervals, errors = clip_intervals([measure, "kl3"], values["delta"], 0.2, 0.2, values["p"])
    show_messages(errors, kind="error")
    for iv in intervals:
        st.latex(formula_latex(iv))
    columns = st.columns(len(intervals) or 1)
    for col, iv in zip(columns, intervals):
        with col:
            title = "Your measure" if iv.measure is measure else "KL3 (ATR-GRPO)"
            st.markdown(f"**{title}**")
            a, b = st.columns(2)
            a.metric(
                "lower bound l",
                format_bound(iv.lo),
                f"ε_low = {format_bound(iv.eps_low)}",
                delta_color="off",
                delta_arrow="off",
            )
            b.metric(
                "upper bound u",
                format_bound(iv.hi),
                f"ε_high = {format_bound(iv.eps_high)}",
                delta_color="off",
                delta_arrow="off",
            )
    if intervals:
        left, right = st.columns(2)
        figure(divergence_curves(intervals, values["delta"]), "divclip_custom_curves", left, key="custom.curves")
        figure(
            divergence_curves(intervals, values["delta"], log_space=True),
            "divclip_custom_curves_log",
            right,
            key="custom.curves_log",
        )
        figure(interval_chart(intervals), "divclip_custom_intervals", key="custom.intervals")
        st.table(table_rows(intervals), hide_index=True)

st.markdown("**Link to this view**")
st.code(share_link(query), language=None, wrap_lines=True)
