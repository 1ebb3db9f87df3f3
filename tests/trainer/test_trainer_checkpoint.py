"""Checkpoints under damage and faults: a damaged newest checkpoint is skipped aloud or refused, `latest` never
leads outside the output directory, a resume deletes nothing, and kill -9 at any point loses no step."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from divclip.trainer.checkpoint import MANIFEST, STATE_FILE, latest_checkpoint, verify_checkpoint
from divclip.trainer.grpo import GRPOTrainer


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def tree(root):
    """Every file under root with its bytes: 'nothing was changed' is checked against this."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


_finished = {}


@pytest.fixture
def finished_run(tiny_config, tmp_path, tmp_path_factory, without_timing):
    """A 4-step run with checkpoints after steps 0, 2, 4, and the same run's history without timing.

    The run is trained once per worker and copied into each test's tmp_path (output_dir is a setting a resume may
    change, and every file, `latest` included, names its neighbours relative to the run)."""
    cfg = tiny_config(steps=4, checkpoint_every=2, keep_checkpoints=3)
    if "run" not in _finished:
        src = tmp_path_factory.mktemp("finished_run")
        hist = GRPOTrainer(cfg.replace(output_dir=str(src))).train().history
        assert sorted(p.name for p in (src / "checkpoints").glob("step-*")) == [
            "step-000000",
            "step-000002",
            "step-000004",
        ]
        _finished["run"] = src, without_timing(hist)
    src, hist = _finished["run"]
    shutil.copytree(src, tmp_path, dirs_exist_ok=True, symlinks=True)
    return cfg.replace(output_dir=str(tmp_path)), hist


def damage_truncate(ckpt):
    f = ckpt / STATE_FILE
    f.write_bytes(f.read_bytes()[:100])


def damage_flip_weights(ckpt):
    f = ckpt / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[-5] ^= 0xFF  # same size, other contents: only the checksum sees it
    f.write_bytes(bytes(data))


def damage_no_manifest(ckpt):
    (ckpt / MANIFEST).unlink()


def damage_bad_manifest(ckpt):
    (ckpt / MANIFEST).write_text('{"files": [1, 2')


def damage_state_is_dir(ckpt):
    (ckpt / STATE_FILE).unlink()
    (ckpt / STATE_FILE).mkdir()


def damage_manifest_escapes(ckpt):
    m = json.loads((ckpt / MANIFEST).read_text())
    m["files"]["../../../etc/passwd"] = {"bytes": 1, "sha256": "0"}
    (ckpt / MANIFEST).write_text(json.dumps(m))


DAMAGES = [
    damage_truncate,
    damage_flip_weights,
    damage_no_manifest,
    damage_bad_manifest,
    damage_state_is_dir,
    damage_manifest_escapes,
]


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__)
def test_verify_names_what_is_wrong(finished_run, tmp_path, damage):
    ckpt = tmp_path / "checkpoints" / "step-000004"
    assert verify_checkpoint(ckpt) is None
    damage(ckpt)
    assert isinstance(verify_checkpoint(ckpt), str)


@pytest.mark.parametrize("damage", [damage_truncate, damage_flip_weights], ids=lambda f: f.__name__)
def test_damaged_newest_checkpoint_is_skipped_aloud_and_kept(finished_run, tmp_path, capsys, without_timing, damage):
    cfg, full = finished_run
    damage(tmp_path / "checkpoints" / "step-000004")
    capsys.readouterr()
    hist = GRPOTrainer(cfg).train().history
    err = capsys.readouterr().err
    assert "skipping damaged checkpoint(s) (step-000004" in err and "resuming from step 2" in err
    assert without_timing(hist) == full  # steps 3 and 4 redone exactly
    assert without_timing(read_jsonl(tmp_path / "metrics.jsonl")) == full
    kept = list((tmp_path / "checkpoints").glob("step-000004.damaged*"))
    assert len(kept) == 1 and verify_checkpoint(kept[0]) is not None  # moved aside, not deleted
    assert verify_checkpoint(tmp_path / "checkpoints" / "step-000004") is None


def test_no_intact_checkpoint_is_refused_and_nothing_changes(finished_run, tmp_path):
    cfg, _ = finished_run
    for p in (tmp_path / "checkpoints").glob("step-*"):
        damage_truncate(p)
    before = tree(tmp_path)
    with pytest.raises(ValueError, match=r"holds checkpoints but none is intact \(step-000004: trainer_state.pt has"):
        GRPOTrainer(cfg).train()
    assert tree(tmp_path) == before


@pytest.mark.parametrize("pointer", ["../../elsewhere", "/tmp/x/step-000001", "step-000004/../../x", ""])
def test_latest_never_leads_outside(finished_run, tmp_path, capsys, pointer):
    cfg, _ = finished_run
    (tmp_path / "checkpoints" / "latest").write_text(pointer)
    assert latest_checkpoint(tmp_path, announce=True) == tmp_path / "checkpoints" / "step-000004"
    assert "ignoring checkpoints/latest" in capsys.readouterr().err


def test_latest_as_a_directory_or_link_is_refused_before_any_step(finished_run, tmp_path):
    cfg, _ = finished_run
    latest = tmp_path / "checkpoints" / "latest"
    latest.unlink()
    latest.mkdir()
    before = tree(tmp_path)
    with pytest.raises(ValueError, match="checkpoints/latest is not a regular file"):
        GRPOTrainer(cfg.replace(steps=6)).train()
    assert tree(tmp_path) == before and not list((tmp_path / "checkpoints").glob(".*tmp*"))
    latest.rmdir()
    latest.symlink_to("/etc/hostname")
    with pytest.raises(ValueError, match="checkpoints/latest is not a regular file"):
        GRPOTrainer(cfg.replace(steps=6)).train()


def test_resume_keeps_rows_logged_after_the_checkpoint(finished_run, tmp_path, without_timing):
    cfg, full = finished_run
    extra = '{"step": 5, "note": "logged after the last checkpoint"}\n'
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(extra)
    GRPOTrainer(cfg).train()  # nothing left to do, but metrics.jsonl is rewritten from the checkpoint
    (old,) = (tmp_path / "superseded").iterdir()
    assert (old / "metrics.jsonl").read_text().endswith(extra)
    assert without_timing(read_jsonl(tmp_path / "metrics.jsonl")) == full


def test_output_dir_that_is_a_file_is_refused(tiny_config, tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        GRPOTrainer(tiny_config(steps=1, output_dir=str(tmp_path / "f"))).train()


def test_warm_start_progress_and_checkpoint(tiny_config, tmp_path, capsys):
    GRPOTrainer(tiny_config(steps=1, output_dir=str(tmp_path), progress=True)).train()
    err = capsys.readouterr().err
    assert "warm start" in err and "evaluating the warm start on 10 held-out problems" in err
    assert verify_checkpoint(tmp_path / "checkpoints" / "step-000000") is None


# ---------------------------------------------------------------------------------------------- kill -9
# Every run below is a real process killed with SIGKILL, but torch and the trainer are imported once: a server
# process imports them, then os.fork()s a fresh child per run (the server itself never trains, so no thread pool
# or trainer state is inherited). Importing torch took ~6 s of CPU per process; a forked run takes under one.
SERVER = textwrap.dedent("""
    import json, os, signal, sys, traceback
    import divclip.trainer.checkpoint as ck, divclip.trainer.runlog as rl, divclip.trainer.sft as sft, torch
    import divclip.trainer.grpo as g
    from divclip.trainer.grpo import GRPOTrainer
    from divclip.trainer.config import TrainerConfig

    def run(out, kill_at, settings):
        counter = {"n": 0}

        def killer(name, nth, real):
            def wrapped(*a, **k):
                if kill_at == name:
                    counter["n"] += 1
                    if counter["n"] == nth:
                        os.kill(os.getpid(), signal.SIGKILL)
                return real(*a, **k)
            return wrapped

        what, nth = (kill_at.split(":") + ["1"])[:2] if kill_at != "none" else ("none", "0")
        kill_at, nth = what, int(nth)
        ck.torch.save = killer("torch.save", nth, torch.save)          # mid-checkpoint: weights written, state not
        ck.write_manifest = killer("manifest", nth, ck.write_manifest)  # before the manifest
        ck.write_text_atomic = killer("latest", nth, ck.write_text_atomic)  # after the rename, before `latest`
        rl.MetricsLog.log = killer("log", nth, rl.MetricsLog.log)       # between two checkpoints
        g.warm_start = killer("sft", nth, sft.warm_start)               # before the warm start's checkpoint
        cfg = TrainerConfig(**{**json.loads(open(settings).read()), "output_dir": out})
        GRPOTrainer(cfg).train()

    print("ready", flush=True)
    for line in sys.stdin:
        out, kill_at, settings, log = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the run: its stdout and stderr go to its own log, never into this protocol
            signal.alarm(300)  # a run that hangs ends (SIGALRM, exit -14) instead of hanging the test
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            try:
                run(out, kill_at, settings)
                code = 0
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)  # -9 when killed, like subprocess
""")


@pytest.fixture(scope="module")
def run_in_a_fresh_process(tmp_path_factory):
    """run(out, kill_at, settings) -> (exit code, the run's stderr+stdout), each run a forked child process."""
    script = tmp_path_factory.mktemp("kill9") / "server.py"
    script.write_text(SERVER)
    server = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    assert server.stdout.readline() == "ready\n"

    def run(out, kill_at, settings):
        log = out.parent / f"{out.name}-{kill_at.replace(':', '_')}.log"
        server.stdin.write(json.dumps([str(out), kill_at, str(settings), str(log)]) + "\n")
        server.stdin.flush()
        return int(server.stdout.readline()), log.read_text()

    yield run
    server.stdin.close()
    assert server.wait(timeout=60) == 0


_reference = {}


def uninterrupted_history(cfg, without_timing):
    """The same run, in this process, without an output directory: computed once per worker, shared by the cases."""
    key = json.dumps(cfg.to_dict(), sort_keys=True)
    if key not in _reference:
        _reference[key] = without_timing(GRPOTrainer(cfg).train().history)
    return _reference[key]


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["sft", "manifest:1", "torch.save:2", "latest:3", "log:3"])
def test_kill_9_and_resume_lose_no_step(tiny_config, tmp_path, without_timing, run_in_a_fresh_process, kill_at):
    cfg = tiny_config(steps=5, checkpoint_every=2)
    settings = tmp_path / "cfg.json"
    settings.write_text(json.dumps(cfg.to_dict()))
    out = tmp_path / "run"
    code, log = run_in_a_fresh_process(out, kill_at, settings)
    assert code == -signal.SIGKILL, log[-2000:]
    code, log = run_in_a_fresh_process(out, "none", settings)
    assert code == 0 and "Traceback" not in log, log[-2000:]
    assert without_timing(read_jsonl(out / "metrics.jsonl")) == uninterrupted_history(cfg, without_timing)
    assert verify_checkpoint(latest_checkpoint(out)) is None and latest_checkpoint(out).name == "step-000005"
