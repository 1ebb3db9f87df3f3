"""The key tables of divclip.engines.verl and .trl equal what the installed verl / TRL / transformers document:
defaults, and the known-key snapshots behind the unknown-key warning.

Read without importing the frameworks: verl's merged config with yaml.safe_load, TRL's and transformers'
dataclass fields from their source with `ast` (importing trl pulls in transformers and is slow).
"""

import ast
import importlib.metadata
import importlib.util
from pathlib import Path

import pytest
import yaml

from divclip.engines import trl as trl_engine
from divclip.engines import verl as verl_engine

VERL_VERSION, VERL_KEYS = verl_engine.VERSION, verl_engine.KEYS
TRL_VERSION, TRL_KEYS, TRANSFORMERS_VERSION = trl_engine.VERSION, trl_engine.KEYS, trl_engine.TRANSFORMERS_VERSION


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


def _dataclass_fields(path: Path, cls: str) -> set:
    tree = ast.parse(path.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}


def test_verl_known_keys_are_every_leaf_of_the_installed_generated_config():
    root = _package_dir("verl")
    text = (root / "trainer/config/_generated_ppo_trainer.yaml").read_text()
    assert verl_engine.known_keys() == verl_engine.known_keys_from(text)
    assert set(VERL_KEYS) <= verl_engine.known_keys()


def test_trl_known_fields_are_grpo_config_training_arguments_and_the_plugin():
    root = _package_dir("trl")
    fields = (
        _dataclass_fields(root / "trainer/grpo_config.py", "GRPOConfig")
        | _dataclass_fields(_package_dir("transformers") / "training_args.py", "TrainingArguments")
        | set(trl_engine.PLUGIN_KEYS)
    )
    assert trl_engine.known_keys() == fields
    assert set(TRL_KEYS) <= trl_engine.known_keys()
