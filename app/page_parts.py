"""Small pieces that several pages draw: a measure's formula with its interval, messages, the share link."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import quote, urlencode

from divclip.app.intervals import ClipInterval, format_bound


def _text(s: str) -> str:
    """Plain text inside KaTeX's \\text{…}."""
    return s.replace("\\", "").replace("_", r"\_").replace("|", r"$\vert$").replace("χ²", r"$\chi^2$")


def formula_latex(iv: ClipInterval) -> str:
    """Two lines: `method: D(r) ≤ δ` and `⟺ r ∈ [l, u]` (the ratio clip as 1 − ε_low ≤ r ≤ 1 + ε_high)."""
    at_p = rf"\quad \text{{at }} p = {iv.p:g}" if iv.p is not None else ""
    interval = rf"\iff r \in [{format_bound(iv.lo)},\ {format_bound(iv.hi)}]{at_p}"
    name = rf"\textbf{{{_text(iv.method)}}}:\quad "
    if iv.delta is None:
        condition = rf"1 - {iv.eps_low:g} \le r \le 1 + {iv.eps_high:g}"
    else:
        condition = rf"{iv.measure.latex} \le {iv.delta:.6g}"
    return rf"\small\begin{{aligned}}&{name}{condition} \\ &{interval}\end{{aligned}}"


def share_link(query: Mapping[str, str], url: str | None = None) -> str:
    """The page's address with its state as query string (just `?…` where the address is unknown)."""
    if url is None:
        import streamlit as st

        url = st.context.url
    base = (url or "").split("?", 1)[0]
    return f"{base}?{urlencode(query, safe=',()*', quote_via=quote)}"


_MARKDOWN_SPECIAL = set("\\`*_{}[]<>()#+-.!|$~")


def markdown_text(s: str) -> str:
    """`s` shown literally inside st.markdown (no emphasis, no $…$ maths)."""
    return "".join("\\" + c if c in _MARKDOWN_SPECIAL else c for c in s)


def show_messages(messages: Iterable[str], kind: str = "warning") -> None:
    """Each message in its own alert, shown literally (a formula like r**2*p is not markdown)."""
    import streamlit as st

    show = {"warning": st.warning, "error": st.error, "info": st.info}[kind]
    for message in messages:
        show(markdown_text(message), icon=":material/warning:" if kind == "warning" else ":material/error:")
