"""Hydra/OmegaConf interpolation in a flat config (AReaL's and SkyRL's YAML write `${gconfig.n_samples}`).

divclip reads a config as flat `{dotted.key: value}`; a value that is exactly `${other.key}` takes the value of
`other.key` when the config sets it (followed through a chain of such references, refusing a cycle). Resolver
calls (`${oc.env:X}`) and references into keys the config does not set stay as written, and the key's typing
then names them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from divclip.engines.errors import ConfigError

_REF = re.compile(r"^\$\{([A-Za-z_][\w.]*)\}$")


def resolve_interpolations(settings: Mapping) -> dict:
    """`settings` with every `${a.b}` value replaced by the value of a.b (module doc string).

    Each key is resolved once and remembered, so a chain of n references costs n steps in all (walked afresh
    from every key, with a scan of the chain for a cycle at each step, a 5000-link chain took n³)."""
    out, done = dict(settings), set()
    for key in settings:
        chain, on_chain, at = [], set(), key
        while at not in done:
            value = out[at]
            m = _REF.match(value) if isinstance(value, str) else None
            if m is None or m.group(1) not in settings:
                break
            chain.append(at)
            on_chain.add(at)
            at = m.group(1)
            if at in on_chain:
                shown = [*chain, at] if len(chain) < 8 else [*chain[:3], "...", *chain[-3:], at]
                raise ConfigError(f"{key} interpolates itself through {' -> '.join(shown)}")
        for link in chain:
            out[link] = out[at]
        done.update(chain)
        done.add(at)
    return out
