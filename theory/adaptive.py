"""Adaptive δ: a controller that resets a measure's budget each step to hold a training signal at a target.

An `AdaptiveSpec` (method string `kl3@clipfrac=0.1`, grammar in `divclip.theory.spec`) names the signal, the
target and the gains; `DeltaController` holds the current δ of one or more independent runs (the arena keeps
one per seed, the trainer one) and updates it after every step from that step's signal:

    e  = clamp((target - signal) / target, -1, 1)                 relative error, bounded
    δ <- clamp(δ · exp(dir · gain · e), delta_min, delta_max)      a multiplicative (log-space) step

dir is the assumed sign of d(signal)/dδ: a wider budget clips less (clipfrac: dir = -1) and lets the policy
move further from π_old (kl3: +1); for entropy the default -1 assumes larger steps collapse entropy faster
(docs/future_work.md measures which side's clipping moves entropy in each toy environment). With |e| <= 1 one
step changes δ by at most a factor exp(gain) (default gain 0.3: ×1.35). A non-finite signal (e.g. an empty
batch) leaves δ unchanged. The state (δ per run, steps taken, last signal) round-trips through
`state_dict` / `load_state_dict` as plain lists and numbers, so checkpoints store it with `weights_only` loads.

Torch-free.
"""

from __future__ import annotations

import math

import numpy as np

from divclip.theory.spec import AdaptiveSpec, ClipSpec, is_adaptive, method_string

__all__ = ["DeltaController", "delta_update", "process_controller"]


def delta_update(delta, signal, spec: AdaptiveSpec):
    """One controller step for δ (scalar or array) given the signal (same shape): the module docstring's rule."""
    delta = np.asarray(delta, dtype=np.float64)
    signal = np.asarray(signal, dtype=np.float64)
    err = np.clip((spec.target - signal) / spec.target, -1.0, 1.0)
    new = np.clip(delta * np.exp(spec.direction * spec.gain * err), spec.delta_min, spec.delta_max)
    return np.where(np.isfinite(signal), new, delta)


class DeltaController:
    """The δ of `runs` independent runs of one `AdaptiveSpec`, all starting at its δ0."""

    def __init__(self, spec: AdaptiveSpec, runs: int = 1):
        if not isinstance(spec, AdaptiveSpec):
            raise ValueError(f"spec must be an AdaptiveSpec (a method string such as 'kl3@clipfrac=0.1'), got {spec!r}")
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
            raise ValueError(f"runs must be an integer >= 1, got {runs!r}")
        self.spec = spec
        self.delta = np.full(runs, float(spec.delta))
        self.steps = 0
        self.last_signal = np.full(runs, math.nan)

    @property
    def signal(self) -> str:
        return self.spec.signal

    def spec_for(self, run: int = 0) -> ClipSpec:
        """The plain ClipSpec run `run` uses this step (its current δ)."""
        return self.spec.fixed(float(self.delta[run]))

    def update(self, signal) -> np.ndarray:
        """Take one step from this step's signal (a number, or one per run); returns the new δ per run."""
        sig = np.broadcast_to(np.asarray(signal, dtype=np.float64), self.delta.shape)
        self.delta = delta_update(self.delta, sig, self.spec)
        self.last_signal = sig.copy()
        self.steps += 1
        return self.delta.copy()

    def state_dict(self) -> dict:
        return {
            "method": method_string(self.spec),
            "delta": self.delta.tolist(),
            "steps": self.steps,
            "last_signal": self.last_signal.tolist(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a `state_dict`; a ValueError when it belongs to another method or run count."""
        method = method_string(self.spec)
        if not isinstance(state, dict) or state.get("method") != method:
            got = state.get("method") if isinstance(state, dict) else state
            raise ValueError(f"controller state is for method {got!r}, this controller runs {method!r}")
        delta = np.asarray(state["delta"], dtype=np.float64)
        if delta.shape != self.delta.shape or not np.all(np.isfinite(delta)) or np.any(delta <= 0):
            raise ValueError(f"controller state has δ {state['delta']!r}; expected {self.delta.size} finite values > 0")
        self.delta = delta
        self.steps = int(state["steps"])
        self.last_signal = np.asarray(state["last_signal"], dtype=np.float64)


def process_controller(controllers: dict, method: str, spec):
    """(the spec to run now, its controller or None) for an engine plug-in that keeps one controller per process and
    method string in `controllers`: a plain spec as it is; an adaptive one through the controller of `method`,
    made on first use, at its current δ."""
    if not is_adaptive(spec):
        return spec, None
    ctrl = controllers.get(method)
    if ctrl is None:
        ctrl = controllers[method] = DeltaController(spec)
    return ctrl.spec_for(0), ctrl
