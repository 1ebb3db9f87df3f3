"""The proof: theory's SymPy derivation of a measure's clip bounds as a lecture, one step at a time (or all at
once to print), each step with a live figure driven by one δ control, every check said in plain words and marked
symbolic or numeric, then the sign of A and the equivalence theorem, then the numbers at δ. Presenter mode: large
type, figure and controls side by side on one screen, a question to ask before moving δ."""

import dataclasses
import threading

import streamlit as st
import sympy as sp

from divclip.app import proof_figures
from divclip.app.illustration import illustration_rows, symbolic_roots
from divclip.app.methods import label_for
from divclip.app.page_parts import figure, number_with_slider, show_messages
from divclip.app.presets import ATR_DELTA, DELTA_MAX, DELTA_MIN
from divclip.app.proof_text import (
    SIGN_TITLE,
    check_kind,
    check_parts,
    closed_form_latex,
    lecture_markdown,
    sign_step,
    sign_table,
    step_prose,
    step_question,
    step_title,
    wrap_rows,
)
from divclip.app.sign_of_a import sign_curves
from divclip.app.state import BoolParam, ChoiceParam, FloatParam, IntParam, PageState, format_number
from divclip.theory import equivalent_ratio_clip, get_measure
from divclip.theory.symbolic import derivable_measures, derivation, measure_expression

MEASURES = derivable_measures()
MAX_STEPS = 20  # more than any lecture has; the page clamps to the measure's own count
VIEWS = ("lecture", "all")
PROOF_SPEC = (
    ChoiceParam("measure", "derivable measure", "kl3" if "kl3" in MEASURES else MEASURES[0], MEASURES),
    FloatParam("delta", "δ (divergence budget)", ATR_DELTA, DELTA_MIN, DELTA_MAX),
    IntParam("step", "lecture step", 1, 1, MAX_STEPS),
    ChoiceParam("view", "view", "lecture", VIEWS),
    BoolParam("presenter", "presenter mode"),
)
PARAM = {param.key: param for param in PROOF_SPEC}
# The steps' display formulas a little smaller than Streamlit's 1.21em, so that a row fits a half-width column
# at 1024 px (wrap_rows cuts the rows; KaTeX itself never breaks a display formula).
STEP_CSS = "<style>.st-key-proof-step .katex-display > .katex { font-size: 1.08em; }</style>"
state = PageState("proof", PROOF_SPEC)
url_warnings = state.init()
BADGE = {
    "symbolic": ":blue-badge[symbolic]",
    "numeric": ":orange-badge[numeric]",
    "symbolic + numeric": ":blue-badge[symbolic] :orange-badge[numeric]",
}
# Presenter mode at 1280×800: no sidebar, large type, little padding, so one step fits the screen.
PRESENTER_CSS = """<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"] { display: none; }
[data-testid="stMainBlockContainer"] { padding: 1rem 1.5rem 0.5rem 1.5rem; max-width: none; }
.st-key-proof-step [data-testid="stMarkdownContainer"] p,
.st-key-proof-step [data-testid="stMarkdownContainer"] li { font-size: 1.22rem; line-height: 1.45; }
.st-key-proof-step h4 { font-size: 1.7rem; padding-top: 0; }
.st-key-proof-step .katex { font-size: 1.18em; }
.st-key-proof-step .katex-display { overflow-x: auto; overflow-y: hidden; }
.st-key-proof-title h1 { font-size: 1.6rem; padding: 0; }
</style>"""


@st.cache_resource(show_spinner="Deriving with SymPy and running every check…", max_entries=16)
def checked_derivation(name: str):
    """The steps and each step's check result (a few seconds per measure, once per server)."""
    steps = derivation(name)
    return steps, [step.run_check() for step in steps]


@st.cache_resource(show_spinner="Solving D(r) = δ with SymPy…", max_entries=16)
def cached_symbolic_roots(name: str):
    return symbolic_roots(name)


@st.cache_resource(show_spinner=False)
def warm_sign_step() -> threading.Thread:
    """Once per server, in a background thread: import torch and run theory's policy_loss on one token, so that
    the first Next into the sign-of-A step does not pay torch's import (seconds) in front of the class. Pure
    Python and torch, no Streamlit call: the step itself still computes its own check when it opens."""

    def warm():
        try:
            import torch

            from divclip.theory.losses import policy_loss

            one = torch.zeros(1, 1, dtype=torch.float64)
            policy_loss(one, one, torch.ones(1, 1, dtype=torch.float64), torch.ones(1, 1), "grpo")
        except Exception as exc:  # noqa: BLE001 - a failed warm-up leaves the step to pay its own cost
            thread.error = exc

    thread = threading.Thread(target=warm, name="divclip-warm-sign-step", daemon=True)
    thread.error = None
    thread.start()
    return thread


@st.cache_resource(show_spinner="Running theory's loss for both signs of A…", max_entries=64)
def checked_sign_step(name: str, delta: float):
    step = sign_step(name, delta)
    return step, step.run_check(), sign_curves(name, delta)


def go_to(step: int) -> None:
    st.session_state[state.key("step")] = step


def fitted_step_warnings(warnings: list[str], n_pages: int) -> list[str]:
    """The URL's step warning said against this measure's own number of pages (not MAX_STEPS)."""
    raw = st.query_params.get("step")
    if raw is None:
        return warnings
    _, fitted = dataclasses.replace(PARAM["step"], hi=n_pages).parse(raw)
    return [w for w in warnings if not w.startswith("step=")] + ([fitted] if fitted else [])


# ------------------------------------------------------------------------------------------ the header
values = state.values()
presenter = values["presenter"]
st.html(PRESENTER_CSS if presenter else STEP_CSS)
name = values["measure"]
with st.container(key="proof-title"):
    st.title("The proof" if not presenter else f"The proof: {label_for(name)}")
if not presenter:
    st.markdown(
        r"Why is a divergence clip a ratio clip? SymPy derives the clip interval $[l_\delta, u_\delta]$ of the "
        r"chosen measure from its formula alone: the minimum at $r = 1$, the two roots of $D(r) = \delta$ (for KL3 "
        r"the two Lambert $W$ branches $W_0$ and $W_{-1}$), their series, the asymmetry "
        r"$\varepsilon_{\mathrm{high}} - \varepsilon_{\mathrm{low}}$ and the gradient rule; then the sign of $A$ "
        r"and the equivalence theorem. Every step's claim is checked, symbolically where SymPy can and numerically "
        r"where it cannot, and every step has a figure that follows the $\delta$ below."
    )

st.session_state["proof.warm"] = warm_sign_step()  # the sign-of-A step's torch import, off the lecture's path
try:
    steps, results = checked_derivation(name)
except Exception as exc:  # noqa: BLE001 - a derivation theory cannot do is a message on this page, not a traceback
    st.error(f"SymPy could not derive {name}: {type(exc).__name__}: {exc}")
    steps, results = [], []
n_pages = len(steps) + 2  # the derivation's steps, the sign of A, then the numbers
if steps and st.session_state[state.key("step")] > n_pages:
    st.session_state[state.key("step")] = n_pages
    url_warnings = fitted_step_warnings(url_warnings, n_pages)
show_messages(url_warnings, kind="warning")


def controls(lecture: bool) -> None:
    """Measure, view, presenter toggle and the one δ that drives every figure (Prev/Next beside them in
    presenter mode, so nothing needs scrolling)."""
    with st.container(border=not presenter, key="proof-controls"):
        if presenter:
            cols = st.columns([1.5, 2.9, 1.15, 1.0, 1.25], vertical_alignment="bottom")
            measure_col, delta_col, prev_col, next_col, toggle_col = cols
        else:
            measure_col, view_col, toggle_col = st.columns([3, 2, 1.3], vertical_alignment="bottom")
            view_col.segmented_control(
                "View",
                VIEWS,
                format_func={"lecture": "One step at a time", "all": "All steps"}.get,
                key=state.key("view"),
                required=True,
                help="One step at a time to present (the step is in the address bar); all steps to read or print.",
            )
            delta_col = st.container()
        measure_col.selectbox(
            "Measure",
            MEASURES,
            format_func=lambda n: f"{label_for(n)}  ({n})",
            key=state.key("measure"),
            help="The measures SymPy can derive in closed form (derivable_measures()).",
        )
        toggle_col.toggle(
            "Presenter",
            key=state.key("presenter"),
            help="Large type, the figure beside the step, a question before each move of δ "
            "(presenter=1 in the address bar).",
        )
        with delta_col:
            number_with_slider(
                state,
                PARAM["delta"],
                log=True,
                step=1e-4,
                fmt="%.8g",
                help="Any δ from 1e-8 to 0.5: every figure and the numbers follow it.",
            )
        if presenter and lecture:
            nav_buttons(prev_col, next_col)


def nav_buttons(prev_col, next_col) -> None:
    current = st.session_state[state.key("step")]
    prev_col.button(
        "Previous",
        icon=":material/arrow_back:",
        key="proof.prev",
        on_click=go_to,
        args=(current - 1,),
        disabled=current <= 1,
        width="stretch",
    )
    next_col.button(
        "Next",
        icon=":material/arrow_forward:",
        key="proof.next",
        on_click=go_to,
        args=(current + 1,),
        disabled=current >= n_pages,
        width="stretch",
        type="primary",
    )


view = values["view"]
controls(lecture=view == "lecture" and bool(steps))
state.sync()
delta = state.values()["delta"]
FIG_HEIGHT = 310 if presenter else 400  # presenter: figure, question and answer within 800 px


# ------------------------------------------------------------------------------------------ one step
def step_figure(title: str, i: int) -> None:
    """The step's live figure (theory's numbers at the page's δ)."""
    key = f"proof.figure.{i}"
    if title == "Lambert-W form of D = δ":
        fig = proof_figures.lambert_figure(delta, FIG_HEIGHT)
    elif title.startswith("Minimum at r = 1") and "kink" not in title:
        fig = proof_figures.convexity_figure(name, delta, FIG_HEIGHT)
    elif title == "Bracketing l < 1 < u" and name == "kl3":
        fig = proof_figures.branches_figure(delta, FIG_HEIGHT)
    elif title.startswith("Series of the roots"):
        fig = proof_figures.series_figure(cached_symbolic_roots(name), delta, FIG_HEIGHT)
    elif title == "Asymmetry ε_high − ε_low":
        leading = steps[i - 1].statement.rhs.removeO()
        why, against = st.tabs(["Why: the two sides folded", "ε_high − ε_low against δ"])
        figure(
            proof_figures.mirror_figure(name, delta, FIG_HEIGHT - 40),
            f"divclip_proof_{name}_mirror",
            why,
            key=f"{key}.mirror",
        )
        figure(
            proof_figures.asymmetry_figure(name, delta, leading, FIG_HEIGHT - 40),
            f"divclip_proof_{name}_gap",
            against,
            key=f"{key}.gap",
        )
        return
    elif title == SIGN_TITLE:
        fig = proof_figures.sign_figure(checked_sign_step(name, delta)[2], FIG_HEIGHT + (20 if presenter else 40))
    else:
        fig = proof_figures.roots_figure(
            name, delta, FIG_HEIGHT, regions=title == "Gradient rule = ratio clipping on [l, u]"
        )
    figure(fig, f"divclip_proof_{name}_step{i}", key=key)


def step_check(result, i: int, table: str = "") -> None:
    """The check's verdict; in presenter mode one line, with how it was checked (and `table`, markdown) in an
    expander whose key is the step's, so that it opens closed on every step."""
    kind = check_kind(result)
    words = "\n".join(f"- {BADGE[part.kind]} {part.words}" for part in check_parts(result))
    passed = bool(result.passed)  # theory may hand back SymPy booleans
    alert = st.success if passed else st.error
    if presenter:  # one line on the screen; the words one click away
        alert(
            f"**Check {'passed' if passed else 'failed'}** ({kind})",
            icon=":material/check_circle:" if passed else ":material/cancel:",
        )
        label = "How it was checked" + (", and the table of docs/theory.md §1.1" if table else "")
        with st.expander(label, key=f"proof.how.{name}.{i}"):
            st.markdown(words)
            st.code(f"method: {result.method}\n\n{result.detail}", language=None, wrap_lines=True)
            if table:
                st.markdown(table)
        return
    alert(
        f"**Check {'passed' if passed else 'failed'}** ({kind})\n\n{words}",
        icon=":material/check_circle:" if passed else ":material/cancel:",
    )
    with st.expander(
        "What SymPy computed"
        if result.method != "numeric: theory.policy_terms at random tokens"
        else "What theory's loss computed"
    ):
        st.code(f"method: {result.method}\n\n{result.detail}", language=None, wrap_lines=True)


def question(title: str, i: int) -> None:
    ask, answer = step_question(title, name, delta)
    st.markdown(f"**Predict:** {ask}")
    # a key per step and measure: Streamlit would otherwise keep the previous step's expander open
    with st.expander("Reveal", icon=":material/visibility:", key=f"proof.reveal.{name}.{i}"):
        st.markdown(answer)


def show_step(i: int, step, result, lecture: bool) -> None:
    text_col, figure_col = st.columns([1, 1.15] if presenter else [1, 1], gap="medium")
    lo, hi = get_measure(name).bounds(delta)
    with text_col:
        st.markdown(f"#### {i}\\. {step_title(step)}")
        st.markdown(step_prose(step, name))
        st.latex(rf"\begin{{gathered}}{wrap_rows(step.latex, 34 if presenter else 18)}\end{{gathered}}")
        if step.title == SIGN_TITLE and not presenter:
            st.markdown(sign_table(lo, hi))
        step_check(result, i, sign_table(lo, hi) if step.title == SIGN_TITLE and presenter else "")
    with figure_col:
        step_figure(step.title, i)
        if lecture:
            question(step.title, i)


def numbers(lecture: bool) -> None:
    st.subheader(rf"The numbers at $\delta$ = {delta:.8g}: {label_for(name)}")
    try:
        roots = cached_symbolic_roots(name)
        rows = illustration_rows(roots, delta)
    except (ValueError, RuntimeError, TypeError) as exc:
        st.error(f"No numeric illustration for {name} at δ = {delta:g}: {exc}")
        return
    st.table(rows, hide_index=True)
    if not presenter:  # presenter: the table, the closed forms and the question within 800 px
        st.caption(
            f"Closed forms: l_δ and u_δ as SymPy derived them; series variable {roots.series_variable_text}. "
            "The first row is the closed form evaluated with 30-digit arithmetic."
        )
    st.latex(rf"l_\delta = {closed_form_latex(roots.lower)}, \qquad u_\delta = {closed_form_latex(roots.upper)}")
    if lecture:
        question("numbers", n_pages)
    links()


def links() -> None:
    lo_eps, hi_eps = equivalent_ratio_clip(name, delta)
    left, right = st.columns(2)
    left.page_link(
        "views/clip_explorer.py",
        label=f"{label_for(name)} at this δ in the clip explorer",
        icon=":material/tune:",
        query_params={
            "delta": format_number(delta),
            "measures": f"{name},ratio",
            "eps_low": format_number(lo_eps),
            "eps_high": format_number(hi_eps),
        },
    )
    right.page_link(
        "views/sanity_check.py",
        label=f"Sanity-check a config against ε = {lo_eps:.4g} / {hi_eps:.4g}",
        icon=":material/fact_check:",
        query_params={"eps_low": format_number(lo_eps), "eps_high": format_number(hi_eps), "measure": name},
    )


# ------------------------------------------------------------------------------------------ the lecture
if steps and not presenter:
    passed = sum(1 for r in results if bool(r.passed))
    kinds = [check_kind(r) for r in results]
    summary = (
        f"{passed} of {len(results)} derivation steps checked: {kinds.count('symbolic')} symbolically, "
        f"{kinds.count('numeric')} numerically, {kinds.count('symbolic + numeric')} both ways."
    )
    (st.success if passed == len(results) else st.warning)(summary)
    st.markdown(rf"**Measure:** $D(r) = {sp.latex(measure_expression(name))}$")


def lecture_step(i: int):
    """(step, check result) of lecture page i ≤ n_pages − 1: a derivation step or the sign of A."""
    if i <= len(steps):
        return steps[i - 1], results[i - 1]
    step, result, _ = checked_sign_step(name, delta)
    return step, result


if view == "lecture" and steps:
    current = st.session_state[state.key("step")]
    st.progress(current / n_pages, text=f"Step {current} of {n_pages}")
    with st.container(border=not presenter, key="proof-step"):
        if current < n_pages:
            show_step(current, *lecture_step(current), lecture=True)
        else:
            numbers(lecture=True)
    if not presenter:
        prev_col, _, next_col = st.columns([1, 2, 1])
        nav_buttons(prev_col, next_col)
elif steps:
    with st.container(key="proof-step"):
        for i in range(1, n_pages):
            show_step(i, *lecture_step(i), lecture=False)
    with st.container(border=True, key="proof-numbers"):
        numbers(lecture=False)

if steps and not presenter:
    try:
        roots = cached_symbolic_roots(name)
        rows, closed = (
            illustration_rows(roots, delta),
            (
                rf"l_\delta = {closed_form_latex(roots.lower)}, \qquad "
                rf"u_\delta = {closed_form_latex(roots.upper)}"
            ),
        )
    except (ValueError, RuntimeError, TypeError):
        rows, closed = [], ""

    def lecture_file(name=name, delta=delta, rows=rows, closed=closed) -> str:
        """Built on click (theory's loss for the sign-of-A check imports torch: not on the page's first load)."""
        sign = sign_step(name, delta)
        return lecture_markdown(
            name, label_for(name), [*steps, sign], [*results, sign.run_check()], delta, rows, closed
        )

    st.download_button(
        "All steps as Markdown",
        lecture_file,
        file_name=f"divclip_proof_{name}.md",
        mime="text/markdown",
        icon=":material/download:",
        key="proof.download",
    )
