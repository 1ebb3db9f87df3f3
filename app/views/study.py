"""Study: methods trained side by side on a tiny LM over many seeds, read from the committed results file."""

import streamlit as st

from divclip.app.page_parts import figure, show_messages
from divclip.app.study_figures import (
    RESULTS,
    claim_lines,
    comparison_rows,
    curves_figure,
    difference_figure,
    load_results,
    method_rows,
    wall_seconds,
)

st.title("Study: does the clip matter here?")
st.markdown(
    "Each method trained with divclip's own trainer on the same tasks and seeds: seed *k* gives every method "
    "the same warm start, held-out split and prompts, so every comparison is **paired**. The numbers come from "
    "the committed results of one `divclip study` command (docs/evidence.md); this page computes nothing."
)

try:
    results = load_results(RESULTS)
except ValueError as exc:
    show_messages([str(exc)], kind="error")
    st.stop()

tasks = list(results["tasks"])
task_name = st.selectbox("task", tasks) if len(tasks) > 1 else tasks[0]
task = results["tasks"][task_name]
base = task["methods"][task["baseline"]]
clip = task.get("baseline_clipfrac")
st.markdown(
    f"**{task_name}**: {len(task['seeds'])} seeds × {len(task['methods'])} methods, {task['steps']} RL steps each. "
    + (f"{base['label']} clips **{100 * clip:.1f} %** of tokens on average (the off-policy regime). " if clip else "")
    + (f"Wall time of the study: {wall / 60:.0f} min." if (wall := wall_seconds(results)) else "")
)

others = [name for name in task["methods"] if name != task["baseline"]]
default = [name for name in ("atr",) if name in others] or others[:1]
shown = (
    st.multiselect(
        f"methods drawn beside {base['label']} (the tables below hold all {len(task['methods'])})",
        others,
        default=default,
        format_func=lambda name: task["methods"][name]["label"],
    )
    if len(others) > 1
    else others
)
figure(curves_figure(task, methods=shown), "study_curves", use_container_width=True)
st.caption(
    "Line: mean held-out greedy accuracy over seeds; band: ± one standard deviation over seeds, cut at 0 and 1. "
    "A wide band is the seeds' warm starts differing (same for every method), not the methods."
)

if shown:
    st.subheader(f"Paired: each seed's accuracy minus {base['label']}'s")
    figure(difference_figure(task, methods=shown), "study_differences", use_container_width=True)
    st.caption(
        f"Thin lines: one seed each (same warm start and prompts for both methods); thick: the mean over seeds. "
        f"Above 0 the method beats {base['label']} on that seed."
    )

st.subheader("Per method (mean over seeds)")
st.caption(
    "final accuracy and its sd over seeds; pass@k after the last step; AUC = mean accuracy over the evaluations; "
    "steps to 90 % of the run's gain; entropy of π_old on sampled tokens; clip A<0 / A>0 = share of tokens "
    "clipped on each side, mean over steps."
)
st.dataframe(method_rows(task), hide_index=True, use_container_width=True)
st.caption(
    "Method strings: " + ", ".join(f"{row['label']} `{row['method_string']}`" for row in task["methods"].values())
)

st.subheader(f"Against {base['label']}, paired by seed")
alpha = results["study"]["alpha"]
level = 1 - alpha / max(1, len(task["methods"]) - 1)
st.markdown(
    "Difference of means with a percentile bootstrap interval over seeds at the Bonferroni level "
    f"{100 * level:.4g} % (all intervals of a metric hold together with {100 * (1 - alpha):.4g} % probability); "
    "p from the exact sign-flip test, Holm-adjusted; "
    "*smallest detectable* is the effect a paired t-test finds with 80 % power at this n. "
    "**No difference detectable** is a verdict, not a missing value."
)
st.dataframe(comparison_rows(task), hide_index=True, use_container_width=True)

lines = claim_lines(task, methods=shown)
if lines:
    st.subheader("The paper's three claims at this scale")
    st.caption("Made for ATR-GRPO; measured here for the methods drawn above (choose more there).")
    st.markdown("\n".join(f"* {line}" for line in lines))
