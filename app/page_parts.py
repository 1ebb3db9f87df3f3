"""Small pieces that several pages draw: a measure's formula with its interval, messages, the share link, a
typed number with a slider beside it, figure display settings."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import quote, urlencode

from divclip.app.intervals import ClipInterval, format_bound


def _text(s: str) -> str:
    """Plain text inside KaTeX's \\text{…}."""
    return s.replace("\\", "").replace("_", r"\_").replace("|", r"$\vert$").replace("χ²", r"$\chi^2$")


def formula_latex(iv: ClipInterval) -> str:
    """Three lines: `method:`, `D(r) ≤ δ` and `⟺ r ∈ [l, u]` (the ratio clip as 1 − ε_low ≤ r ≤ 1 + ε_high).
    The name has its own line: on one line with a long D(r) (DPPO-Binary-KL) the row ran past a half-width
    column, cutting "≤ 0.02" to "≤ 0" (issue 34)."""
    at_p = rf"\quad \text{{at }} p = {iv.p:g}" if iv.p is not None else ""
    interval = rf"\iff r \in [{format_bound(iv.lo)},\ {format_bound(iv.hi)}]{at_p}"
    name = rf"\textbf{{{_text(iv.method)}}}:"
    if iv.delta is None:
        condition = rf"1 - {iv.eps_low:g} \le r \le 1 + {iv.eps_high:g}"
    else:
        condition = rf"{iv.measure.latex} \le {iv.delta:.6g}"
    return rf"\small\begin{{aligned}}&{name} \\ &{condition} \\ &{interval}\end{{aligned}}"


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


# ------------------------------------------------------------------------------- a typed number and a slider
def log_stops(lo: float, hi: float) -> list[float]:
    """Slider stops from lo to hi, evenly spaced in log scale (1, 1.5, 2, 3, 5, 7 per decade) plus both ends."""
    stops = {lo, hi}
    for exponent in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for mantissa in (1, 1.5, 2, 3, 5, 7):
            x = float(f"{mantissa}e{exponent}")
            if lo < x < hi:
                stops.add(x)
    return sorted(stops)


def nearest_stop(x: float, stops: Sequence[float]) -> float:
    """The stop closest to x in log scale (what a log slider shows for a typed value)."""
    return min(stops, key=lambda s: abs(math.log(s) - math.log(x)))


def number_with_slider(
    state, param, *, log: bool, step: float, fmt: str = "%.8g", help: str | None = None, slider_step: float = 0.001
) -> None:
    """A typed number input (the value itself, any number in range, what the URL holds) with a slider beside
    it to drag (log-scale stops for δ and ε, `slider_step` in linear scale), kept in step both ways.

    The number input owns `state.key(param.key)`; the slider has a key of its own. A log slider's stops include
    the current value itself, so it shows exactly what the box holds (0.2308, not the nearest stop 0.2)."""
    import streamlit as st

    ss = st.session_state
    key = state.key(param.key)
    slider_key = f"{key}.slider"
    notice_key = f"{key}.notice"
    stops = sorted(set(log_stops(param.lo, param.hi)) | {float(ss[key])}) if log else None

    def snapped(value: float) -> float:
        if log:
            return value if value in stops else nearest_stop(value, stops)
        return min(max(round(round(value / slider_step) * slider_step, 12), param.lo), param.hi)

    def from_number() -> None:
        # The box has no min/max of its own: the browser would mark an out-of-range value red and never send it,
        # so the figures would keep the old value without a word. Here it is clamped, and the page says so.
        value = ss[key]
        clamped = min(max(value, param.lo), param.hi)
        if clamped != value:
            ss[key] = clamped
            ss[notice_key] = (
                f"{_short_label(param.label)} = {value:g} is outside [{param.lo:g}, {param.hi:g}]; using {clamped:g}."
            )
        ss[slider_key] = snapped(ss[key])

    def from_slider() -> None:
        ss[key] = float(ss[slider_key])

    if ss.get(slider_key) != snapped(ss[key]):  # a preset, a link or a typed value moved the number
        ss[slider_key] = snapped(ss[key])
    number_col, slider_col = st.columns([2, 3], vertical_alignment="bottom")
    number_col.number_input(param.label, step=step, format=fmt, key=key, on_change=from_number, help=help)
    label = f"{param.label}: drag" + (" (log scale)" if log else "")
    if log:
        slider_col.select_slider(
            label,
            options=stops,
            format_func=lambda x: f"{x:g}",
            key=slider_key,
            on_change=from_slider,
            label_visibility="collapsed",
        )
    else:
        slider_col.slider(
            label,
            param.lo,
            param.hi,
            step=slider_step,
            format="%.3f",
            key=slider_key,
            on_change=from_slider,
            label_visibility="collapsed",
        )
    if notice_key in ss:
        show_messages([ss.pop(notice_key)], kind="warning")


def _short_label(label: str) -> str:
    """'ε_low (ratio clip, lower side)' -> 'ε_low'; 'p = π_old(a) (…)' -> 'p': the name a message uses."""
    return label.split(" (")[0].split(" = ")[0]


# ------------------------------------------------------------------------------- figures
FIGURE_FORMAT_KEY = "figure_format"  # set by the sidebar's picker in app/main.py
FIGURE_FORMATS = ("PNG", "SVG")


def plotly_config(name: str) -> dict:
    """st.plotly_chart's config: the toolbar always shown, its camera button saving `name`.png or .svg (the
    format picked in the sidebar; plotly draws the file in the browser, the server does nothing)."""
    import streamlit as st

    fmt = st.session_state.get(FIGURE_FORMAT_KEY, "PNG")
    return {
        "displayModeBar": True,
        "displaylogo": False,
        "modeBarButtonsToRemove": ["lasso2d", "select2d", "autoScale2d"],
        "toImageButtonOptions": {"format": fmt.lower(), "filename": name, "scale": 2 if fmt == "PNG" else 1},
    }


TOOLBAR_ROOM = 36  # px kept free above a figure's title for plotly's toolbar


def toolbar_room(fig):
    """`fig` with its title moved down out of the toolbar's row (figures laid out elsewhere put it at the top,
    where the always-shown toolbar would cover it); figures that already leave the room are unchanged."""
    title = fig.layout.title
    if title.text and title.yref != "container":
        top = fig.layout.margin.t
        fig.update_layout(
            title=dict(yref="container", y=1.0, yanchor="top", pad=dict(t=TOOLBAR_ROOM)),
            margin=dict(t=(100 if top is None else top) + TOOLBAR_ROOM // 2),
        )
    return fig


def figure(fig, name: str, container=None, **kwargs) -> None:
    """A plotly figure with its download button configured (see `plotly_config`)."""
    import streamlit as st

    (container or st).plotly_chart(
        toolbar_room(fig), config=plotly_config(name), key=kwargs.pop("key", f"figure.{name}"), **kwargs
    )


# ------------------------------------------------------------------------------- tables
def rounded(value, digits: int = 6):
    """A table cell for the eye: floats to `digits` significant digits (0.29999999999999996 shows as 0.3),
    lists and tuples of numbers as [a, b]; anything else as it is. Downloads keep the full numbers."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) or (
        type(value).__module__ == "numpy" and getattr(value, "dtype", None) is not None and value.dtype.kind in "iu"
    ):
        return int(value)
    if isinstance(value, float) or type(value).__module__ == "numpy":
        try:
            return f"{float(value):.{digits}g}"
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(rounded(v, digits)) for v in value) + "]"
    return value


def rounded_rows(rows: Iterable[Mapping], digits: int = 6) -> list[dict]:
    return [{k: rounded(v, digits) for k, v in row.items()} for row in rows]


# ------------------------------------------------------------------------------- layout
def layout_css() -> str:
    """Page-wide CSS: on a phone-width screen the page keeps its margins small and wide formulas scroll
    sideways instead of running off the screen (st.table scrolls by itself; figures keep a toolbar row above
    their titles, see `toolbar_room`). A table cell may break a long word anywhere (a correction or method string
    has no spaces), so that st.table's columns fit the page instead of pushing the last one out of view."""
    return """<style>
[data-testid="stTable"] td, [data-testid="stTable"] td p { overflow-wrap: anywhere !important; }
@media (max-width: 640px) {
  [data-testid="stMainBlockContainer"] { padding-left: 0.75rem; padding-right: 0.75rem; }
  .katex-display { overflow-x: auto; overflow-y: hidden; }
}
</style>"""
