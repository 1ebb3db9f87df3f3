"""The keys an engine's own example sets that the modelled engine does not know (issue 31 item 2): each is either a
key of the example's own config (a verl recipe's hydra config, a SkyRL or AReaL example's config class: known when
the launch runs that example), or of another version of the engine, and the unknown-key warning says which.

References: the engines' own sources at the commits the snapshots name, read with `git show` from the mirrors this
project's sessions fetch (`DIVCLIP_MIRRORS`, default /work/.mirror; those tests skip without them), the installed
verl 0.9.1's generated trainer configs, and the corpus files of tests/fixtures/engines/corpus/.
"""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from divclip.engines import areal, openrlhf, unknown_key_origin, verl
from divclip.engines.base import EXAMPLE_KEYS_FILE, _example_rows, entry_module, example_keys
from divclip.engines.source import installed_file
from divclip.sanity.report import build_report

MIRRORS = Path(os.environ.get("DIVCLIP_MIRRORS", "/work/.mirror"))
CORPUS = Path(__file__).parents[1] / "fixtures" / "engines" / "corpus"
VERL_RELEASES = {  # OTHER_VERSIONS -> (revision, prefix of the config file names)
    "0.4.1": ("v0.4.1", ""),
    "0.5.0": ("v0.5.0", "_generated_"),
    "0.6.0": ("v0.6.0", "_generated_"),
    "0.6.1": ("v0.6.1", "_generated_"),
    "0.7.0": ("v0.7.0", "_generated_"),
    "0.8.0.dev": ("b178a3cd5", "_generated_"),
}


def _git(repo: str, rev: str, path: str | None = None) -> str:
    """`git show rev:path` in the mirror of `repo` (owner/name); the test skips when the mirror lacks it."""
    where = MIRRORS / repo.replace("/", "+") / "repo"
    if not where.exists():
        pytest.skip(f"{repo}'s source is not here ({where}; set DIVCLIP_MIRRORS)")
    args = ["git", f"--git-dir={where}", "show", f"{rev}:{path}"] if path else ["git", f"--git-dir={where}", *rev]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"{repo} mirror: {done.stderr.strip()[:120]}")
    return done.stdout


def _unknown(path_or_text, name=None) -> list[dict]:
    report = build_report(config=path_or_text, config_name=name) if name else build_report(config=path_or_text)
    return [w for w in report["warnings"] if w["code"] == "unknown_key"]


# ------------------------------------------------------------------------------ verl's other versions
def _recipes(rev: str) -> dict:
    """{recipe module: its hydra config text} of verl's recipe/ at `rev`, for the recipes built on a trainer config."""
    out = {}
    where = MIRRORS / "volcengine+verl" / "repo"
    _git("volcengine/verl", rev, "verl/trainer/config/ppo_trainer.yaml")  # skips without the mirror or the rev
    found = subprocess.run(  # git grep exits 1 when nothing matches (0.8.0.dev has no recipe/ of its own)
        ["git", f"--git-dir={where}", "grep", "-n", "hydra.main(", rev, "--", "recipe/*.py"],
        capture_output=True,
        text=True,
    )
    for line in found.stdout.splitlines():
        path = line.split(":")[1]
        if 'config_path="config", config_name="' not in line:
            continue
        name = line.split('config_name="')[1].split('"')[0]
        shown = subprocess.run(
            ["git", f"--git-dir={where}", "show", f"{rev}:{path.rsplit('/', 1)[0]}/config/{name}.yaml"],
            capture_output=True,
            text=True,
        )
        defaults = (yaml.safe_load(shown.stdout) or {}).get("defaults", []) if shown.returncode == 0 else []
        if any(isinstance(d, str) and d in verl.TRAINER_CONFIGS for d in defaults):
            out[path.removesuffix(".py").replace("/", ".")] = shown.stdout
    return out


def test_the_other_versions_snapshot_is_the_releases_configs():
    configs = {
        version: [
            _git("volcengine/verl", rev, f"verl/trainer/config/{prefix}{name}.yaml")
            for name in verl.TRAINER_CONFIGS[:2]
        ]
        for version, (rev, prefix) in VERL_RELEASES.items()
    }
    assert tuple(configs) == verl.OTHER_VERSIONS
    recipes = {version: _recipes(rev) for version, (rev, _) in VERL_RELEASES.items()}
    assert "recipe.dapo.main_dapo" in recipes["0.7.0"] and not recipes["0.8.0.dev"]  # moved to verl-recipe
    lines = [ln for ln in verl.OTHER_VERSIONS_FILE.read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines == verl.other_versions_lines(configs, {v: r for v, r in recipes.items() if r})


def test_no_key_of_another_version_is_a_key_of_the_installed_verl():
    installed = set()
    for name in verl.TRAINER_CONFIGS:
        installed |= verl.known_keys_from(installed_file("verl", f"trainer/config/_generated_{name}.yaml").read_text())
    table = verl._other_versions()
    assert len(table) >= 100
    assert not [k for k in table if verl.is_known(k.split(":")[-1], frozenset(installed))]
    assert (
        verl.key_origin("trainer.use_legacy_worker_impl") == "not a key of verl 0.9.1: verl 0.5.0 to 0.8.0.dev had it"
    )
    assert verl.key_origin("critic.model.fsdp_config.param_offload").endswith("verl 0.4.1 to 0.8.0.dev had it")
    assert verl.key_origin("reward_model.use_reward_loop").endswith("verl 0.7.0, 0.8.0.dev had it")
    assert verl.key_origin("actor_rollout_ref.actor.clip_ratio_hihg") is None  # a typo is no version's


def test_the_warning_says_which_verl_versions_had_the_key():
    found = _unknown(CORPUS / "verl/ppo_trainer__run_gemma.sh")
    assert [w["key"] for w in found] == [
        "critic.model.fsdp_config.param_offload",
        "critic.model.fsdp_config.optimizer_offload",
    ]
    for w in found:
        assert "verl would refuse it; not a key of verl 0.9.1: verl 0.4.1 to 0.8.0.dev had it" in w["message"]
    legacy = _unknown(CORPUS / "verl/sapo_trainer__run_qwen30b_sapo.sh")
    assert [w["key"] for w in legacy] == ["trainer.use_legacy_worker_impl"]


# ------------------------------------------------------------------------------ the examples' own keys
def _fields(source: str, cls: str) -> dict:
    """{field: annotation text} of the dataclass `cls` in `source`."""
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls)
    return {s.target.id: ast.unparse(s.annotation) for s in node.body if isinstance(s, ast.AnnAssign)}


def test_each_verl_recipe_row_is_its_hydra_configs_own_keys():
    commit = "48ea0a797f"
    found = _git("verl-project/verl-recipe", ["grep", "-n", "hydra.main(", commit, "--", "*.py"])
    want = set()
    for line in found.splitlines():
        path = line.split(":")[1]
        if 'config_path="config", config_name="' not in line:
            continue
        name = line.split('config_name="')[1].split('"')[0]
        where = f"{path.rsplit('/', 1)[0]}/config/{name}.yaml"
        text = _git("verl-project/verl-recipe", commit, where)
        defaults = (yaml.safe_load(text) or {}).get("defaults", [])
        if not any(isinstance(d, str) and d in verl.TRAINER_CONFIGS for d in defaults):
            continue
        module = "recipe." + path.removesuffix(".py").replace("/", ".")
        want |= {(module, f"verl-project/verl-recipe@48ea0a7e:{where}", k) for k in verl.recipe_keys_from(text)[1]}
    rows = {(m, s, k) for e, m, s, k in _example_rows() if e == "verl"}
    assert rows == want
    assert "reward_model.overlong_buffer.enable" in example_keys("verl", "recipe.entropy.main_entropy")


def test_the_areal_rows_are_their_example_classes_fields():
    rows = {(e, m, s, k) for e, m, s, k in _example_rows() if e == "areal"}
    for _, module, source, key in rows:
        repo, rest = source.split("@")
        commit, path, cls = rest.split(":")
        text = _git(repo, commit, path)
        fields = _fields(text, cls)
        head, _, leaf = key.rpartition(".")
        if "." in key:  # a field whose type is a dataclass of the same file: its fields
            assert fields[head].endswith("Config") and leaf in _fields(text, fields[head]), (source, key)
        else:
            assert key in fields, (source, key)
        script = module.replace(".", "/") + ".py"  # the entry point loads that class
        assert cls in _git(repo, commit, script), script


SKYRL_REV = "f5bc3b78dfddfb352870d5d7430cd226e5785838"  # tag skyrl-v0.3.0
SKYRL_PREFIX = {"algorithm_cls": "trainer.algorithm", "trainer_cls": "trainer", "generator_cls": "generator"}


class _SkyrlExamples:
    """The keys each SkyRL example entry point adds, derived from the examples' source at SKYRL_REV (their AST:
    config classes, `make_config(...)`, imports, `X.from_cli_overrides`) and the installed SkyRL 0.3.0 config
    dataclasses (which fields a base already has; a field holding one of them stands for its fields)."""

    def __init__(self):
        import dataclasses

        import skyrl.train.config as config
        from skyrl.train.utils import rate_limiter

        self.dataclasses = dataclasses
        self.installed = {n: v for n, v in vars(config).items() if dataclasses.is_dataclass(v)}
        self.installed["RateLimiterConfig"] = rate_limiter.RateLimiterConfig
        self.root = config.SkyRLTrainConfig
        files = _git("NovaSky-AI/SkyRL", ["ls-tree", "-r", "--name-only", SKYRL_REV, "--", "examples"]).split()
        self.trees = {}
        for path in (p for p in files if p.endswith(".py")):
            text = _git("NovaSky-AI/SkyRL", SKYRL_REV, path)
            try:
                self.trees[path] = ast.parse(text)
            except SyntaxError:  # Python 3.12 f-strings: such a file must declare no config of its own
                assert "from_cli_overrides" not in text and "make_config" not in text, path

    def names(self, path: str) -> dict:
        out = {}
        for node in self.trees[path].body:
            if isinstance(node, ast.ClassDef):
                out[node.name] = ("class", node)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                if ast.unparse(node.value.func) == "make_config":
                    out[node.targets[0].id] = ("make", {k.arg: ast.unparse(k.value) for k in node.value.keywords})
            elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("examples.")):
                base = path.split("/")[: -node.level] if node.level else []
                target = "/".join(base + (node.module.split(".") if node.module else [])) + ".py"
                out.update({a.asname or a.name: ("import", (target, a.name)) for a in node.names})
        return out

    def lookup(self, path: str, name: str):
        """(file, 'class' | 'make', node or make_config's arguments) of an example's name; None for SkyRL's own."""
        found = self.names(path).get(name)
        if found is None:
            return None
        if found[0] == "import":
            return self.lookup(*found[1]) if found[1][0] in self.trees else None
        return (path, *found)

    def keys_of_make(self, path: str, args: dict) -> set:
        return {k for arg, cls in args.items() for k in self.keys_of_class(*self._class(path, cls), SKYRL_PREFIX[arg])}

    def _class(self, path, name):
        where, kind, node = self.lookup(path, name)
        assert kind == "class", name
        return where, node

    def keys_of_class(self, path: str, node, prefix: str) -> set:
        """{(key, file, class that declares it)} the class adds over the SkyRL class it derives from."""
        out, base = set(), None
        for b in map(ast.unparse, node.bases):
            found = self.lookup(path, b)
            if b in self.installed:
                base = self.installed[b]
            elif found and found[1] == "class":
                out |= self.keys_of_class(found[0], found[2], prefix)
                base = base or self._installed_base(found[0], found[2])
            elif found and found[1] == "make":
                out |= self.keys_of_make(found[0], found[2])
                base = self.root
        have = {f.name for f in self.dataclasses.fields(base)} if base else set()
        for stmt in (s for s in node.body if isinstance(s, ast.AnnAssign)):
            name, annotation = stmt.target.id, ast.unparse(stmt.annotation)
            key = f"{prefix}.{name}" if prefix else name
            sub = self.lookup(path, annotation)
            if sub and sub[1] == "class":  # a field retyped to an example's subclass: that subclass's fields
                out = {k for k in out if not k[0].startswith(key + ".")} | self.keys_of_class(sub[0], sub[2], key)
            elif name in have:
                continue
            elif annotation in self.installed:
                out |= {
                    (f"{key}.{f.name}", path, node.name) for f in self.dataclasses.fields(self.installed[annotation])
                }
            else:
                out.add((key, path, node.name))
        return out

    def _installed_base(self, path, node):
        for b in map(ast.unparse, node.bases):
            if b in self.installed:
                return self.installed[b]
            found = self.lookup(path, b)
            if found:
                return self.root if found[1] == "make" else self._installed_base(found[0], found[2])
        return None

    def rows(self) -> set:
        out = set()
        for path, tree in self.trees.items():
            for call in ast.walk(tree):
                if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                    continue
                if call.func.attr != "from_cli_overrides" or not (
                    found := self.lookup(path, ast.unparse(call.func.value))
                ):
                    continue
                keys = (
                    self.keys_of_make(found[0], found[2])
                    if found[1] == "make"
                    else self.keys_of_class(found[0], found[2], "")
                )
                module = path.removesuffix(".py").replace("/", ".")
                out |= {(module, f"NovaSky-AI/SkyRL@f5bc3b78:{f}:{cls}", key) for key, f, cls in keys}
        return out


def test_the_skyrl_rows_are_every_example_entry_points_own_config_fields():
    want = _SkyrlExamples().rows()
    assert {(m, s, k) for e, m, s, k in _example_rows() if e == "skyrl"} == want
    modules = {m for m, _, _ in want}
    assert len(modules) == 11 and "examples.train.thunder_agent.main_harbor_thunder_agent" in modules
    assert ("examples.train_scripts.full_context.main_full_ctx", "trainer.num_dummy_steps") in {
        (m, k) for m, _, k in want
    }
    thunder = example_keys("skyrl", "examples.train.thunder_agent.main_harbor_thunder_agent")
    assert {"generator.inference_engine.thunder_agent_mode", "generator.rate_limit.max_concurrency"} <= thunder


def test_a_launch_of_the_example_knows_its_own_keys_and_another_launch_is_told_where_they_come_from():
    for file, entry, other, declared in [
        (
            "skyrl/train__algorithms__dapo__run_dapo_gsm8k.sh",
            "examples.train.algorithms.dapo.main_dapo",
            "skyrl.train.entrypoints.main_base",
            "main_dapo.py:DAPOAlgorithmConfig",
        ),
        (
            "verl/entropy__7b_clip_cov.sh",
            "recipe.entropy.main_entropy",
            "verl.trainer.main_ppo",
            "entropy_trainer.yaml",
        ),
    ]:
        text = (CORPUS / file).read_text()
        assert entry in text and not _unknown(CORPUS / file)
        elsewhere = _unknown(text.replace(entry, other).encode(), Path(file).name)
        assert len(elsewhere) >= 2
        for w in elsewhere:
            assert "the engine's own example" in w["message"] and f"{entry} (" in w["message"], w["message"]
            assert declared in w["message"]


def test_an_example_recipe_whose_own_config_lacks_the_key_says_so():
    found = _unknown(CORPUS / "verl/dapo__run_dapo_qwen2.5_32b.sh")
    assert {w["key"] for w in found} == {
        f"reward_model.overlong_buffer.{k}" for k in ("enable", "len", "penalty_factor")
    }
    for w in found:
        assert (
            "verl would refuse it; the launched recipe.dapo.main_dapo's own config (verl-project/verl-recipe@48ea0a7e:"
            "dapo/config/dapo_trainer.yaml) does not declare it; recipe.dapo.main_dapo's config in verl 0.4.1 to 0.7.0 "
            "(verl's recipe/ then) had it; the engine's own examples "
        ) in w["message"]
    assert "reward_model.overlong_buffer.enable" not in example_keys("verl", "recipe.dapo.main_dapo")
    text = _git("verl-project/verl-recipe", "48ea0a797f", "dapo/config/dapo_trainer.yaml")
    assert "overlong_buffer_cfg" in text and "reward_model" not in text  # what the recipe's config declares instead


def test_entry_module_is_the_module_a_launch_runs():
    assert entry_module("python3 -m recipe.dapo.main_dapo") == "recipe.dapo.main_dapo"
    assert (
        entry_module("uv run -m examples.train.algorithms.dapo.main_dapo") == "examples.train.algorithms.dapo.main_dapo"
    )
    assert entry_module("python3 examples/tir/train_tir.py") == "examples.tir.train_tir"
    assert entry_module("python3 -m") is None and entry_module("ray job submit") is None and entry_module(None) is None
    assert EXAMPLE_KEYS_FILE.read_text().startswith("# The keys the engines' own example entry points add")


# ------------------------------------------------------------------------------------- AReaL, OpenRLHF
def test_areal_takes_a_sub_config_set_to_another_by_interpolation():
    """AReaL's load_expr_config merges the YAML into OmegaConf.structured(config class) and builds the object:
    `critic.optimizer: ${actor.optimizer}` is a node interpolation OmegaConf resolves to that sub-config."""
    assert "OmegaConf.structured(config_cls)" in installed_file("areal", "api/cli_args.py").read_text()
    base = {"actor.eps_clip": 0.2}
    assert areal.read({**base, "critic.optimizer": "${actor.optimizer}"}).unknown_keys == []
    assert areal.read({**base, "critic.optimizer": None}).unknown_keys == []
    for key, value in [("critic.optimizer", "${actor.nothing}"), ("critic.optimizr", "${actor.optimizer}")]:
        assert [k for k, _ in areal.read({**base, key: value}).unknown_keys] == [key]
    assert not _unknown(CORPUS / "areal/math__gsm8k_ppo.yaml")


def test_areal_example_fields_name_their_class():
    found = _unknown(CORPUS / "areal/multi_turn_math__gsm8k_grpo_mt.yaml")
    assert [w["key"] for w in found] == ["export_style", "agent_run_args.max_turns"]
    assert all("examples/multi_turn_math/config.py:MultiTurnGRPOConfig" in w["message"] for w in found)


def test_openrlhf_renamed_flags_are_0_11_0s():
    parser = _git("OpenRLHF/OpenRLHF", "v0.11.0", "openrlhf/cli/train_ppo_ray.py")
    for old in openrlhf.RENAMED:
        assert f'"{old}"' in parser and old not in openrlhf.known_flags()
        assert openrlhf.key_origin(old).startswith("not a flag of OpenRLHF 0.11.2: OpenRLHF 0.11.0 had it")
    assert openrlhf.key_origin("--actor.eps_clip_hihg") is None
    assert unknown_key_origin("openrlhf", "--algo.advantage.is_correction_enable").endswith("is_correction_level)")


def test_translate_names_where_a_dropped_key_comes_from():
    from divclip import engines

    _, diffs = engines.translate({"trainer.use_legacy_worker_impl": "auto"}, "verl", "skyrl")
    dropped = [str(d) for d in diffs if str(d).startswith("trainer.use_legacy_worker_impl")]
    assert len(dropped) == 1 and "verl 0.5.0 to 0.8.0.dev had it" in dropped[0] and "dropped, not written" in dropped[0]
