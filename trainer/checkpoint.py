"""Checkpoints kept as a database keeps its pages: a run killed at any instant leaves every earlier checkpoint
intact, a damaged one is never loaded, and nothing a run wrote before is deleted when it resumes.

Layout under `output_dir/checkpoints/`:
  step-000040/            model (save_pretrained: config.json + safetensors), tokenizer files,
                          trainer_state.pt (optimizer state, step, metrics history, config),
                          MANIFEST.json (every other file's size and SHA-256)
  latest                  the name of the newest complete checkpoint (for people; resume checks every
                          checkpoint's manifest itself and follows `latest` only to a name inside checkpoints/)
A checkpoint is written into a hidden temporary directory, each file fsynced, the manifest written last, and the
directory renamed into place (a rename is atomic on one file system); `latest` is replaced the same way. Each
checkpoint holds the complete metrics history, so a resumed run rewrites metrics.jsonl / metrics.csv from it and
continues the same step count; what those files held before is moved to `superseded/`, never deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import torch

STATE_FILE = "trainer_state.pt"
MANIFEST = "MANIFEST.json"
_STEP_DIR = re.compile(r"step-(\d{6,})")
_TMP_DIR = re.compile(r"\.step-\d{6,}\.tmp-\d+")
_MANIFEST_MAX_BYTES = 1 << 20


def say(message: str):
    """A line for the person running the trainer (stderr, always shown: these are decisions about their data)."""
    print(f"divclip train: {message}", file=sys.stderr, flush=True)


def _checkpoint_root(output_dir) -> Path:
    return Path(output_dir) / "checkpoints"


def _fsync_dir(path: Path):
    with contextlib.suppress(OSError):  # some file systems cannot fsync a directory; the rename still holds
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_text_atomic(path: Path, text: str):
    """Replace `path` by `text` (temp file + fsync + rename); the temp file never outlives a failure."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise ValueError(f"cannot write {str(path)!r}: it is a directory")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _fsync_dir(path.parent)


@contextlib.contextmanager
def quiet_saving():
    """No 'Writing model shards' bars on stderr for every checkpoint (the run has its own progress bar)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(directory: Path):
    files = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:  # every file reaches the disk before the manifest names it
                os.fsync(f.fileno())
            files[p.relative_to(directory).as_posix()] = {"bytes": p.stat().st_size, "sha256": _sha256(p)}
    with open(directory / MANIFEST, "w", encoding="utf-8") as f:
        json.dump({"format": 1, "files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(directory)


def save_checkpoint(
    output_dir,
    step: int,
    model,
    tokenizer,
    optimizer,
    history: list[dict],
    config: dict,
    keep: int = 2,
    extra: dict | None = None,
) -> Path:
    """Write checkpoint `step` atomically, point `latest` at it, and prune all but the `keep` newest ones.
    A directory already named for this step (a damaged one a resume skipped) is moved aside, not deleted.
    `extra`: more trainer state (plain lists, numbers, strings), e.g. the adaptive-δ controller's; read it back
    with `load_extra_state`."""
    root = _checkpoint_root(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:06d}"
    final, tmp = root / name, root / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)  # this process's own unfinished attempt
    with quiet_saving():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    state = {
        "step": step,
        "optimizer": optimizer.state_dict(),
        "history": history,
        "config": config,
        "extra": extra or {},
    }
    torch.save(state, tmp / STATE_FILE)
    write_manifest(tmp)
    if final.exists() or final.is_symlink():
        aside = _unique(root / f"{name}.damaged")
        os.replace(final, aside)
        say(f"moved the earlier {name} aside to {aside.name} (kept for inspection)")
    os.replace(tmp, final)
    _fsync_dir(root)
    write_text_atomic(root / "latest", name)
    ours = [p for p in _step_dirs(root) if (p / MANIFEST).is_file()]  # damaged or foreign ones stay put
    for old in ours[keep:]:
        shutil.rmtree(old, ignore_errors=True)  # retention of this run's own checkpoints (keep_checkpoints)
    return final


def _unique(base: Path) -> Path:
    path, n = base, 1
    while path.exists() or path.is_symlink():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _step_dirs(root: Path) -> list[Path]:
    """Checkpoint directories (real directories named step-NNNNNN, no links), newest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _STEP_DIR.fullmatch(p.name) and p.is_dir() and not p.is_symlink()]
    return sorted(found, key=lambda p: int(_STEP_DIR.fullmatch(p.name)[1]), reverse=True)


def verify_checkpoint(path: Path, required: tuple[str, ...] = (STATE_FILE, "config.json")) -> str | None:
    """None when the checkpoint at `path` is complete and matches its manifest, else why it is not."""
    manifest = path / MANIFEST
    if manifest.is_symlink() or not manifest.is_file():
        return f"no {MANIFEST} (an unfinished or foreign checkpoint)"
    if manifest.stat().st_size > _MANIFEST_MAX_BYTES:
        return f"{MANIFEST} is larger than {_MANIFEST_MAX_BYTES} bytes"
    try:
        files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        entries = [(str(k), int(v["bytes"]), str(v["sha256"])) for k, v in files.items()]
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        return f"{MANIFEST} is unreadable ({type(exc).__name__})"
    names = {k for k, _, _ in entries}
    missing = [n for n in required if n not in names]
    if missing:
        return f"{MANIFEST} lists no {', '.join(missing)}"
    base = path.resolve()
    for rel, size, digest in entries:
        f = path / rel
        if f.is_symlink() or not f.resolve().is_relative_to(base):
            return f"{rel} is a link or lies outside the checkpoint"
        if not f.is_file():
            return f"{rel} is missing"
        if f.stat().st_size != size:
            return f"{rel} has {f.stat().st_size} bytes, the manifest says {size}"
        if _sha256(f) != digest:
            return f"{rel} does not match its SHA-256 in the manifest"
    return None


def check_output_dir(output_dir):
    """ValueError, before any work, when `output_dir` cannot hold a run (a file, or a `latest` that is not a file)."""
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"output_dir {str(out)!r} exists and is not a directory")
    for sub in ("checkpoints", "superseded"):
        if (out / sub).exists() and not (out / sub).is_dir():
            raise ValueError(f"output_dir {str(out)!r}: {sub} exists and is not a directory")
    pointer = _checkpoint_root(out) / "latest"
    if pointer.is_symlink() or (pointer.exists() and not pointer.is_file()):
        raise ValueError(
            f"output_dir {str(out)!r}: checkpoints/latest is not a regular file (a link or a "
            "directory); move it away and run again"
        )
    for name in ("metrics.jsonl", "metrics.csv"):
        p = out / name
        if p.is_symlink() or (p.exists() and not p.is_file()):
            raise ValueError(f"output_dir {str(out)!r}: {name} is not a regular file (a link or a directory)")


def _pointer_name(root: Path) -> str | None:
    """The checkpoint `latest` names, when it names one inside `root`; anything else is said aloud and ignored."""
    pointer = root / "latest"
    if not pointer.is_file() or pointer.is_symlink():
        return None
    if pointer.stat().st_size > 256:
        say("ignoring checkpoints/latest: it is not a checkpoint name (too long)")
        return None
    try:
        text = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        say("ignoring checkpoints/latest: unreadable")
        return None
    if not _STEP_DIR.fullmatch(text):
        say(f"ignoring checkpoints/latest: {text[:80]!r} is not a checkpoint name inside checkpoints/ (step-NNNNNN)")
        return None
    return text


def latest_checkpoint(output_dir, announce: bool = False) -> Path | None:
    """The newest intact checkpoint directory inside output_dir/checkpoints, or None when there is none at all.

    Damaged checkpoints (manifest missing or not matching) are skipped in favour of the previous intact one;
    with `announce`, each skip is said aloud. ValueError when checkpoints exist but none is intact (resuming
    would silently start over; starting over is `resume=False`, which moves them aside)."""
    root = _checkpoint_root(output_dir)
    dirs = _step_dirs(root)
    named = _pointer_name(root)
    if named is not None and announce and not (root / named).is_dir():
        say(f"checkpoints/latest names {named}, which does not exist; using the newest intact checkpoint")
    damaged = []
    for path in dirs:
        why = verify_checkpoint(path)
        if why is None:
            if announce and damaged:
                skipped = "; ".join(f"{p.name}: {w}" for p, w in damaged)
                say(f"skipping damaged checkpoint(s) ({skipped}); resuming from the previous intact one, {path.name}")
            return path
        damaged.append((path, why))
    if damaged:
        listed = "; ".join(f"{p.name}: {w}" for p, w in damaged)
        raise ValueError(
            f"output_dir {str(Path(output_dir))!r} holds checkpoints but none is intact ({listed}); "
            "nothing was changed there. Use another output_dir, or resume=False (--no-resume) to move "
            "them aside and start over"
        )
    return None


def stale_temporaries(output_dir) -> list[Path]:
    """Unfinished checkpoint directories (`.step-NNNNNN.tmp-PID`) left by a run that was killed while saving."""
    root = _checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if _TMP_DIR.fullmatch(p.name) and p.is_dir() and not p.is_symlink())


def set_aside(output_dir, names: list[str], why: str, announce=None) -> Path | None:
    """Move the entries `names` of output_dir that exist into output_dir/superseded/<time>-<why>/; never delete.
    `announce(line)` tells the person (default: the trainer's `say`)."""
    out = Path(output_dir)
    present = [n for n in names if (out / n).exists() or (out / n).is_symlink()]
    if not present:
        return None
    dest = _unique(out / "superseded" / f"{time.strftime('%Y%m%d-%H%M%S')}-{why}")
    dest.mkdir(parents=True)
    for n in present:
        os.replace(out / n, dest / n)
    _fsync_dir(dest)
    _fsync_dir(out)
    (announce or say)(f"moved {', '.join(present)} to {dest.relative_to(out)} (nothing is deleted)")
    return dest


# Fields a resumed run may change: they do not alter what steps 1..N compute.
RESUMABLE_CHANGES = frozenset(
    {"steps", "eval_every", "checkpoint_every", "keep_checkpoints", "output_dir", "resume", "progress", "device"}
)


def _load_state(path: Path, device="cpu") -> dict:
    try:
        state = torch.load(path / STATE_FILE, map_location=device, weights_only=True)  # tensors, numbers, strings
        if not isinstance(state, dict) or not {"step", "optimizer", "history", "config"} <= set(state):
            raise ValueError("not a trainer state")
        return state
    except Exception as exc:  # noqa: BLE001 - any failure of a verified file is one clear message
        raise ValueError(
            f"checkpoint {str(path)!r}: {STATE_FILE} cannot be read ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None


def check_resumable(path: Path, config: dict):
    """ValueError when the checkpoint at `path` was written by a run with different settings."""
    saved = _load_state(path)["config"]

    def same(a, b):
        return (list(a) if isinstance(a, tuple) else a) == (list(b) if isinstance(b, tuple) else b)

    changed = {
        k: (saved[k], v)
        for k, v in config.items()
        if k in saved and k not in RESUMABLE_CHANGES and not same(saved[k], v)
    }
    if changed:
        diffs = ", ".join(f"{k}={new!r} (checkpoint: {old!r})" for k, (old, new) in sorted(changed.items()))
        raise ValueError(
            f"output_dir {str(path.parents[1])!r} holds a run with other settings: {diffs}; use another "
            "output_dir, or resume=False (--no-resume) to start over there (the old run is moved to "
            "superseded/)"
        )


def load_checkpoint(path: Path, model, optimizer, device) -> tuple[int, list[dict]]:
    """Load weights and optimizer state in place; returns (step, metrics history)."""
    from transformers import AutoModelForCausalLM

    try:
        saved = AutoModelForCausalLM.from_pretrained(path, dtype=next(model.parameters()).dtype)
        model.load_state_dict(saved.state_dict())
    except Exception as exc:  # noqa: BLE001
        raise ValueError(
            f"checkpoint {str(path)!r}: the model cannot be loaded ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    state = _load_state(path, device)
    try:
        optimizer.load_state_dict(state["optimizer"])
        return int(state["step"]), list(state["history"])
    except Exception as exc:  # noqa: BLE001
        raise ValueError(
            f"checkpoint {str(path)!r}: the optimizer state does not fit this model ({type(exc).__name__})"
        ) from None


def load_extra_state(path: Path) -> dict:
    """The `extra` trainer state saved with checkpoint `path` ({} for checkpoints written without it)."""
    return dict(_load_state(Path(path), "cpu").get("extra") or {})


def load_warm_start(path, model, config: dict, fields: tuple[str, ...]) -> dict:
    """Load the weights of the step-0 checkpoint at `path` into `model` and return its row 0 (sft/*, eval/*).
    ValueError when it is damaged, not a step-0 checkpoint, or was made with other `fields` than `config`."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    why = verify_checkpoint(path)
    if why is not None:
        raise ValueError(f"TrainerConfig.warm_start_from={str(path)!r} is not an intact checkpoint ({why})")
    state = _load_state(path)
    if state["step"] != 0:
        raise ValueError(
            f"TrainerConfig.warm_start_from={str(path)!r} is the checkpoint of step {state['step']}; it must be a "
            "step-0 checkpoint (checkpoints/step-000000, written right after the warm start)"
        )
    saved = state["config"]
    changed = sorted(k for k in fields if k in saved and saved[k] != config[k])
    if changed:
        diffs = ", ".join(f"{k}={config[k]!r} (warm start: {saved[k]!r})" for k in changed)
        raise ValueError(f"TrainerConfig.warm_start_from={str(path)!r} was made with other settings: {diffs}")
    try:
        with quiet_saving():  # no 'Loading weights' bar for every run of a study
            weights = AutoModelForCausalLM.from_pretrained(path, dtype=next(model.parameters()).dtype).state_dict()
        model.load_state_dict(weights)
    except Exception as exc:  # noqa: BLE001 - one clear message, whatever the loader raised
        raise ValueError(
            f"TrainerConfig.warm_start_from={str(path)!r}: its weights do not fit this model ({type(exc).__name__})"
        ) from None
    return dict(state["history"][0])
