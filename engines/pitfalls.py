"""An engine's own pitfalls as `divclip check` warnings: the same `Advice` the plug-ins log, with its source.

`divclip.engines.advice.Advice` looks its source up by code in one engine-neutral table; an engine's own warning
cites the engine's own file instead, so a `Pitfall` carries its source with it (verl's and TRL's checks, the
verl plug-in's advice where verl's settings explain it, and every OpenRLHF, AReaL, SkyRL and slime warning).
`divclip check` reports both the same way (code, message, key, source).
"""

from __future__ import annotations

from dataclasses import dataclass

from divclip.engines.advice import Advice


@dataclass(frozen=True)
class Pitfall(Advice):
    """A warning about one engine's setting; `cite` is where the behaviour is (engine file and function)."""

    cite: str = ""

    @property
    def source(self) -> str:
        return self.cite


def on_policy_note(engine: str, reason: str, fix: str) -> str:
    """The message of an update that can never see a ratio other than 1 (docs/theory.md §5)."""
    return (
        f"{engine}: {reason}: the ratio π_θ/π_old is identically 1 when the loss is evaluated, so no clip "
        f"bound has any effect and clip fractions read 0 ({fix} if the clip is meant to matter)"
    )
