"""Toy arena: clipping methods trained side by side on many seeds, curves drawn live while they train.

The run is `toy_envs.iter_arena` in one of the server's worker processes (`divclip.app.arena_runner`: a bounded
pool shared by all visitors, with a queue; the `ArenaRun` handle is kept in session state). A fragment polls it
every POLL_S seconds while it trains alone, BUSY_POLL_S while other visitors' runs wait in the queue (the server
and its visitors are busy: issue 15's load goal, benchmarks/bench_arena_load.py) and QUEUED_POLL_S while it waits
for a worker itself, so the page never freezes and Stop is handled mid-run. Figures are
`divclip.app.arena_figures`; the end-of-run table and claims are `divclip.toy_envs.report`.
"""

import streamlit as st

from divclip.app.arena_figures import MAX_POINTS, arena_figure
from divclip.app.arena_runner import ArenaRun, ArenaSettings, get_pool
from divclip.app.page_parts import markdown_text, share_link, show_messages
from divclip.app.state import ChoiceListParam, ChoiceParam, FloatParam, PageState, TextParam
from divclip.theory.spec import PRESETS
from divclip.toy_envs import ENVS, PASS_AT_K
from divclip.toy_envs.report import claims, summarize, threshold_90, verdict

POLL_S = 0.4  # seconds between redraws while a run trains (goal: a redraw at least every 0.5 s, with room for jitter)
BUSY_POLL_S = 1.5  # ... while other runs wait in the queue: each redraw costs the server and a browser CPU time
QUEUED_POLL_S = 2.0  # while the run waits for a worker: only its place in the queue changes
LIVE_POINTS = 150  # steps drawn per curve while a run trains (MAX_POINTS once it has ended)
FIGURE_KEY = "arena.figure_cache"
RUN_KEY = "arena.run"
ERROR_KEY = "arena.error"
DEFAULT_ENV = "sparse"  # the methods part visibly within a minute (see below); the bandit converges by step 50
_ENV_DEFAULTS = ENVS[DEFAULT_ENV].arena
ARENA_SPEC = (
    ChoiceParam("env", "environment", DEFAULT_ENV, tuple(ENVS)),
    ChoiceListParam("methods", "method", ("grpo", "dapo", "atr"), tuple(PRESETS)),
    TextParam("extra", "other methods", "", max_chars=400),
    FloatParam("seeds", "seeds", 16.0, 1.0, 256.0),
    FloatParam("steps", "steps", 300.0, 1.0, 5000.0),
    FloatParam("group_size", "group size", float(_ENV_DEFAULTS["group_size"]), 2.0, 256.0),
    FloatParam("prompts_per_step", "prompts per step", float(_ENV_DEFAULTS["prompts_per_step"]), 1.0, 64.0),
    FloatParam("ppo_epochs", "PPO epochs", float(_ENV_DEFAULTS["ppo_epochs"]), 1.0, 32.0),
    FloatParam("lr", "learning rate", float(_ENV_DEFAULTS["lr"]), 1e-4, 1.0),
)

TRAINING = ("group_size", "prompts_per_step", "ppo_epochs", "lr")  # the environment's registry defaults

state = PageState("arena", ARENA_SPEC)
url_warnings = state.init()
if "arena._env_defaults" not in st.session_state:
    # First visit: a link naming an environment but not its training settings gets that environment's defaults
    # (the parameters' own defaults are the bandit's).
    st.session_state["arena._env_defaults"] = True
    given = st.query_params.to_dict()
    env_defaults = ENVS[st.session_state[state.key("env")]].arena
    state.set({name: float(env_defaults[name]) for name in TRAINING if name not in given})


def current_settings() -> ArenaSettings:
    v = state.values()
    extra = [m.strip() for m in v["extra"].split(",") if m.strip()]
    return ArenaSettings(
        env=v["env"],
        methods=(*v["methods"], *extra),
        seeds=int(round(v["seeds"])),
        steps=int(round(v["steps"])),
        group_size=int(round(v["group_size"])),
        prompts_per_step=int(round(v["prompts_per_step"])),
        ppo_epochs=int(round(v["ppo_epochs"])),
        lr=float(v["lr"]),
    )


def use_env_defaults() -> None:
    """A new environment brings its registry settings (toy_envs.registry); steps and seeds stay."""
    defaults = ENVS[st.session_state[state.key("env")]].arena
    state.set({name: float(defaults[name]) for name in TRAINING})


def start_run() -> None:
    """Run button: validate (iter_arena raises ValueError naming the argument) and queue the run."""
    ss = st.session_state
    ss.pop(ERROR_KEY, None)
    try:
        run = ArenaRun.start(current_settings())
    except ValueError as exc:
        ss[ERROR_KEY] = str(exc)
        return
    previous = ss.get(RUN_KEY)
    if previous is not None:
        previous.stop()
    ss[RUN_KEY] = run


def stop_run() -> None:
    run = st.session_state.get(RUN_KEY)
    if run is not None:
        run.stop()


st.title("Toy arena")
st.markdown(
    "Train clipping methods side by side on toy problems where the expected reward, pass@k and entropy are "
    "known exactly. Seed s draws the same random stream under every method, so differences are paired; curves "
    "are the mean over seeds with a band holding the middle 95 % of seeds. What the full runs in "
    "`docs/toy_claims.md` found: on the sparse exploration problem both clip-higher methods beat GRPO (DAPO's "
    "1.28 more than ATR-GRPO's derived 1.2308); on the bandit and the sequence task every method converges to "
    "the same answer, because the upper bound rarely binds."
)
show_messages(url_warnings, kind="warning")

with st.sidebar:
    st.subheader("Problem")
    st.selectbox("Environment", tuple(ENVS), key=state.key("env"), on_change=use_env_defaults)
    st.caption(ENVS[st.session_state[state.key("env")]].summary)
    st.multiselect(
        "Methods",
        tuple(PRESETS),
        key=state.key("methods"),
        help="Presets: grpo ratio 0.2, dapo 0.2/0.28, atr KL3 δ = 0.023144, dppo_kl / "
        "dppo_tv DPPO's gated binary KL / TV, gspo sequence-level ratio, sapo soft gate.",
    )
    st.text_input(
        "Other methods",
        key=state.key("extra"),
        placeholder="kl3:0.05, ratio:0.2:0.3, chi2",
        help="Comma-separated: a measure at the δ with GRPO's lower bound (kl3), 'measure:δ', "
        "'ratio:ε' or 'ratio:ε_low:ε_high'.",
    )
    c1, c2 = st.columns(2)
    c1.number_input("Seeds", min_value=1.0, max_value=256.0, step=1.0, format="%.0f", key=state.key("seeds"))
    c2.number_input("Steps", min_value=1.0, max_value=5000.0, step=10.0, format="%.0f", key=state.key("steps"))
    with st.expander("Training settings (environment defaults)"):
        st.number_input(
            "Group size", min_value=2.0, max_value=256.0, step=1.0, format="%.0f", key=state.key("group_size")
        )
        st.number_input(
            "Prompts per step",
            min_value=1.0,
            max_value=64.0,
            step=1.0,
            format="%.0f",
            key=state.key("prompts_per_step"),
        )
        st.number_input(
            "PPO epochs",
            min_value=1.0,
            max_value=32.0,
            step=1.0,
            format="%.0f",
            key=state.key("ppo_epochs"),
            help="With one epoch r ≡ 1 and no clip can bind.",
        )
        st.number_input(
            "Learning rate (Adam)", min_value=1e-4, max_value=1.0, step=0.01, format="%.4f", key=state.key("lr")
        )

try:
    pool = get_pool()
except ValueError as exc:  # the server's DIVCLIP_ARENA_WORKERS is not a pool size
    show_messages([f"The toy arena is not available on this server: {exc}."], kind="error")
    st.stop()
settings = current_settings()
query = state.sync()


def poll_interval(run: ArenaRun | None) -> float | None:
    """Seconds between the fragment's redraws for this run now (None: no timer, the run has ended)."""
    if run is None or run.done:
        return None
    if run.queued:
        return QUEUED_POLL_S
    return BUSY_POLL_S if pool.counts()[1] else POLL_S


run = st.session_state.get(RUN_KEY)
polling = run is not None and not run.done
interval = poll_interval(run)  # the fragment's timer is set for this

b1, b2, b3, b4 = st.columns([1, 1, 1, 3], vertical_alignment="bottom")
b1.button("Run", type="primary", on_click=start_run, icon=":material/play_arrow:", width="stretch", key="arena.start")
b2.button("Stop", on_click=stop_run, disabled=not polling, icon=":material/stop:", width="stretch", key="arena.stop")
k = b3.selectbox("pass@k", PASS_AT_K, index=PASS_AT_K.index(8), key="arena.pass_k")
b4.caption(
    f"{len(settings.methods)} method(s) × {settings.seeds} seed(s) × {settings.steps} steps on "
    f"{settings.env}; the page redraws every {POLL_S:g} s while it trains ({BUSY_POLL_S:g} s while "
    f"other runs wait). Runs train in the server's "
    f"pool of {pool.size} worker process(es), shared by every visitor, first come first served."
)
if ERROR_KEY in st.session_state:
    show_messages([st.session_state[ERROR_KEY]], kind="error")


def summary_rows(result) -> list[dict]:
    rows = []
    for s in summarize(result):
        rows.append(
            {
                "method": s.method,
                "final E[R]": s.final_mean,
                "± 95 % CI": s.final_ci,
                "across-seed var": s.final_var,
                "steps to 90 %": s.steps_to_90,
                **{f"pass@{kk}": s.pass_at_k[kk][0] for kk in PASS_AT_K},
                "final entropy": s.final_entropy,
                "mean clipfrac": s.mean_clipfrac,
            }
        )
    return rows


def draw_status(run: ArenaRun) -> None:
    run.seen()
    total, done = run.settings.steps, run.steps_done
    if run.queued:
        place = pool.position(run)
        training, waiting = pool.counts()
        if place is None or training < pool.size:  # a worker is free: the pool is handing it this run
            st.progress(0.0, text=f"Starting: handing the run to a worker process · {run.waited:.0f} s")
        else:
            st.progress(
                0.0,
                text=f"Queued: position {place} of {waiting} · {training} of {pool.size} worker(s) "
                f"busy · waited {run.waited:.0f} s",
            )
            st.caption(
                "Every worker is training another visitor's run; this one starts when a worker is free. "
                "Stop takes it out of the queue."
            )
    elif not run.done:
        verb = "Stopping" if run.stopping else "Training"
        st.progress(done / total, text=f"{verb}: step {done} of {total} · {run.elapsed:.1f} s")
    elif run.error:
        show_messages([f"The run failed: {run.error}"], kind="error")
    elif run.result is None:
        why = f": {run.cancel_reason}" if run.abandoned else "."
        st.warning(
            f"Stopped before it started, after {run.waited:.0f} s in the queue{why}", icon=":material/stop_circle:"
        )
    elif run.result.stopped:
        why = f": {run.cancel_reason}" if run.abandoned else "."
        st.warning(f"Stopped at step {done} of {total} after {run.elapsed:.1f} s{why}", icon=":material/stop_circle:")
    else:
        st.success(
            f"Finished: {total} steps × {len(run.settings.methods)} method(s) × {run.settings.seeds} "
            f"seed(s) in {run.elapsed:.1f} s.",
            icon=":material/check_circle:",
        )
    if run.settings != settings:
        st.caption(
            "These curves come from the last run; the settings have changed since. Press Run to train "
            "with the new ones."
        )


def draw_result(run: ArenaRun) -> None:
    result = run.result
    if result is None:
        return
    finished = run.done and result.steps_done > 0
    threshold = threshold_90(result) if finished else None
    # A redraw without a new block of steps reuses the figure; while training, curves have at most LIVE_POINTS.
    stamp = (run, result.steps_done, run.done, k)
    cached = st.session_state.get(FIGURE_KEY)
    if cached is None or cached[0] != stamp:
        points = MAX_POINTS if run.done else LIVE_POINTS
        cached = (stamp, arena_figure(result, k, max_points=points, threshold=threshold))
        st.session_state[FIGURE_KEY] = cached
    st.plotly_chart(cached[1], key="arena.figure")
    st.caption(
        f"Expected reward, pass@{k} and entropy (nats per token) are exact values of the policy, not "
        f"estimates from the batch; the clip fraction is the share of the batch's tokens clipped (upper bound "
        f"solid, lower bound dashed). Dotted: the best achievable expected "
        f"reward ({result.best_reward:.4g}). Methods with identical "
        f"curves draw on top of each other. While a run trains, curves are drawn at {LIVE_POINTS} evenly "
        f"spaced steps at most, once it has ended at {MAX_POINTS}; the CSV has every step."
    )
    if not finished:
        return
    st.subheader(f"After {result.steps_done} steps")

    # Short column labels, the long names as their help: at the long names' width the last column ("mean
    # clipfrac") was cut at 1280 px (issue 34). The data keep the long names (the CSV and the tests read them).
    def number(label: str, help: str, fmt: str = "%.4f"):
        return st.column_config.NumberColumn(label, help=help, format=fmt)

    st.dataframe(
        summary_rows(result),
        hide_index=True,
        key="arena.summary",
        column_config={
            "final E[R]": number("final E[R]", "exact expected reward at the last step, mean over seeds"),
            "± 95 % CI": number("± CI", "95 % t-interval over seeds of the final expected reward"),
            "across-seed var": number("var", "across-seed variance of the final expected reward", "%.2e"),
            "steps to 90 %": st.column_config.NumberColumn("to 90 %", help="steps to the 90 % threshold"),
            **{f"pass@{kk}": number(f"pass@{kk}", f"final pass@{kk}, mean over seeds") for kk in PASS_AT_K},
            "final entropy": number("entropy", "final entropy (nats per token), mean over seeds"),
            "mean clipfrac": number("clipfrac", "mean clip fraction over the run"),
        },
    )
    r0 = float(result.metrics["expected_reward"][:, :, 0].mean())
    best = float(result.metrics["expected_reward"][:, :, -1].mean(1).max())
    st.caption(
        f"Final = exact expected reward at the last step; ± is the 95 % t-interval over seeds. Steps to "
        f"90 %: the first step where the method's across-seed mean expected reward reaches the threshold "
        f"R0 + 0.9·(R* − R0) = {r0:.4f} + 0.9·({best:.4f} − {r0:.4f}) = **{threshold:.4f}** (dashed in "
        f"the reward panel), with R0 the mean at step 1 over all methods and seeds and R* the best "
        f"method's final mean; None: never reached."
    )
    st.download_button(
        "Metrics as CSV",
        run.csv(),
        file_name=f"divclip_arena_{result.env}.csv",
        mime="text/csv",
        icon=":material/download:",
        on_click="ignore",
        key="arena.csv",
    )
    if len(result.methods) > 1 and len(result.seeds) > 1:
        with st.expander("Does the paper's direction hold here?"):
            st.markdown(
                "\n".join(
                    f"- {markdown_text(c.text)}: **{verdict(c)}** ({markdown_text(c.detail)})" for c in claims(result)
                )
            )


@st.fragment(run_every=interval)
def live() -> None:
    """Redrawn alone every `poll_interval(run)` s while the run is queued or trains; when that interval changes
    (the run starts or ends, the queue behind it empties), one full rerun sets the timer anew (none once done)."""
    run = st.session_state.get(RUN_KEY)
    if run is None:
        st.info(
            "Press **Run** to train. The default, the sparse exploration problem at 16 seeds × 300 steps, takes "
            "well under a minute, and by step 200 the three methods' reward curves have parted."
        )
        return
    if polling and poll_interval(run) != interval:
        st.rerun()
    draw_status(run)
    draw_result(run)


live()
st.markdown("**Link to these settings**")
st.code(share_link(query), language=None, wrap_lines=True)
