"""Mass reallocation: where a clip lets probability mass go on a small categorical policy, and where PPO epochs
put it. Every number is `divclip.theory.comparison.compare_measures` (feasible box, exact one-step optimum, softmax
drift through the training loss); every figure is `divclip.app.realloc_figures`."""

import json
import math
import re

import streamlit as st

from divclip.app.page_parts import figure, share_link, show_messages
from divclip.app.realloc_figures import (
    bucket_figure,
    entropy_figure,
    feasible_figure,
    flow_figure,
    headroom_figure,
    ratio_figure,
    spec_colours,
)
from divclip.app.state import ChoiceListParam, FloatParam, PageState, TextParam
from divclip.theory.comparison import compare_measures
from divclip.theory.reallocation import DEFAULT_COMPARE_SPECS, PROB_SUM_TOL, headroom_curve
from divclip.theory.spec import PRESETS, parse_methods

MAX_ACTIONS = 16
SPEC_CHOICES = tuple(name for name, spec in PRESETS.items() if spec.form != "sapo")  # SAPO has no interval
EXAMPLES = {  # docs/reallocation.md's three cases
    "Confident correct action": {"probs": "0.6,0.3,0.1", "adv": "1,-1,0.5", "lr": 0.5, "epochs": 8.0},
    "Rare correct action": {"probs": "0.1,0.7,0.2", "adv": "1,-1,-1", "lr": 0.5, "epochs": 8.0},
    "Positive actions less confident": {"probs": "0.3,0.6,0.1", "adv": "1,-1,1", "lr": 0.2, "epochs": 20.0},
}
REALLOC_SPEC = (
    TextParam("probs", "π_old", "0.6,0.3,0.1", max_chars=400),
    TextParam("adv", "advantages", "1,-1,0.5", max_chars=400),
    ChoiceListParam("specs", "clip spec", DEFAULT_COMPARE_SPECS, SPEC_CHOICES),
    TextParam("extra", "other specs", "", max_chars=400),
    FloatParam("lr", "lr (logit step)", 0.5, 0.001, 10.0),
    FloatParam("epochs", "PPO epochs", 8.0, 1.0, 200.0),
)
COMPARISON_CONFIG = {
    "label": st.column_config.TextColumn("spec"),
    "lo_min": st.column_config.NumberColumn("lo", format="%.4f", help="smallest ratio lower bound over the actions"),
    "hi_max": st.column_config.NumberColumn("hi", format="%.4f", help="largest ratio upper bound over the actions"),
    "max_gain_positive": st.column_config.NumberColumn(
        "gain ≤", format="%.4f", help="most mass the A > 0 actions can gain in one step (simplex-coupled)"
    ),
    "lp_gain_high_pos": st.column_config.NumberColumn(
        "LP conf", format="%+.4f", help="one-step optimum: mass gained by confident (top bucket) A > 0 actions"
    ),
    "lp_gain_low_pos": st.column_config.NumberColumn(
        "LP rare", format="%+.4f", help="one-step optimum: mass gained by rare (bottom bucket) A > 0 actions"
    ),
    "lp_entropy_change": st.column_config.NumberColumn("LP ΔH", format="%+.4f"),
    "dyn_gain_high_pos": st.column_config.NumberColumn(
        "PG conf", format="%+.4f", help="softmax PG after all epochs: mass gained by confident A > 0 actions"
    ),
    "dyn_gain_low_pos": st.column_config.NumberColumn(
        "PG rare", format="%+.4f", help="softmax PG after all epochs: mass gained by rare A > 0 actions"
    ),
    "dyn_entropy_change": st.column_config.NumberColumn("PG ΔH", format="%+.4f"),
    "dyn_kl": st.column_config.NumberColumn("PG KL", format="%.4f", help="KL(π_old ‖ π_new) after all epochs"),
    "dyn_clipped_tokens": st.column_config.NumberColumn("clipped", help="tokens whose gradient a bound zeroed"),
}

state = PageState("realloc", REALLOC_SPEC)
url_warnings = state.init()


def numbers(name: str, text: str) -> list[float]:
    """'0.6, 0.3, 0.1' (commas, semicolons or spaces) -> floats; theory checks the values themselves."""
    parts = [t for t in re.split(r"[,;\s]+", text.strip()) if t]
    try:
        values = [float(t) for t in parts]
    except ValueError:
        raise ValueError(f"{name} must be numbers separated by commas, like 0.6,0.3,0.1; got {text!r}") from None
    if len(values) > MAX_ACTIONS:
        raise ValueError(f"{name} has {len(values)} entries; this page draws at most {MAX_ACTIONS} actions")
    return values


def chosen_specs(presets, extra: str) -> dict:
    """{label: spec}: the chosen presets, then the 'other specs' field read like the arena's methods."""
    specs = {name: name for name in presets}
    if extra.strip():
        for label, spec in parse_methods(extra).items():
            if label in specs:
                raise ValueError(f"other specs: {label!r} is already chosen above")
            specs[label] = spec
    if not specs:
        raise ValueError("choose at least one clip spec (Clip specs, above)")
    return specs


def offer_rescale(text: str) -> None:
    """Positive numbers that only fail to sum to 1: offer to divide them by their sum."""
    try:
        p = numbers("π_old", text)
    except ValueError:
        return
    total = sum(p)
    if len(p) >= 2 and all(math.isfinite(x) and x > 0 for x in p) and abs(total - 1.0) > PROB_SUM_TOL:
        scaled = ",".join(f"{x / total:.10g}" for x in p)
        st.button(
            f"Rescale π_old to sum 1: {scaled}",
            on_click=state.set,
            args=({"probs": scaled},),
            key="realloc.rescale",
            icon=":material/balance:",
        )


@st.cache_data(max_entries=32, show_spinner=False)
def comparison(probs: tuple, adv: tuple, specs: dict, lr: float, epochs: int):
    return compare_measures(list(probs), list(adv), specs, lr=lr, epochs=epochs)


@st.cache_data(max_entries=64, show_spinner=False)
def headroom(spec):
    return headroom_curve(spec)


st.title("Mass reallocation")
st.markdown(
    "Under a clip, each action's new probability can only move inside a box, [lo·p, hi·p]: the **bars** below. "
    "The one-step optimum (◆) is the best a trust region with that box allows; the ✕ is where several PPO epochs "
    "of softmax policy gradient on one batch actually put the mass — outside the box whenever the softmax drags "
    "a clipped token along. Because the room to gain, (hi − 1)·p, grows with p, a looser upper bound (KL3's "
    "1.2308, DAPO's 1.28) moves *more* mass to an already-confident correct action than GRPO: that **lowers** "
    "entropy, so in the confident case it is not exploration, and for a rare correct action GRPO, DAPO and KL3 "
    "behave identically (`docs/reallocation.md` has the numbers)."
)
show_messages(url_warnings, kind="warning")

with st.container(border=True, key="realloc-controls"):  # in the page: on a phone the sidebar hides
    st.markdown("**Examples**")
    cols = st.columns(len(EXAMPLES))
    for col, (label, example) in zip(cols, EXAMPLES.items()):
        col.button(
            label,
            on_click=state.set,
            args=(example,),
            width="stretch",
            key=f"realloc.example.{label}",
            help=f"π_old = {example['probs']}, A = {example['adv']}, lr {example['lr']:g}, "
            f"{example['epochs']:.0f} epochs",
        )
    specs_col, extra_col = st.columns([3, 2])  # room for every preset chip (at 1:1 the fifth, dppo_tv, was cut)
    specs_col.multiselect(
        "Clip specs",
        SPEC_CHOICES,
        key=state.key("specs"),
        help="Presets: grpo ratio 0.2, dapo 0.2/0.28, atr KL3 δ = 0.023144, dppo_kl binary "
        "KL δ = 0.05, dppo_tv binary TV δ = 0.2, gspo ratio 3e-4/4e-4.",
    )
    extra_col.text_input(
        "Other specs",
        key=state.key("extra"),
        placeholder="kl3:0.05, ratio:0.1:0.3, chi2",
        help="Comma-separated: a measure at the δ with GRPO's lower bound (kl3), 'measure:δ', "
        "'ratio:ε' or 'ratio:ε_low:ε_high'.",
    )
    lr_col, epochs_col, reset_col = st.columns([2, 2, 1], vertical_alignment="bottom")
    lr_col.number_input(
        "lr — gradient step on the logits",
        min_value=0.001,
        max_value=10.0,
        step=0.05,
        format="%.3f",
        key=state.key("lr"),
    )
    epochs_col.number_input(
        "PPO epochs on one batch", min_value=1.0, max_value=200.0, step=1.0, format="%.0f", key=state.key("epochs")
    )
    reset_col.button("Reset", on_click=state.reset, type="primary", width="stretch", icon=":material/restart_alt:")

left, right = st.columns(2)
left.text_input("π_old (probs) — probabilities summing to 1", key=state.key("probs"))
right.text_input("A (adv) — one advantage per action", key=state.key("adv"))
values = state.values()
query = state.sync()
epochs = int(round(values["epochs"]))

try:
    probs, adv = numbers("π_old", values["probs"]), numbers("A", values["adv"])
    specs = chosen_specs(values["specs"], values["extra"])
    comp = comparison(tuple(probs), tuple(adv), specs, values["lr"], epochs)
except ValueError as exc:
    show_messages([str(exc)], kind="error")
    offer_rescale(values["probs"])
    st.markdown("**Link to this view**")
    st.code(share_link(query), language=None, wrap_lines=True)
    st.stop()

labels = [row.label for row in comp.rows]
colours = spec_colours(labels)
if st.session_state.get("realloc.focus") not in labels:
    st.session_state["realloc.focus"] = "atr" if "atr" in labels else labels[0]
focus_col, _ = st.columns([1, 3])
row = comp.rows[labels.index(focus_col.selectbox("Details for", labels, key="realloc.focus"))]
o, d = row.optimum, row.drift

m1, m2, m3, m4 = st.columns(4)
m1.metric("one-step gain Σ Δπ·A", f"{o.gain:.4f}", help="the LP optimum's objective minus Σ π_old·A")
m2.metric("one-step ΔH", f"{o.entropy_change:+.4f}")
m3.metric(f"ΔH after {epochs} epoch(s)", f"{row.dyn_entropy_change:+.4f}")
m4.metric(
    f"KL(old‖new) after {epochs} epoch(s)",
    f"{row.dyn_kl:.4f}",
    f"one step: {o.kl_old_new:.4f}",
    delta_color="off",
    delta_arrow="off",
)
high, low = list(comp.high_pos_actions), list(comp.low_pos_actions)
gains = [
    f"the {kind} A > 0 action(s) {actions} gained {dyn:+.4f} (one-step optimum {lp:+.4f})"
    for kind, actions, dyn, lp in (
        ("confident", high, row.dyn_gain_high_pos, row.lp_gain_high_pos),
        ("rare", low, row.dyn_gain_low_pos, row.lp_gain_low_pos),
    )
    if actions
]
st.caption(
    f"Under **{row.label}**, after {epochs} epoch(s) "
    + (", ".join(gains) + " and " if gains else "")
    + f"the entropy changed by {row.dyn_entropy_change:+.4f}; {row.dyn_clipped_tokens} token gradient(s) were "
    "zeroed by a bound."
)

figure(feasible_figure(comp, colours), "divclip_feasible", key="realloc.feasible")

st.markdown(f"**{row.label}: the one-step optimum and the softmax drift, per action**")
st.dataframe(
    [
        {
            "action": f"a{i}",
            "p": o.probs[i],
            "A": comp.adv[i],
            "q_min": row.feasible.q_min[i],
            "q_max": row.feasible.q_max[i],
            "π_new (LP)": o.probs_new[i],
            "Δ (LP)": o.delta[i],
            "LP at": "hi" if o.at_upper[i] else "lo" if o.at_lower[i] else "inside",
            "π after PG": d.probs[-1, i],
            "r after PG": d.ratio[-1, i],
        }
        for i in range(o.probs.size)
    ],
    hide_index=True,
    key="realloc.optimum",
    column_config={
        c: st.column_config.NumberColumn(format="%+.4f" if c.startswith("Δ") else "%.4f")
        for c in ("p", "q_min", "q_max", "π_new (LP)", "Δ (LP)", "π after PG", "r after PG")
    },
)
flow_col, ratio_col = st.columns(2)
figure(flow_figure(o, colours[row.label], row.label), "divclip_flow", flow_col, key="realloc.flow")
figure(ratio_figure(d, comp.adv, row.label), "divclip_ratio_drift", ratio_col, key="realloc.ratio")
st.caption(
    f"Left: who gives mass to whom in the one-step optimum (the optimum fixes only the net changes; the split "
    f"is proportional). Right: dashed lines are each action's clip interval [lo, hi] under {row.label}; a ○ "
    "marks an epoch in which that action's gradient was zeroed by a bound. Its ratio still moves: the softmax "
    "drags it along with the other logits, so per-token clipping is not a trust region."
)

figure(bucket_figure(comp, colours), "divclip_buckets", key="realloc.buckets")
ent_col, room_col = st.columns(2)
figure(entropy_figure(comp, colours), "divclip_entropy", ent_col, key="realloc.entropy")
figure(
    headroom_figure({label: headroom(spec) for label, spec in specs.items()}, comp, colours),
    "divclip_headroom",
    room_col,
    key="realloc.headroom",
)

st.subheader("Compared across clip specs")
st.caption(
    f"Confident A > 0 actions: {high or 'none'}; rare A > 0 actions: {list(comp.low_pos_actions) or 'none'} "
    f"(buckets {', '.join(comp.bucket_labels)} of π_old). LP = exact one-step optimum; PG = softmax policy "
    f"gradient through the training loss after {epochs} epoch(s), lr {comp.lr:g}, exact expected group."
)
st.dataframe(
    comp.table(),
    hide_index=True,
    column_order=list(COMPARISON_CONFIG),
    column_config=COMPARISON_CONFIG,
    key="realloc.comparison",
)
st.download_button(
    "Comparison as JSON",
    json.dumps(comp.to_dict(details=True), ensure_ascii=False),
    file_name="divclip_realloc.json",
    mime="application/json",
    icon=":material/download:",
)
st.markdown("**Link to this view**")
st.code(share_link(query), language=None, wrap_lines=True)
