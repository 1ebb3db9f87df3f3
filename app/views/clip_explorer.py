"""Clip explorer: every measure's clip interval at one budget, drawn, tabulated and exported."""

import streamlit as st

from divclip import theory
from divclip.app.correction_figures import overlay_figure
from divclip.app.export import FORMATS, engine_format, interval_spec, method_export
from divclip.app.figures import (
    add_intersection,
    divergence_curves,
    intersection_bounds,
    interval_chart,
    surrogate_figure,
)
from divclip.app.intervals import clip_intervals, table_csv, table_rows
from divclip.app.methods import label_for
from divclip.app.page_parts import figure, formula_latex, number_with_slider, share_link, show_messages
from divclip.app.presets import EXPLORER_SPEC, PRESETS, kl3_delta_matching, matching_preset
from divclip.app.state import PageState, format_number
from divclip.engines import available_engines, get_engine
from divclip.theory.correction import parse_correction
from divclip.theory.spec import method_string
from divclip.theory.symbolic import derivable_measures

_SUFFIX = {"overrides": "sh", "flags": "sh", "yaml": "yaml", "python": "py"}
_LANGUAGE = {"overrides": "bash", "flags": "bash", "yaml": "yaml", "python": "python"}
state = PageState("explorer", EXPLORER_SPEC)
url_warnings = state.init()
NOTICE = "explorer._notice"  # a message from a button callback, shown once on the next run
PARAM = {param.key: param for param in EXPLORER_SPEC}


def match_delta(side: str) -> None:
    """δ such that KL3's bound on `side` ("eps_low" or "eps_high") is 1 ∓ that ε (ATR-GRPO's rule)."""
    delta, notice = kl3_delta_matching(**{side: st.session_state[state.key(side)]})
    state.set({"delta": delta})
    if notice:
        st.session_state[NOTICE] = notice


st.title("Clip explorer")
st.markdown(
    "Clipping on a divergence, **D(r) ≤ δ**, keeps the ratio r = π_θ/π_old inside an interval [l, u] — so every "
    "measure below *is* a ratio clip, just with its own, usually asymmetric, bounds. Set δ (or the ratio "
    "clip's ε) and read where each measure clips, what that does to the PPO surrogate, and the equivalent "
    "ε to paste into verl or TRL. Type exact values in the boxes or drag the sliders; the address bar holds "
    "the whole view: copy it to share."
)
show_messages(url_warnings, kind="warning")
show_messages([st.session_state.pop(NOTICE)] if NOTICE in st.session_state else [], kind="warning")

with st.container(border=True, key="explorer-controls"):
    st.markdown("**Presets**")
    cols = st.columns(len(PRESETS))
    for col, preset in zip(cols, PRESETS.values()):
        col.button(
            preset.name,
            help=preset.description,
            on_click=state.set,
            args=(preset.values,),
            width="stretch",
            key=f"explorer.preset.{preset.name}",
        )
    budget, ratio = st.columns(2, gap="large")
    with budget:
        number_with_slider(
            state,
            PARAM["delta"],
            log=True,
            step=1e-4,
            help="Every measure except the ratio clip keeps D(r) ≤ δ. GRPO's ε_low = 0.2 is KL3 at "
            "δ ≈ 0.0231; any value from 1e-8 to 0.5, e.g. 4.5e-8.",
        )
        # one above the other: side by side their labels were cut ("Match δ to ε_low unde…", issue 34)
        low_col = high_col = st.container()
        low_col.button(
            "Match δ to ε_low under KL3",
            on_click=match_delta,
            args=("eps_low",),
            width="stretch",
            key="explorer.match",
            help="Sets δ so that KL3's lower bound is 1 − ε_low (ATR-GRPO's choice).",
        )
        high_col.button(
            "Match δ to ε_high under KL3",
            on_click=match_delta,
            args=("eps_high",),
            width="stretch",
            key="explorer.match_high",
            help="Sets δ so that KL3's upper bound is 1 + ε_high.",
        )
        number_with_slider(
            state,
            PARAM["p"],
            log=False,
            step=0.001,
            fmt="%.6g",
            slider_step=0.001,
            help="Binary KL and binary TV depend on the old probability of the sampled token.",
        )
    with ratio:
        number_with_slider(
            state,
            PARAM["eps_low"],
            log=True,
            step=0.01,
            fmt="%.6g",
            help="The ratio clip's lower side, 1 − ε_low ≤ r. GSPO clips at 3e-4.",
        )
        number_with_slider(
            state,
            PARAM["eps_high"],
            log=True,
            step=0.01,
            fmt="%.6g",
            help="The upper side, r ≤ 1 + ε_high. DAPO's clip-higher uses 0.28 with ε_low = 0.2; GSPO 4e-4.",
        )
    measures_col, reset_col = st.columns([4, 1], vertical_alignment="bottom")
    measures_col.multiselect("Measures", tuple(theory.MEASURES), format_func=label_for, key=state.key("measures"))
    reset_col.button(
        "Reset",
        on_click=state.reset,
        type="primary",
        width="stretch",
        icon=":material/restart_alt:",
        key="explorer.reset",
    )

values = state.values()
query = state.sync()
active = matching_preset(values)
if active:
    st.caption(f"Preset: **{active}** — {PRESETS[active].description}")

intervals, errors = clip_intervals(
    values["measures"], values["delta"], values["eps_low"], values["eps_high"], values["p"]
)
show_messages(errors, kind="error")
if not values["measures"]:
    st.info("Choose at least one measure above.")

left, right = st.columns(2)
figure(divergence_curves(intervals, values["delta"]), "divclip_divergence_curves", left, key="explorer.curves")
figure(
    divergence_curves(intervals, values["delta"], log_space=True),
    "divclip_divergence_log",
    right,
    key="explorer.curves_log",
)

maths, bars = st.columns(2, vertical_alignment="center")
with maths:
    st.markdown("**Each measure and its interval**")
    for iv in intervals:
        st.latex(formula_latex(iv))
figure(add_intersection(interval_chart(intervals), intervals), "divclip_intervals", bars, key="explorer.intervals")
if (both := intersection_bounds(intervals)) is not None:
    bars.caption(
        f"Shaded: the intersection [{both[0]:.6f}, {both[1]:.6f}], where every chosen measure holds at "
        "once (a method string joins them with '&', e.g. `kl3:0.023144&binary_tv:0.2`)."
    )
figure(surrogate_figure(intervals), "divclip_surrogate", key="explorer.surrogate")

st.subheader("Equivalent ratio clip per measure")
st.table(table_rows(intervals), hide_index=True)
st.download_button(
    "Table as CSV", table_csv(intervals), file_name="divclip_intervals.csv", mime="text/csv", icon=":material/download:"
)


def correction_section(intervals, values) -> None:
    """A rollout correction's ρ intervals beside the measures' clips (the third policy, docs/theory.md §10)."""
    example = f"is=sequence:tis=2.0/rs=token_k3:{values['delta']:.6g}"
    text_col, length_col = st.columns([4, 1], vertical_alignment="bottom")
    text_col.text_input(
        PARAM["correction"].label.capitalize(),
        key=state.key("correction"),
        placeholder=f"e.g. {example} (verl's sequence TIS and a token k3 rejection at this δ)",
        help="A correction string, e.g. is=sequence:tis=2.0, rs=seq_sum_k3:0.5, filter=token:ratio:mask:5.0",
    )
    length_col.number_input(
        "Sequence length L", min_value=PARAM["L"].lo, max_value=PARAM["L"].hi, step=1, key=state.key("L")
    )
    if not values["correction"].strip():
        st.button(
            f"Draw {example}",
            on_click=state.set,
            args=({"correction": example},),
            key="explorer.correction_example",
            help="A token k3 rejection at this δ keeps KL3's interval; a sequence bound closes on 1 as L grows.",
        )
        return
    try:
        correction = parse_correction(values["correction"])
    except ValueError as exc:
        st.error(str(exc))
        return
    if not correction.active:
        st.info("This correction does nothing: there is nothing to draw.")
        return
    figure(overlay_figure(intervals, correction, values["L"]), "divclip_correction_overlay", key="explorer.overlay")
    st.caption(
        "A correction clips ρ = π_old/π_rollout (trainer against inference engine) with the same divergences: a "
        "token k3 rejection at δ keeps KL3's interval at δ; a bound on a sequence (Π ρ_t, a sum of k3) keeps a "
        "per-token ρ that closes on 1 as L grows (`divclip atlas --correction`; the Atlas page draws it by length)."
    )


# Engine export: one chosen method at a time, complete and paste-safe (`divclip export` prints the same text).
def export_section(intervals) -> None:
    specs = {
        f"{iv.method} — {iv.label} ({method_string(spec)})": spec
        for iv, spec in ((iv, interval_spec(iv)) for iv in intervals)
    }
    if not specs:  # every measure cleared: nothing to export (the selectbox would hand back None)
        st.info("Choose a measure above to export it.")
        return
    pick_col, fmt_col = st.columns([2, 1])
    choice = pick_col.selectbox("Method", list(specs), key="explorer.export_method")
    fmt = fmt_col.radio(
        "Format",
        FORMATS,
        horizontal=True,
        key="explorer.export_format",
        help="overrides: the engine's command line (verl: hydra overrides; TRL, OpenRLHF, slime: "
        "--flag value); yaml; python",
    )
    engines = st.multiselect("Engines", available_engines(), default=["verl", "trl"], key="explorer.export_engines")
    spec = specs[choice]
    st.caption(
        f"Same text as `divclip export --method {method_string(spec)} --engine ENGINE --format {fmt}`. "
        "Each block sets every key it needs once, so pasting it after another method's leaves nothing of "
        "that method in force; `divclip check` reads every block back."
    )
    for col, engine in zip(st.columns(max(len(engines), 1)), engines):
        with col:
            module = get_engine(engine)
            st.markdown(f"**{engine} {module.VERSION}**")
            own = engine_format(module.FORMATS, fmt)
            if own is None:
                st.info(f"{engine} has no {fmt} text here; its formats: {', '.join(module.FORMATS)}")
                continue
            try:
                text = method_export(spec, engine).text(own)
            except ValueError as exc:
                st.info(str(exc))
                continue
            # no wrapping: a long dotted key of an engine was cut mid-word;
            # a long line scrolls inside its block instead (st.code has a copy button)
            st.code(text, language=_LANGUAGE.get(own), wrap_lines=False)
            st.download_button(
                f"{engine} settings",
                text,
                file_name=f"divclip_{engine}.{_SUFFIX.get(own, 'txt')}",
                mime="text/plain",
                icon=":material/download:",
                key=f"explorer.export_{engine}",
            )


def continue_links(intervals, values) -> None:
    """Each derivable measure's proof and the sanity check, two columns of full-width links: a page link's label
    does not wrap, so nine links side by side were cut off."""
    derivable = [iv for iv in intervals if iv.name in derivable_measures() and iv.delta is not None]
    proofs, sanity = st.columns(2)
    for iv in derivable:
        proofs.page_link(
            "views/proof.py",
            label=f"The proof for {iv.label} at δ = {iv.delta:.6g}",
            icon=":material/functions:",
            query_params={"measure": iv.name, "delta": format_number(iv.delta)},
        )
    sanity.page_link(
        "views/sanity_check.py",
        label=f"Sanity-check a config against ε = {values['eps_low']:g} / {values['eps_high']:g}",
        icon=":material/fact_check:",
        query_params={"eps_low": format_number(values["eps_low"]), "eps_high": format_number(values["eps_high"])},
    )


st.subheader("A rollout correction on the same axis")
correction_section(intervals, values)
st.subheader("Export one method to a training engine")
export_section(intervals)
st.subheader("Continue with these values")
continue_links(intervals, values)
st.markdown("**Link to this view**")
st.code(share_link(query), language=None, wrap_lines=True)
