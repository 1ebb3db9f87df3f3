"""The built wheel works on its own, beside a user's code that has its own `app/`, `theory/`, `trainer/`,
`toy_envs/`, `sanity/` and `cli/` packages (each of which raises ImportError when imported).

The wheel is built from a copy of the repository (no network: --no-index, --no-build-isolation), installed with
--no-deps into a fresh virtual environment that sees this environment's dependencies through a .pth file
(paths only: the .pth files inside them, among them the editable divclip's finder, are not executed), and run
from a directory holding the decoys: the `divclip` CLI, both plug-ins, and verl's VERL_USE_EXTERNAL_MODULES hook.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
DECOYS = ("app", "theory", "trainer", "toy_envs", "sanity", "cli")
_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    "*.egg-info",
    "build",
    "dist",
    ".pytest_cache",
    ".hypothesis",
    ".benchmarks",
    ".ruff_cache",
    "test-artifacts",
    "runs",
)

pytestmark = pytest.mark.slow


def _run(cmd, cwd, env=None, timeout=600):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python, divclip script, decoy directory) of a fresh venv with only the wheel installed.

    Built once per test session: with pytest-xdist, the first worker to get here builds it in the session's shared
    temp directory and the other workers wait for it and use it (they only run it, never change it).
    """
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("building the wheel without network needs setuptools in this environment")
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # no xdist: this process is the whole session
        return _build_and_install(tmp_path_factory.mktemp("wheel"))
    tmp = tmp_path_factory.getbasetemp().parent / "wheel"  # shared by this session's workers only
    done = tmp / "installed"  # written last: a failed build leaves no half-built venv for another worker
    with FileLock(f"{tmp}.lock"):
        if done.exists():
            return tmp / "venv" / "bin" / "python", tmp / "venv" / "bin" / "divclip", tmp / "user"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        installed = _build_and_install(tmp)
        done.write_text("")
        return installed


def _build_and_install(tmp: Path):
    src, wheels, venv, decoy = tmp / "src", tmp / "wheels", tmp / "venv", tmp / "user"
    shutil.copytree(ROOT, src, ignore=_NOT_SOURCE)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(wheels),
            str(src),
        ],
        cwd=tmp,
    )
    (wheel,) = wheels.glob("divclip-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"divclip", wheel.name.split("-py")[0] + ".dist-info"}, tops  # nothing installed bare
    for module in (
        "cli/__init__.py",
        "theory/measures.py",
        "sanity/report.py",
        "trainer/integrations/verl.py",
        "toy_envs/arena.py",
        "app/main.py",
    ):
        assert f"divclip/{module}" in names
    assert not any(n.startswith("divclip/__init__") for n in names)  # an implicit namespace package

    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    python = venv / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp).strip()
    Path(purelib, "_divclip_test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        cwd=tmp,
    )
    for name in DECOYS:
        (decoy / name).mkdir(parents=True)
        (decoy / name / "__init__.py").write_text(f"raise ImportError('the decoy {name}/ was imported')\n")
    return python, venv / "bin" / "divclip", decoy


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VERL_USE_EXTERNAL_MODULES")}
    return {**env, **extra}


def test_the_decoys_are_live_and_divclip_comes_from_the_wheel(installed):
    python, _, decoy = installed
    live = (
        "import importlib\n"
        f"for name in {DECOYS!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError as e:\n"
        "        print(e)\n"
    )
    assert _run([str(python), "-c", live], cwd=decoy, env=_env()).splitlines() == [
        f"the decoy {name}/ was imported" for name in DECOYS
    ]
    code = (
        "import sys, divclip.theory, divclip.cli, divclip.sanity.report; assert 'torch' not in sys.modules; "
        "print(divclip.theory.__file__); print(divclip.cli.__file__)"
    )
    paths = _run([str(python), "-c", code], cwd=decoy, env=_env()).split()
    venv = python.parent.parent
    assert all(Path(p).is_relative_to(venv) for p in paths), paths


def test_the_cli_runs_from_a_directory_with_decoys(installed):
    _, divclip, decoy = installed
    out = _run([str(divclip), "bounds", "--measure", "kl3", "--eps-low", "0.2"], cwd=decoy, env=_env())
    assert "eps_low  = 0.2    eps_high = 0.2308422098" in out  # docs/theory.md §2
    rows = json.loads(_run([str(divclip), "measures", "--json"], cwd=decoy, env=_env()))
    assert {"kl3", "ratio", "binary_kl"} <= {r["name"] for r in rows}
    report = json.loads(
        _run([str(divclip), "check", "actor_rollout_ref.actor.clip_ratio_low=0.2", "--json"], cwd=decoy, env=_env())
    )
    assert report["schema"] == "divclip.check/1"
    proc = subprocess.run(
        [str(divclip), "bounds", "--measure", "kl4", "--delta", "0.1"],
        cwd=decoy,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("divclip: error: measure must be one of")


def test_both_plugins_import_and_the_verl_hook_registers_the_modes(installed):
    python, _, decoy = installed
    if importlib.util.find_spec("verl") is None or importlib.util.find_spec("trl") is None:
        pytest.skip("verl and TRL are not installed here (pip install -e '.[verl,trl]')")
    code = (
        "import verl\n"  # the hook: verl/__init__.py imports every module named in VERL_USE_EXTERNAL_MODULES
        "from verl.trainer.ppo import core_algos\n"
        "import sys\n"
        "assert 'divclip.trainer.integrations.verl' in sys.modules\n"
        "fn = core_algos.get_policy_loss_fn('atr_kl3')\n"
        "import divclip.trainer.integrations.trl as trl_plugin\n"
        "print(fn.__module__); print(sys.modules[fn.__module__].__file__); print(trl_plugin.__file__)\n"
    )
    out = _run(
        [str(python), "-c", code], cwd=decoy, env=_env(VERL_USE_EXTERNAL_MODULES="divclip.trainer.integrations.verl")
    ).split()
    assert out[0] == "divclip.trainer.integrations.verl"
    assert all(Path(p).is_relative_to(python.parent.parent) for p in out[1:]), out
