"""The default tables in divclip.sanity.settings equal what the installed verl / TRL / transformers document.

Read without importing the frameworks: verl's merged config with yaml.safe_load, TRL's and transformers'
dataclass defaults from their source with `ast` (importing trl pulls in transformers and is slow).
"""

import ast
import importlib.metadata
import importlib.util
from pathlib import Path

import pytest
import yaml

from divclip.sanity.settings import TRANSFORMERS_VERSION, TRL_KEYS, TRL_VERSION, VERL_KEYS, VERL_VERSION


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _dataclass_defaults(path: Path, cls: str) -> dict:
    tree = ast.parse(path.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    out = {}
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(stmt.value, ast.Call):
            for kw in stmt.value.keywords:
                if kw.arg == "default":
                    try:
                        out[stmt.target.id] = ast.literal_eval(kw.value)
                    except ValueError:  # a non-literal default (an enum member, a call): not one we read
                        pass
    return out


def test_verl_defaults_match_the_installed_generated_config():
    root = _package_dir("verl")
    assert importlib.metadata.version("verl") == VERL_VERSION
    merged = yaml.safe_load((root / "trainer/config/_generated_ppo_trainer.yaml").read_text())
    for key, spec in VERL_KEYS.items():
        node = merged
        for part in key.split("."):
            node = node[part]
        assert node == spec.default and type(node) is type(spec.default), key


def test_trl_defaults_match_the_installed_grpo_config():
    root = _package_dir("trl")
    assert importlib.metadata.version("trl") == TRL_VERSION
    trl = _dataclass_defaults(root / "trainer/grpo_config.py", "GRPOConfig")
    transformers = _dataclass_defaults(_package_dir("transformers") / "training_args.py", "TrainingArguments")
    assert importlib.metadata.version("transformers") == TRANSFORMERS_VERSION
    for key, spec in TRL_KEYS.items():
        source = trl if key in trl else transformers
        assert key in source, key
        assert source[key] == spec.default, key
