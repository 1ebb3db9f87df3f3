"""Load OpenRLHF 0.11.2's policy loss (`openrlhf/models/loss.py`) in process, without its GPU dependencies.

`openrlhf/models/__init__.py` imports the actor and ring attention, which need flash_attn; `models/utils.py`
(where `masked_mean` lives) imports deepspeed at module level for one helper the loss never calls. `load()`
registers `openrlhf.models` as a bare package (its directory, without running its `__init__`), as
tests/engines/skyrl_helpers.py does for SkyRL, and imports the installed `models/loss.py` and
`utils/loss_utils.py` from it, with an empty stand-in for `deepspeed` only while `models/utils.py` is imported
(and only where deepspeed is not installed): OpenRLHF's own code, unchanged.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path


def _bare(name: str, folder: Path) -> None:
    if name not in sys.modules:
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(folder)]
        sys.modules[name] = pkg


def load():
    """(PolicyLoss, get_loss_batch_info) of the installed OpenRLHF."""
    spec = importlib.util.find_spec("openrlhf")
    if spec is None:
        raise ImportError("openrlhf is not installed (Makefile ENGINE_PKGS)")
    root = Path(list(spec.submodule_search_locations)[0])
    try:
        loss = importlib.import_module("openrlhf.models.loss")
    except ImportError:  # flash_attn / deepspeed (module doc string)
        for name in [n for n in sys.modules if n == "openrlhf.models" or n.startswith("openrlhf.models.")]:
            del sys.modules[name]
        _bare("openrlhf.models", root / "models")
        stub = "deepspeed" not in sys.modules and importlib.util.find_spec("deepspeed") is None
        if stub:
            sys.modules["deepspeed"] = types.ModuleType("deepspeed")
        try:
            loss = importlib.import_module("openrlhf.models.loss")
        finally:
            if stub:
                del sys.modules["deepspeed"]
    _bare("openrlhf.utils", root / "utils")  # its __init__ imports the tokenizer helpers (transformers)
    loss_utils = importlib.import_module("openrlhf.utils.loss_utils")
    return loss.PolicyLoss, loss_utils.get_loss_batch_info


def loss_utils():
    """The installed `openrlhf/utils/loss_utils.py` module (its optimizer-step normalisers)."""
    load()
    return importlib.import_module("openrlhf.utils.loss_utils")
