"""Hydra/OmegaConf interpolation in a flat config (AReaL's and SkyRL's YAML write `${gconfig.n_samples}`).

divclip reads a config as flat `{dotted.key: value}`; a value that is exactly `${other.key}` takes the value of
`other.key` when the config sets it (followed through a chain of such references, refusing a cycle). Resolver
calls (`${oc.env:X}`) and references into keys the config does not set stay as written, and the key's typing
then names them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from divclip.sanity.errors import ConfigError

_REF = re.compile(r"^\$\{([A-Za-z_][\w.]*)\}$")


def resolve_interpolations(settings: Mapping) -> dict:
    """`settings` with every `${a.b}` value replaced by the value of a.b (module doc string)."""
    out = dict(settings)
    for key in settings:
        seen = [key]
        value = settings[key]
        while isinstance(value, str) and (m := _REF.match(value)) and m.group(1) in settings:
            if m.group(1) in seen:
                raise ConfigError(f"{key} interpolates itself through {' -> '.join([*seen, m.group(1)])}")
            seen.append(m.group(1))
            value = settings[m.group(1)]
        out[key] = value
    return out
