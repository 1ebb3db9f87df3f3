"""divclip app router (placeholder until the full app lands): one page with KL3's exact clip interval."""

import streamlit as st

from theory import delta_for_eps, get_measure

st.set_page_config(page_title="divclip", layout="wide")
st.title("divclip: divergence clipping explorer")
st.write(
    "KL3 clipping, r − 1 − log r ≤ δ, is exactly an asymmetric ratio clip whose bounds are the two Lambert W "
    "roots. Move δ and read the interval it allows."
)
delta = st.slider("δ (KL3 budget)", 0.001, 0.2, float(round(delta_for_eps("kl3", eps_low=0.2), 6)), format="%.6f")
lo, hi = get_measure("kl3").bounds(delta)
st.metric("lower bound l_δ", f"{lo:.5f}")
st.metric("upper bound u_δ", f"{hi:.5f}")
st.latex(rf"\epsilon_{{low}} = {1 - lo:.4f},\quad \epsilon_{{high}} = {hi - 1:.4f}")
