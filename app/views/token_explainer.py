"""Token explainer: one token (q, r, A), typed or taken from an uploaded rollout file, under each chosen method: its
loss term with the numbers filled in, its gradient weight, whether the gradient is zero and which rule made it so.
The words come from `divclip.app.token_terms`, every number from theory."""

import math

import streamlit as st

from divclip.app.page_parts import markdown_text, number_with_slider, share_link, show_messages
from divclip.app.state import FloatParam, PageState, TextParam
from divclip.app.token_terms import explain_token, most_moved, token_at
from divclip.sanity.loaders import load_rollouts
from divclip.theory.spec import parse_methods

ROLLOUT_TYPES = ["npz", "parquet", "jsonl", "safetensors"]
Q_MIN, R_MIN, R_MAX, A_MAX = 1e-6, 1e-3, 100.0, 100.0
EXAMPLES = {
    "GRPO, DAPO, ATR-GRPO, DPPO": "grpo,dapo,atr,dppo_kl",
    "with the dual clip": "grpo/dual=3,atr/dual=3",
    "CISPO and SAPO": "ratio:0.2:0.28/cispo,sapo",
}
TOKEN_SPEC = (
    FloatParam("q", "q = π_old(a), the token's old probability", 0.1, Q_MIN, 1.0),
    FloatParam("r", "r = π_θ(a) / π_old(a)", 1.3, R_MIN, R_MAX),
    FloatParam("adv", "A, the token's advantage", 1.0, -A_MAX, A_MAX),
    TextParam("methods", "methods", EXAMPLES["GRPO, DAPO, ATR-GRPO, DPPO"], max_chars=2000),
)
PARAM = {param.key: param for param in TOKEN_SPEC}
state = PageState("token", TOKEN_SPEC)
url_warnings = state.init()


def use_token(token: dict) -> None:
    """The file's token into the controls, clamped to their ranges (a button callback)."""
    state.set(
        {
            "q": min(max(token["q"], Q_MIN), 1.0),
            "r": min(max(token["r"], R_MIN), R_MAX),
            "adv": min(max(token["adv"], -A_MAX), A_MAX),
        }
    )


@st.cache_data(max_entries=4, show_spinner="Reading the rollout file…")
def loaded_rollouts(name: str, data: bytes):
    return load_rollouts(data, name)


st.title("Token explainer")
st.markdown(
    "Pick one token, by its old probability q, its ratio r and its advantage A, or from a rollout file, and read what "
    "each method does to it: the loss term with the numbers filled in, the gradient weight w "
    "(∂ℓ/∂log π = −A·w, from theory's `gradient_weight`), and whether the gradient is zero and which rule made it "
    "so (docs/theory.md §1.1)."
)
show_messages(url_warnings, kind="warning")

by_numbers, from_file = st.tabs(["By its numbers", "From a rollout file"])
with by_numbers:
    q_col, r_col, a_col = st.columns(3, gap="medium")
    with q_col:
        number_with_slider(
            state,
            PARAM["q"],
            log=True,
            step=0.01,
            fmt="%.6g",
            help="π_old(a): per-token measures (binary KL/TV) clip rare tokens differently.",
        )
    with r_col:
        number_with_slider(state, PARAM["r"], log=True, step=0.01, fmt="%.6g", help="π_θ(a)/π_old(a).")
    with a_col:
        number_with_slider(
            state,
            PARAM["adv"],
            log=False,
            step=0.1,
            fmt="%.6g",
            slider_step=0.01,
            help="Its sign decides which bound can bind.",
        )
with from_file:
    upload = st.file_uploader(
        "Rollouts (old_log_prob, advantages, response_mask, log_prob)", type=ROLLOUT_TYPES, key="token.rollouts"
    )
    if upload is not None:
        try:
            ro = loaded_rollouts(upload.name, upload.getvalue())
        except ValueError as exc:
            ro = None
            show_messages([str(exc)], kind="error")
        if ro is not None and ro.n_tokens:
            i0, t0 = most_moved(ro)
            seq_col, pos_col = st.columns(2)
            i = int(seq_col.number_input("sequence", 0, ro.shape[0] - 1, i0, key="token.seq"))
            t = int(pos_col.number_input("position", 0, ro.shape[1] - 1, t0, key="token.pos"))
            token = token_at(ro, i, t)
            counted = bool(ro.response_mask[i, t] > 0)
            note = "" if ro.log_prob is not None else " (the file has no log_prob: r = 1)"
            st.caption(
                f"Token ({i}, {t}): q = {token['q']:.6g}, r = {token['r']:.6g} (log r = {token['log_r']:.6g})"
                f"{note}, A = {token['adv']:.6g}"
                + ("" if counted else "; outside the response mask, no trainer counts it")
            )
            if not (R_MIN <= token["r"] <= R_MAX and Q_MIN <= token["q"] and abs(token["adv"]) <= A_MAX):
                st.info(
                    f"This token is outside the explainer's range (q >= {Q_MIN:g}, r in [{R_MIN:g}, {R_MAX:g}], "
                    f"|A| <= {A_MAX:g}): the button explains it at the nearest point of that range."
                )
            st.button(
                "Explain this token",
                on_click=use_token,
                args=(token,),
                key="token.use",
                icon=":material/arrow_downward:",
            )
        elif ro is not None:
            st.info("The file has no counted tokens (response_mask is 0 everywhere).")

with st.container(border=True, key="token-methods"):
    cols = st.columns(len(EXAMPLES))
    for col, (label, text) in zip(cols, EXAMPLES.items()):
        col.button(
            label,
            help=text,
            on_click=state.set,
            args=({"methods": text},),
            width="stretch",
            key=f"token.example.{label}",
        )
    st.text_input(
        "Methods (method strings, comma-separated)",
        key=state.key("methods"),
        help="Presets (grpo, dapo, atr, dppo_kl, dppo_tv, sapo) or method strings such as kl3:0.05, "
        "ratio:0.2:0.28/cispo, grpo/dual=3.",
    )
values = state.values()
query = state.sync()

try:
    methods = parse_methods(values["methods"])
except ValueError as exc:
    show_messages([f"methods: {exc}"], kind="error")
    methods = {}

q, r, adv = values["q"], values["r"], values["adv"]
st.subheader(f"The token: q = {q:.6g}, r = {r:.6g}, A = {adv:.6g}")
st.caption(f"log π_old = {math.log(q):.6g}, log π_θ = {math.log(q) + math.log(r):.6g}.")
try:
    terms = explain_token(methods, q, r, adv)
except ImportError as exc:
    show_messages([str(exc)], kind="error")
    terms = []
except ValueError as exc:  # a method theory refuses at this token (a sequence-level form has no per-token w)
    show_messages([str(exc)], kind="error")
    terms = []

for term in terms:
    with st.container(border=True, key=f"token-term-{term.method}"):
        verdict = ":red-badge[zero gradient]" if term.zero else ":green-badge[gradient kept]"
        st.markdown(f"**{markdown_text(term.method)}** — {markdown_text(term.label)} {verdict}")
        spec = methods.get(term.method)
        # a sequence-level method (GSPO) clips s = exp(mean log r) over a response: say what one token stands for
        single = (
            f"\n- **One token as a sequence.** {markdown_text(term.method)} clips the sequence ratio "
            f"s = exp(mean of log r over the response's tokens); this token is taken as a one-token sequence, "
            f"so s = r = {r:.6g}."
            if spec is not None and getattr(spec, "level", "token") == "sequence"
            else ""
        )
        st.markdown(
            f"- **Loss term.** `{term.loss_text}`\n"
            f"- **Gradient weight.** w = {term.weight:.6g}, so ∂ℓ/∂log π = −A·w = {term.gradient:.6g}.\n"
            f"- **Why.** {markdown_text(term.rule)}{single}"
            + "".join(
                f"\n- **{markdown_text(line.split(':', 1)[0])}.** {markdown_text(line.split(':', 1)[1].strip())}"
                for line in term.arithmetic
            )
        )
if terms:
    st.table(
        [
            {
                "method": t.method,
                "ℓ": f"{t.loss:.6g}",
                "w": f"{t.weight:.6g}",
                "∂ℓ/∂log π": f"{t.gradient:.6g}",
                "zero gradient": "yes" if t.zero else "no",
                "[l, u] at q": "—" if t.bounds is None else f"[{t.bounds[0]:.6g}, {t.bounds[1]:.6g}]",
            }
            for t in terms
        ],
        hide_index=True,
    )

st.markdown("**Link to this token**")
st.code(share_link(query), language=None, wrap_lines=True)
