"""The proof: theory's SymPy derivation of a measure's clip bounds as a lecture, one step at a time (or all at
once to print), every check said in plain words and marked symbolic or numeric, then the numbers at δ."""

import streamlit as st
import sympy as sp

from divclip.app.illustration import illustration_rows, symbolic_roots
from divclip.app.methods import label_for
from divclip.app.page_parts import number_with_slider, show_messages
from divclip.app.presets import ATR_DELTA, DELTA_MAX, DELTA_MIN
from divclip.app.proof_text import check_kind, check_parts, lecture_markdown, step_prose, step_title
from divclip.app.state import ChoiceParam, FloatParam, IntParam, PageState, format_number
from divclip.theory import equivalent_ratio_clip
from divclip.theory.symbolic import derivable_measures, derivation, measure_expression

MEASURES = derivable_measures()
MAX_STEPS = 20  # more than any derivation has; the page clamps to the measure's own count
VIEWS = ("lecture", "all")
PROOF_SPEC = (
    ChoiceParam("measure", "derivable measure", "kl3" if "kl3" in MEASURES else MEASURES[0], MEASURES),
    FloatParam("delta", "δ (divergence budget)", ATR_DELTA, DELTA_MIN, DELTA_MAX),
    IntParam("step", "lecture step", 1, 1, MAX_STEPS),
    ChoiceParam("view", "view", "lecture", VIEWS),
)
PARAM = {param.key: param for param in PROOF_SPEC}
state = PageState("proof", PROOF_SPEC)
url_warnings = state.init()
BADGE = {"symbolic": ":blue-badge[symbolic]", "numeric": ":orange-badge[numeric]",
         "symbolic + numeric": ":blue-badge[symbolic] :orange-badge[numeric]"}


@st.cache_resource(show_spinner="Deriving with SymPy and running every check…", max_entries=16)
def checked_derivation(name: str):
    """The steps and each step's check result (a few seconds per measure, once per server)."""
    steps = derivation(name)
    return steps, [step.run_check() for step in steps]


@st.cache_resource(show_spinner="Solving D(r) = δ with SymPy…", max_entries=16)
def cached_symbolic_roots(name: str):
    return symbolic_roots(name)


def go_to(step: int) -> None:
    st.session_state[state.key("step")] = step


st.title("The proof")
st.markdown(
    r"Why is a divergence clip a ratio clip? SymPy derives the clip interval $[l_\delta, u_\delta]$ of the chosen "
    r"measure from its formula alone: the minimum at $r = 1$, the two roots of $D(r) = \delta$ (for KL3 the two "
    r"Lambert $W$ branches $W_0$ and $W_{-1}$), their series, the asymmetry "
    r"$\varepsilon_{\mathrm{high}} - \varepsilon_{\mathrm{low}}$ and the gradient rule. Every step's claim is "
    r"checked, symbolically where SymPy can and numerically (40-digit arithmetic) where it cannot; the last "
    r"step puts numbers on the closed form at your $\delta$."
)
show_messages(url_warnings, kind="warning")

measure_col, view_col = st.columns([3, 2], vertical_alignment="bottom")
measure_col.selectbox("Measure", MEASURES, format_func=lambda n: f"{label_for(n)}  ({n})", key=state.key("measure"),
                      help="The measures SymPy can derive in closed form (theory.symbolic.derivable_measures()).")
view_col.segmented_control("View", VIEWS, format_func={"lecture": "One step at a time", "all": "All steps"}.get,
                           key=state.key("view"), required=True,
                           help="One step at a time to present (the step is in the address bar); all steps to "
                                "read or print.")
name = state.values()["measure"]

try:
    steps, results = checked_derivation(name)
except Exception as exc:  # noqa: BLE001 - a derivation theory cannot do is a message on this page, not a traceback
    st.error(f"SymPy could not derive {name}: {type(exc).__name__}: {exc}")
    steps, results = [], []
n_pages = len(steps) + 1  # the derivation's steps, then the numbers
if st.session_state[state.key("step")] > n_pages:
    st.session_state[state.key("step")] = n_pages


def show_step(i: int) -> None:
    step, result = steps[i - 1], results[i - 1]
    st.markdown(f"#### {i}\\. {step_title(step)}")
    st.markdown(step_prose(step, name))
    st.latex(rf"\begin{{gathered}}{step.latex}\end{{gathered}}")
    kind = check_kind(result)
    words = "\n".join(f"- {BADGE[part.kind]} {part.words}" for part in check_parts(result))
    passed = bool(result.passed)  # theory may hand back SymPy booleans
    alert = st.success if passed else st.error
    alert(f"**Check {'passed' if passed else 'failed'}** ({kind})\n\n{words}",
          icon=":material/check_circle:" if passed else ":material/cancel:")
    with st.expander("What SymPy computed"):
        st.code(f"method: {result.method}\n\n{result.detail}", language=None, wrap_lines=True)


@st.fragment
def numbers() -> None:
    """Moving δ reruns only this block: the derivation is neither recomputed nor resent."""
    st.subheader(rf"The numbers at $\delta$: {label_for(name)}")
    number_with_slider(state, PARAM["delta"], log=True, step=1e-4, fmt="%.8g",
                       help="Any δ from 1e-8 to 0.5: the closed form, theory's float64 solver and the series.")
    state.sync()
    delta = state.values()["delta"]
    try:
        roots = cached_symbolic_roots(name)
        rows = illustration_rows(roots, delta)
    except (ValueError, RuntimeError, TypeError) as exc:
        st.error(f"No numeric illustration for {name} at δ = {delta:g}: {exc}")
        return
    st.table(rows, hide_index=True)
    st.caption(f"Closed forms: l_δ and u_δ as SymPy derived them; series variable {roots.series_variable_text}. "
               "The first row is the closed form evaluated with 30-digit arithmetic.")
    st.latex(rf"l_\delta = {sp.latex(roots.lower)}, \qquad u_\delta = {sp.latex(roots.upper)}")
    links(delta)


def links(delta: float) -> None:
    lo_eps, hi_eps = equivalent_ratio_clip(name, delta)
    left, right = st.columns(2)
    left.page_link("views/clip_explorer.py", label=f"{label_for(name)} at this δ in the clip explorer",
                   icon=":material/tune:",
                   query_params={"delta": format_number(delta), "measures": f"{name},ratio",
                                 "eps_low": format_number(lo_eps), "eps_high": format_number(hi_eps)})
    right.page_link("views/sanity_check.py", label=f"Sanity-check a config against ε = {lo_eps:.4g} / {hi_eps:.4g}",
                    icon=":material/fact_check:",
                    query_params={"eps_low": format_number(lo_eps), "eps_high": format_number(hi_eps),
                                  "measure": name})


if steps:
    passed = sum(1 for r in results if bool(r.passed))
    kinds = [check_kind(r) for r in results]
    summary = (f"{passed} of {len(results)} steps checked: {kinds.count('symbolic')} symbolically, "
               f"{kinds.count('numeric')} numerically, {kinds.count('symbolic + numeric')} both ways.")
    (st.success if passed == len(results) else st.warning)(summary)
    st.markdown(rf"**Measure:** $D(r) = {sp.latex(measure_expression(name))}$")

view = state.values()["view"]
if view == "lecture" and steps:
    current = st.session_state[state.key("step")]
    st.progress(current / n_pages, text=f"Step {current} of {n_pages}")
    with st.container(border=True, key="proof-step"):
        if current <= len(steps):
            show_step(current)
        else:
            numbers()
    prev_col, _, next_col = st.columns([1, 2, 1])
    prev_col.button("Previous", icon=":material/arrow_back:", key="proof.prev", on_click=go_to,
                    args=(current - 1,), disabled=current <= 1, width="stretch")
    next_col.button("Next", icon=":material/arrow_forward:", key="proof.next", on_click=go_to, args=(current + 1,),
                    disabled=current >= n_pages, width="stretch", type="primary")
elif steps:
    for i in range(1, len(steps) + 1):
        show_step(i)
    with st.container(border=True, key="proof-numbers"):
        numbers()
state.sync()

if steps:
    delta = state.values()["delta"]
    try:
        roots = cached_symbolic_roots(name)
        rows, closed = illustration_rows(roots, delta), rf"l_\delta = {sp.latex(roots.lower)}, \qquad " \
                                                        rf"u_\delta = {sp.latex(roots.upper)}"
    except (ValueError, RuntimeError, TypeError):
        rows, closed = [], ""
    st.download_button("All steps as Markdown", lecture_markdown(name, label_for(name), steps, results, delta, rows,
                                                                 closed),
                       file_name=f"divclip_proof_{name}.md", mime="text/markdown", icon=":material/download:",
                       key="proof.download")
