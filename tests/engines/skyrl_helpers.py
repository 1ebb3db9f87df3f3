"""Load SkyRL 0.3.0's loss modules on Python 3.11.

`skyrl/backends/__init__.py` imports the Tinker backend, whose pydantic models use `typing.TypedDict`, which
pydantic refuses before Python 3.12; the loss registry (`skyrl.backends.skyrl_train.utils.ppo_utils`) does not
need it. `load()` registers `skyrl.backends` as a bare package (its directory, without running its `__init__`)
and imports the installed loss modules from it: SkyRL's own code, unchanged. On 3.12 the plain import works.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path


def load():
    """(ppo_utils, AlgorithmConfig) of the installed SkyRL."""
    if "skyrl.backends" not in sys.modules:
        try:
            importlib.import_module("skyrl.backends")
        except Exception:  # noqa: BLE001 - pydantic's PydanticUserError on 3.11 (module doc string)
            for name in [n for n in sys.modules if n == "skyrl.backends" or n.startswith("skyrl.backends.")]:
                del sys.modules[name]
            spec = importlib.util.find_spec("skyrl")
            pkg = types.ModuleType("skyrl.backends")
            pkg.__path__ = [str(Path(list(spec.submodule_search_locations)[0]) / "backends")]
            sys.modules["skyrl.backends"] = pkg
    ppo_utils = importlib.import_module("skyrl.backends.skyrl_train.utils.ppo_utils")
    from skyrl.train.config import AlgorithmConfig

    return ppo_utils, AlgorithmConfig
