"""The proof: theory's SymPy derivation of a measure's clip bounds, every step checked, and its numbers at δ."""

import streamlit as st
import sympy as sp

from divclip.app.illustration import illustration_rows, symbolic_roots
from divclip.app.methods import label_for
from divclip.app.page_parts import markdown_text, show_messages
from divclip.app.presets import ATR_DELTA, DELTA_MAX, DELTA_MIN
from divclip.app.state import ChoiceParam, FloatParam, PageState
from divclip.theory.symbolic import derivable_measures, derivation

MEASURES = derivable_measures()
PROOF_SPEC = (
    ChoiceParam("measure", "derivable measure", "kl3" if "kl3" in MEASURES else MEASURES[0], MEASURES),
    FloatParam("delta", "δ (divergence budget)", ATR_DELTA, DELTA_MIN, DELTA_MAX),
)
state = PageState("proof", PROOF_SPEC)
url_warnings = state.init()


@st.cache_resource(show_spinner="Deriving with SymPy and running every check…", max_entries=16)
def checked_derivation(name: str):
    """The steps and each step's check result (a few seconds per measure, once per server)."""
    steps = derivation(name)
    return steps, [step.run_check() for step in steps]


@st.cache_resource(show_spinner="Solving D(r) = δ with SymPy…", max_entries=16)
def cached_symbolic_roots(name: str):
    return symbolic_roots(name)


st.title("The proof")
st.markdown(
    "Why is a divergence clip a ratio clip? Below, SymPy derives the clip interval of the chosen measure from its "
    "formula alone: the minimum at r = 1, the two roots of D(r) = δ (for KL3 the two Lambert W branches), their "
    "series, the asymmetry ε_high − ε_low and the gradient rule. Every step's claim is checked by SymPy, and the "
    "numbers at your δ compare the closed form with theory's float64 solver."
)
show_messages(url_warnings, kind="warning")

st.selectbox("Measure", MEASURES, format_func=lambda n: f"{label_for(n)}  ({n})", key=state.key("measure"),
             help="The measures SymPy can derive in closed form (theory.symbolic.derivable_measures()).")
name = state.values()["measure"]


@st.fragment
def numeric_illustration() -> None:
    """Moving δ reruns only this block: the derivation above is neither recomputed nor resent."""
    st.slider("δ for the numbers", DELTA_MIN, DELTA_MAX, step=0.0001, format="%.4f", key=state.key("delta"))
    state.sync()
    delta = state.values()["delta"]
    try:
        roots = cached_symbolic_roots(name)
        rows = illustration_rows(roots, delta)
    except (ValueError, RuntimeError, TypeError) as exc:
        st.error(f"No numeric illustration for {name} at δ = {delta:g}: {exc}")
        return
    st.table(rows, hide_index=True)
    st.caption(f"Closed forms: l_δ and u_δ as SymPy derived them; series variable {roots.series_variable_text}.")
    st.latex(rf"l_\delta = {sp.latex(roots.lower)}, \qquad u_\delta = {sp.latex(roots.upper)}")


with st.container(border=True):
    st.subheader(f"The numbers at δ — {label_for(name)}")
    numeric_illustration()

try:
    steps, results = checked_derivation(name)
except Exception as exc:  # noqa: BLE001 - a derivation theory cannot do is a message on this page, not a traceback
    st.error(f"SymPy could not derive {name}: {type(exc).__name__}: {exc}")
    steps, results = [], []

if steps:
    passed = sum(1 for r in results if bool(r.passed))  # theory may hand back SymPy booleans
    n_numeric = sum(1 for r in results if r.kind == "numeric")
    summary = (f"{passed} of {len(results)} steps checked by SymPy ({len(results) - n_numeric} symbolic, "
               f"{n_numeric} numeric: evaluated at sample points, not proved).")
    (st.success if passed == len(results) else st.warning)(summary)
for i, (step, result) in enumerate(zip(steps, results), start=1):
    st.markdown(f"#### {i}\\. {markdown_text(step.title)}")
    st.markdown(markdown_text(step.explanation))
    st.latex(rf"\begin{{gathered}}{step.latex}\end{{gathered}}")
    if result.passed:
        st.success(f"**Check passed ({result.kind})** — {markdown_text(result.method)}: {markdown_text(result.detail)}",
                   icon=":material/check_circle:")
    else:
        st.error(f"**Check failed ({result.kind})** — {markdown_text(result.method)}: {markdown_text(result.detail)}",
                 icon=":material/cancel:")
state.sync()
