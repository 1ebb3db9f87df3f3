"""divclip app router: one `st.Page` per file under app/views/. Adding a page is one line in PAGES.

Run from the repository root: `streamlit run app/main.py`. Pages import `app.*` (an installed package);
page paths are relative to this file.
"""

import streamlit as st

from divclip.app.page_parts import FIGURE_FORMAT_KEY, FIGURE_FORMATS, layout_css

st.set_page_config(page_title="divclip", page_icon="✂️", layout="wide")
st.html(layout_css())

PAGES = [
    st.Page("views/clip_explorer.py", title="Clip explorer", icon=":material/tune:", default=True),
    st.Page("views/proof.py", title="The proof", icon=":material/functions:"),
    st.Page("views/reallocation.py", title="Mass reallocation", icon=":material/swap_horiz:"),
    st.Page("views/toy_arena.py", title="Toy arena", icon=":material/sports_esports:"),
    st.Page("views/custom_measure.py", title="Custom measure", icon=":material/edit_note:"),
    st.Page("views/sanity_check.py", title="Sanity check", icon=":material/fact_check:"),
    st.Page("views/token_explainer.py", title="Token explainer", icon=":material/token:"),
    st.Page("views/atlas.py", title="Atlas", icon=":material/grid_on:"),
    st.Page("views/study.py", title="Study", icon=":material/query_stats:"),
]

page = st.navigation(PAGES)
with st.sidebar:
    st.segmented_control(
        "Figure downloads",
        FIGURE_FORMATS,
        key=FIGURE_FORMAT_KEY,
        default="PNG",
        required=True,
        help="The camera button on every figure's toolbar saves the figure in this format.",
    )
page.run()
