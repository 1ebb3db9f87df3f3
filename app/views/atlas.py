"""Atlas: up to four clip objectives side by side in one frame, the gradient weight w over (q, r) by sign of A."""

import numpy as np
import streamlit as st

from divclip.app.atlas_figures import (
    COLOUR_MODES,
    cross_section_figure,
    heatmap_figure,
    interval_rows,
    q_axis,
    r_axis,
    weight_panels,
)
from divclip.app.correction_figures import (
    DEFAULT_CORRECTIONS,
    interval_table,
    length_figure,
    parse_list,
    weight_figure,
)
from divclip.app.page_parts import figure, markdown_text, number_with_slider, share_link, show_messages
from divclip.app.state import ChoiceParam, FloatParam, IntParam, MethodListParam, PageState, TextParam
from divclip.theory.atlas import arithmetic, catalogue_names, find_method, method_parameters, set_parameter

SPEC = (
    MethodListParam("methods", "methods", ("grpo", "dapo", "dppo_kl", "sapo")),
    FloatParam("q", "cross-section at q", 0.01, 1e-4, 1.0),
    FloatParam("rmax", "ratio range r_max", 10.0, 1.1, 100.0),
    ChoiceParam("colour", "colour", "w", COLOUR_MODES),
    TextParam("corrections", "rollout corrections", "", max_chars=400, omit_default=True),
    IntParam("L", "sequence length L", 10, 1, 10_000, omit_default=True),
)
PARAM = {param.key: param for param in SPEC}
NOTICE = "atlas._notice"
state = PageState("atlas", SPEC)
url_warnings = state.init()


def keep_readable() -> None:
    """The multiselect's callback: a typed method string that does not parse is dropped, with a message."""
    chosen, bad = [], []
    for name in st.session_state[state.key("methods")]:
        try:
            find_method(name)
            chosen.append(name)
        except ValueError as exc:
            bad.append(str(exc))
    st.session_state[state.key("methods")] = chosen
    if bad:
        st.session_state[NOTICE] = bad


def edit_parameter(index: int, method: str, name: str, key: str) -> None:
    """A parameter box's callback: method `index` becomes its method string with `name` set."""
    try:
        new = set_parameter(method, name, st.session_state[key])
    except ValueError as exc:
        st.session_state[NOTICE] = [str(exc)]
        return
    methods = list(state.values()["methods"])
    methods[index] = new
    state.set({"methods": tuple(dict.fromkeys(methods))})


st.title("Atlas")
st.markdown(
    "Every clip objective in one frame. For a token with old probability **q**, ratio **r** = π_θ/π_old and "
    "advantage **A**, a method's loss has ∂ℓ/∂log π = −A·**w**: w = 0 where the gradient is clipped away, w = r "
    "for an unclipped PPO token, the gate's value times r for SAPO. Pick up to four methods (a name from "
    "`divclip atlas`, or type a method string such as `kl3:0.05/cispo`), set their parameters, and read what each "
    "does to a token. The address bar holds the whole view."
)
show_messages(url_warnings, kind="warning")
show_messages(st.session_state.pop(NOTICE, []), kind="error")

with st.container(border=True, key="atlas-controls"):
    current = list(state.values()["methods"])
    st.multiselect(
        "Methods (up to four)",
        list(dict.fromkeys([*catalogue_names(), *current])),
        key=state.key("methods"),
        max_selections=4,
        accept_new_options=True,
        on_change=keep_readable,
        help="Names as in `divclip atlas`; a typed method string is accepted if it parses.",
    )
    q_col, r_col, c_col = st.columns([3, 2, 1], vertical_alignment="bottom")
    with q_col:
        number_with_slider(
            state,
            PARAM["q"],
            log=True,
            step=1e-3,
            fmt="%.6g",
            help="The cross-section and the interval table are at this old probability.",
        )
    r_col.number_input(
        PARAM["rmax"].label,
        min_value=PARAM["rmax"].lo,
        max_value=PARAM["rmax"].hi,
        step=1.0,
        key=state.key("rmax"),
        help="The ratio axis runs from 1/r_max to r_max (log scale).",
    )
    c_col.radio(
        "Colour",
        COLOUR_MODES,
        key=state.key("colour"),
        horizontal=True,
        help="w itself, or w/r: the share of the unclipped PPO weight the method keeps.",
    )
    methods = list(state.values()["methods"])
    if methods:
        for i, (col, method) in enumerate(zip(st.columns(len(methods)), methods)):
            with col.expander(f"Parameters of {method}"):
                for p in method_parameters(method):
                    key = f"atlas.param.{i}.{method}.{p['name']}"
                    if isinstance(p["value"], bool):  # a flag (clamp_log_ratio, sapo_seq_mean)
                        st.checkbox(
                            p["name"],
                            value=bool(p["value"]),
                            key=key,
                            help=p["doc"],
                            on_change=edit_parameter,
                            args=(i, method, p["name"], key),
                        )
                        continue
                    if isinstance(p["value"], str):
                        continue  # a choice parameter: set it in the method string
                    st.number_input(
                        p["name"],
                        value=float(p["value"]),
                        format="%.6g",
                        key=key,
                        help=p["doc"],
                        on_change=edit_parameter,
                        args=(i, method, p["name"], key),
                    )

values = state.values()
query = state.sync()
methods, q = list(values["methods"]), values["q"]
if not methods:
    st.info("Choose at least one method above.")
    st.stop()

st.subheader(f"What each method does to a token with q = {q:.4g}")
st.table(interval_rows(methods, q), hide_index=True)
engine_lines = []
for method in methods:
    try:
        entries = arithmetic(method)
    except ValueError:
        entries = []  # a method theory refuses is reported by the table and figures above
    engine_lines += [
        f"- `{method}`, **{markdown_text(a['option'])}**, where {markdown_text(a['where'])}: "
        f"{markdown_text(a['text'])}; {markdown_text(a['verl'])}."
        for a in entries
    ]
if engine_lines:
    st.markdown(
        "**Engine arithmetic the method strings carry** (docs/engines.md; `divclip atlas` prints the numbers):\n"
        + "\n".join(engine_lines)
    )
r_fine = r_axis(values["rmax"], 401)
figure(cross_section_figure(methods, q, r_fine), "divclip_atlas_cross_section", key="atlas.cross_section")

q_grid, r_grid = q_axis(), r_axis(values["rmax"])
panels, problems = weight_panels(methods, np.unique(np.append(q_grid, q)), r_grid)
show_messages(problems, kind="warning")
if panels:
    figure(
        heatmap_figure(panels, np.unique(np.append(q_grid, q)), r_grid, values["colour"], q_mark=q),
        "divclip_atlas_heatmaps",
        key="atlas.heatmaps",
    )
    st.caption(
        "Grey cells: w = 0, the gradient is clipped away; colours: w > 0 (w = 1 mid-scale). White cells marked "
        "q·r > 1: a new probability above 1, no token (the cross-section shades the same ratios). The dotted line "
        "is the cross-section's q; the grey line is q·r = 1. Every number is `divclip.theory.gradient_weight` "
        "(docs/theory.md §8)."
    )

st.subheader("The third policy: rollout corrections")
st.markdown(
    "The inference engine's probabilities π_rollout differ from the trainer's π_old, and every engine corrects for "
    "it with a second divergence clip, on **ρ = π_old/π_rollout**: an importance weight truncated or masked to a "
    "band, or a rejection of tokens or whole sequences whose k1/k2/k3 exceeds a threshold (docs/theory.md §10). "
    "Type correction strings as `divclip atlas --correction` takes them (verl `is=`/`rs=`, TRL's "
    "`is=sequence:mask=3.0/noclamp`, AReaL's `filter=`, `m2po=`)."
)
corr_col, len_col = st.columns([4, 1], vertical_alignment="bottom")
corr_col.text_input(
    "Corrections (comma-separated, up to four)",
    key=state.key("corrections"),
    placeholder="e.g. is=sequence:mask=3.0/noclamp, rs=token_k3:0.01",
    help="e.g. is=token:tis=2.0, rs=seq_mean_k1:0.999_1.001, filter=token:ratio:mask:5.0, m2po=0.04",
)
len_col.number_input("Sequence length L", min_value=PARAM["L"].lo, max_value=PARAM["L"].hi, step=1, key=state.key("L"))
length = values["L"]
corrections, correction_errors = parse_list(values["corrections"])
show_messages(correction_errors, kind="error")
if not values["corrections"].strip():
    st.button(
        "Draw the engines' usual corrections",
        on_click=state.set,
        args=({"corrections": DEFAULT_CORRECTIONS},),
        key="atlas.corrections_default",
        help=DEFAULT_CORRECTIONS,
    )
if corrections:
    figure(weight_figure(corrections, int(length)), "divclip_correction_weight", key="atlas.corr_w")
    figure(length_figure(corrections), "divclip_correction_length", key="atlas.corr_len")
    st.table(interval_table(corrections), hide_index=True)
    st.caption(
        "Above: the weight × keep of a token (mean over the sequence) when every token has the same ρ, computed by "
        "`divclip.theory.rollout_correction` (an off-policy mask: for A < 0). Below and the table: the ρ each part "
        "keeps or leaves untruncated, `divclip.theory.correction_bounds.correction_intervals`; a token k3 threshold "
        "δ is KL3's Lambert W interval, a sequence bound on Π ρ_t its L-th root."
    )

st.markdown("**Link to this view**")
st.code(share_link(query), language=None, wrap_lines=True)
