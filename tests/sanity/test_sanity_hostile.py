"""Malformed and hostile inputs: each gives a clear ValueError naming the problem, never a crash or a hang.

The corpus is generated here (small in memory, nothing on disk). Every case runs once through the shared core,
`report_from_uploads` (what the app page and, with paths, `divclip check` call); a few representative cases run
through the CLI in a subprocess (exit 2, one line, no traceback) and through the page (one st.error, no
exception). Decompression bombs are refused from metadata before any decoding: each case stays far below the
60 s / 2 GB every hostile input must fit in, which a subprocess under an address-space limit checks for the
largest accepted batch.
"""

import io
import pickle
import struct
import subprocess
import sys
import textwrap
import zipfile
from dataclasses import dataclass

import numpy as np
import pytest
from sanity_helpers import jsonl_bytes, npz_bytes, parquet_bytes, random_batch, safetensors_bytes, sanity_page

from divclip.cli import main
from divclip.engines.config import MAX_CONFIG_BYTES
from divclip.sanity.errors import SanityInputError
from divclip.sanity.report import report_from_uploads
from divclip.sanity.validation import Limits


@dataclass(frozen=True)
class Case:
    id: str
    target: str  # "config" | "rollouts"
    name: str
    data: bytes
    needle: str  # must appear in the error message
    app: bool = True  # False where st.file_uploader's own type filter refuses the name first


# ---------------------------------------------------------------------------------------------- configs
def _yaml_bomb(levels=9, width=9) -> bytes:
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return ("\n".join(lines) + "\n").encode()


def _verl(**actor) -> bytes:
    body = "".join(f"    {k}: {v}\n" for k, v in actor.items())
    return f"data:\n  train_batch_size: 512\nactor_rollout_ref:\n  actor:\n{body}".encode()


CONFIG_CASES = [
    Case("empty", "config", "c.yaml", b"", "is empty"),
    Case("whitespace", "config", "c.yaml", b"   \n\t\n", "is empty"),
    Case("non_utf8", "config", "c.yaml", b"a: \xff\xfe\xfa", "not UTF-8"),
    Case("latin1_json", "config", "c.json", '{"epsilon": "é"}'.encode("latin-1"), "not UTF-8"),
    Case("nul_bytes", "config", "c.yaml", b"epsilon: 0.2\x00\x00", "NUL bytes"),
    Case("python_apply", "config", "c.yaml", b'x: !!python/object/apply:os.system ["echo pwned"]\n', "python tags"),
    Case("python_name", "config", "c.yaml", b"x: !!python/name:os.system\n", "python tags"),
    Case("python_object", "config", "c.yaml", b"x: !!python/object:collections.OrderedDict {}\n", "python tags"),
    Case("python_new", "config", "c.yaml", b"x: !!python/object/new:builtins.dict [[]]\n", "python tags"),
    Case("yaml_bomb", "config", "c.yaml", _yaml_bomb(), "aliases"),
    Case("deep_yaml", "config", "c.yaml", b"a: " + b"[" * 200 + b"]" * 200 + b"\n", "deeper than"),
    Case("deep_json", "config", "c.json", b"[" * 100000 + b"]" * 100000, "too deeply"),
    Case("yaml_syntax", "config", "c.yaml", b"epsilon: [0.2, 0.3\n", "not valid YAML"),
    Case("yaml_list", "config", "c.yaml", b"- epsilon\n- 0.2\n", "must be a mapping"),
    Case("yaml_scalar", "config", "c.yaml", b"just a string\n", "must be a mapping"),
    Case("yaml_unhashable_key", "config", "c.yaml", b"? [a, b]\n: 1\n", "not valid YAML"),
    Case("yaml_custom_tag", "config", "c.yaml", b"epsilon: !evil 0.2\n", "not valid YAML"),
    Case("json_syntax", "config", "c.json", b'{"epsilon": 0.2,', "not valid JSON"),
    Case("json_list", "config", "c.json", b"[1, 2]", "must be a mapping"),
    Case("json_empty_mapping", "config", "c.json", b"{}", "holds no settings"),
    Case("json_nan", "config", "c.json", b'{"epsilon": NaN}', "epsilon must be a finite number"),
    Case("json_lone_surrogate_key", "config", "c.json", b'{"epsilon\\ud800": 0.2}', "is a lone surrogate"),
    Case("json_lone_surrogate_value", "config", "c.json", b'{"loss_type": "\\udcff"}', "is a lone surrogate"),
    Case("python_lone_surrogate", "config", "c.py", b'c = GRPOConfig(loss_type="\\ud800")\n', "is a lone surrogate"),
    Case("eps_string", "config", "c.yaml", b"epsilon: abc\nloss_type: dapo\n", "epsilon must be a finite number"),
    Case("eps_list", "config", "c.yaml", b"epsilon: [0.2]\n", "epsilon must be a finite number"),
    Case("iterations_bool", "config", "c.yaml", b"num_iterations: true\n", "num_iterations must be an integer"),
    Case("loss_type_int", "config", "c.yaml", b"loss_type: 3\n", "loss_type must be a string"),
    Case("loss_type_unknown", "config", "c.json", b'{"loss_type": "ppo"}', "loss_type must be one of"),
    Case("is_level_unknown", "config", "c.json", b'{"importance_sampling_level": "tokens"}', "must be one of"),
    Case(
        "gbs_not_divisible",
        "config",
        "c.json",
        b'{"generation_batch_size": 30, "per_device_train_batch_size": 8}',
        "must be divisible",
    ),
    Case("clip_low_list", "config", "c.yaml", _verl(clip_ratio_low="[0.2]"), "clip_ratio_low must be a finite"),
    Case("clip_high_negative", "config", "c.yaml", _verl(clip_ratio_high=-0.1), "> 0"),
    Case("clip_inf", "config", "c.yaml", _verl(clip_ratio_low=".inf"), "finite"),
    Case("dual_c_below_one", "config", "c.yaml", _verl(clip_ratio_c=0.5), "clip_ratio_c must be a finite number > 1"),
    Case("loss_mode_typo", "config", "c.yaml", _verl(policy_loss="{loss_mode: vanila}"), "loss_mode must be one of"),
    Case("agg_mode_typo", "config", "c.yaml", _verl(loss_agg_mode="token_mean"), "loss_agg_mode must be one of"),
    Case("epochs_zero", "config", "c.yaml", _verl(ppo_epochs=0), "ppo_epochs must be an integer > 0"),
    Case("epochs_float", "config", "c.yaml", _verl(ppo_epochs=1.5), "ppo_epochs must be an integer"),
    Case("mini_null", "config", "c.yaml", _verl(ppo_mini_batch_size="null"), "got null"),
    Case("yaml_int_5000_digits", "config", "c.yaml", b"epsilon: " + b"9" * 5000 + b"\n", "YAML cannot read"),
    Case("json_int_5000_digits", "config", "c.json", b'{"epsilon": ' + b"9" * 5000 + b"}", "JSON cannot read"),
    Case(
        "override_int_5000_digits",
        "config",
        "c.txt",
        b"actor_rollout_ref.actor.ppo_epochs=" + b"9" * 5000,
        "ppo_epochs must be an integer > 0 and <= 2147483647",
    ),
    Case(
        "batch_too_large",
        "config",
        "c.yaml",
        b"data:\n  train_batch_size: 1" + b"0" * 40 + b"\n",
        "train_batch_size must be an integer > 0 and <= 2147483647",
    ),
    Case("no_known_keys", "config", "c.yaml", b"model: qwen\nlr: 1e-6\n", "no verl keys"),
    Case(
        "mixed_keys",
        "config",
        "c.yaml",
        b"epsilon: 0.2\nactor_rollout_ref:\n  actor:\n    clip_ratio: 0.2\n",
        "mixes verl keys",
    ),
    Case("too_big", "config", "c.yaml", b"# padding\n" * (MAX_CONFIG_BYTES // 10 + 1), "limit for a config"),
    Case("unterminated_quote", "config", "c.txt", b"data.train_batch_size=512 trainer.name='abc\n", "cannot be split"),
    Case("bad_override_key", "config", "c.txt", b"1abc.x=2\n", "is not a hydra override"),
    Case(
        "no_overrides",
        "config",
        "c.txt",
        b"python3 -m verl.trainer.main_ppo\n",
        "has no settings: no key=value overrides",
    ),
    Case(
        "override_bad_value",
        "config",
        "c.sh",
        b"actor_rollout_ref.actor.clip_ratio_low=$CLIP\n",
        "clip_ratio_low must be a finite number",
    ),
]


# --------------------------------------------------------------------------------------------- rollouts
def _good(**changes):
    arrays = random_batch(seed=0, b=6, t=8)
    arrays.update(changes)
    return {k: v for k, v in arrays.items() if v is not None}


def _with(key, fn):
    arrays = _good()
    arrays[key] = fn(arrays[key].copy())
    return arrays


def _set_first(value):
    def fn(a):
        a[0, 0] = value
        return a

    return fn


def _npz_lying_zip_size() -> bytes:
    data = bytearray(npz_bytes(**_good()))
    i = data.find(b"PK\x01\x02")  # central directory: uncompressed size at offset 24
    data[i + 24 : i + 28] = struct.pack("<I", 0xF0000000)
    return bytes(data)


def _npz_lying_npy_header() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (2**20, 2**20)})
        zf.writestr("old_log_prob.npy", header.getvalue() + b"\x00" * 64)
    return buf.getvalue()


def _npz_raw_member() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("old_log_prob.npy", b"not numpy at all")
    return buf.getvalue()


def _npz_object_array() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, old_log_prob=np.array([{"__reduce__": "os.system"}], dtype=object))
    return buf.getvalue()


def _safetensors_header(header: bytes, payload: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + payload


def _parquet_truncated() -> bytes:
    data = parquet_bytes({"old_log_prob": [[-0.1, -0.2]], "advantages": [1.0]})
    return data[: len(data) // 2] + b"PAR1"


def _jsonl_rows(**changes):
    rows = [
        {"old_log_prob": [-0.1, -0.5, -2.0], "log_prob": [-0.2, -0.4, -2.1], "advantages": 1.0},
        {"old_log_prob": [-0.3, -0.01], "log_prob": [-0.3, -0.02], "advantages": -1.0},
    ]
    rows[1].update(changes)
    return jsonl_bytes(rows)


def _jsonl_too_wide() -> bytes:
    rows = [{"old_log_prob": [-0.1], "advantages": 0.5}] * 10_000
    rows.append({"old_log_prob": [-0.1] * 7_000, "advantages": 0.5})
    return jsonl_bytes(rows)


PICKLED = pickle.dumps({"old_log_prob": np.zeros((2, 2))}, protocol=4)
GOOD_NPZ = npz_bytes(**_good())

ROLLOUT_CASES = [
    Case("npz_empty", "rollouts", "r.npz", b"", "is empty"),
    Case("pickle_as_npz", "rollouts", "r.npz", PICKLED, "pickle"),
    Case("pickle2_as_npz", "rollouts", "r.npz", pickle.dumps([1, 2], protocol=2), "pickle"),
    Case("pickle5_as_npz", "rollouts", "r.npz", pickle.dumps({"a": 1}, protocol=5), "pickle"),
    Case("pickle_as_safetensors", "rollouts", "r.safetensors", PICKLED, "pickle"),
    Case("pickle_as_parquet", "rollouts", "r.parquet", PICKLED, "pickle"),
    Case("pickle_as_jsonl", "rollouts", "r.jsonl", PICKLED, "pickle"),
    Case("npz_not_zip", "rollouts", "r.npz", b"hello, world", "no zip signature"),
    Case("npz_truncated", "rollouts", "r.npz", GOOD_NPZ[: len(GOOD_NPZ) // 2], "not a readable .npz"),
    Case("npz_object_array", "rollouts", "r.npz", _npz_object_array(), "object array"),
    Case("npz_raw_member", "rollouts", "r.npz", _npz_raw_member(), "not .npy data"),
    Case("npz_zip_bomb_size", "rollouts", "r.npz", _npz_lying_zip_size(), "unpacks to"),
    Case(
        "npz_huge_declared_shape",
        "rollouts",
        "r.npz",
        _npz_lying_npy_header(),
        "declares old_log_prob of shape (1048576, 1048576)",
    ),
    Case(
        "npz_missing_advantages",
        "rollouts",
        "r.npz",
        npz_bytes(**_good(advantages=None)),
        "lacks advantages (or advantage); it has [log_prob, old_log_prob, response_mask]",
    ),
    Case(
        "npz_missing_mask",
        "rollouts",
        "r.npz",
        npz_bytes(**_good(response_mask=None)),
        "lacks response_mask (or completion_mask); it has [advantages, log_prob, old_log_prob]",
    ),
    Case(
        "npz_string_dtype",
        "rollouts",
        "r.npz",
        npz_bytes(**_good(advantages=np.array([["a"] * 8] * 6))),
        "advantages in 'r.npz' must be numeric",
    ),
    Case(
        "npz_complex",
        "rollouts",
        "r.npz",
        npz_bytes(**_good(old_log_prob=np.ones((6, 8), dtype=complex))),
        "must be numeric",
    ),
    Case(
        "npz_int_log_prob",
        "rollouts",
        "r.npz",
        npz_bytes(**_good(log_prob=np.zeros((6, 8), dtype=np.int64))),
        "log_prob in 'r.npz' must be floating point",
    ),
    Case("npz_1d", "rollouts", "r.npz", npz_bytes(**_good(old_log_prob=np.zeros(8, np.float32))), "(batch, length)"),
    Case(
        "npz_3d",
        "rollouts",
        "r.npz",
        npz_bytes(**_good(old_log_prob=np.zeros((6, 8, 2), np.float32))),
        "(batch, length)",
    ),
    Case(
        "npz_zero_length",
        "rollouts",
        "r.npz",
        npz_bytes(**_good(old_log_prob=np.zeros((6, 0), np.float32))),
        "non-empty",
    ),
    Case(
        "npz_shape_mismatch",
        "rollouts",
        "r.npz",
        npz_bytes(**_good(log_prob=np.zeros((6, 7), np.float32))),
        "log_prob in 'r.npz' has shape (6, 7)",
    ),
    Case("npz_nan", "rollouts", "r.npz", npz_bytes(**_with("old_log_prob", _set_first(np.nan))), "NaN at (0, 0)"),
    Case(
        "npz_inf_adv",
        "rollouts",
        "r.npz",
        npz_bytes(**_with("advantages", _set_first(np.inf))),
        "advantages in 'r.npz' is not finite",
    ),
    Case(
        "npz_probabilities", "rollouts", "r.npz", npz_bytes(**_with("old_log_prob", np.exp)), "look like probabilities"
    ),
    Case(
        "npz_mask_two",
        "rollouts",
        "r.npz",
        npz_bytes(**_with("response_mask", _set_first(2.0))),
        "response_mask in 'r.npz' must be 0 or 1",
    ),
    Case("npz_mask_zero", "rollouts", "r.npz", npz_bytes(**_with("response_mask", np.zeros_like)), "selects no tokens"),
    Case("st_empty_header", "rollouts", "r.safetensors", b"\x01\x02\x03", "too short"),
    Case("st_header_too_long", "rollouts", "r.safetensors", struct.pack("<Q", 10**9) + b"{}", "bad header length"),
    Case("st_bad_json", "rollouts", "r.safetensors", _safetensors_header(b"{abc}"), "not a valid .safetensors"),
    Case(
        "st_huge_shape",
        "rollouts",
        "r.safetensors",
        _safetensors_header(
            b'{"old_log_prob":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,8]}}', b"\x00" * 8
        ),
        "declares old_log_prob of shape (1099511627776,)",
    ),
    Case("st_truncated", "rollouts", "r.safetensors", safetensors_bytes(**_good())[:-40], "not a valid .safetensors"),
    Case(
        "st_int_old",
        "rollouts",
        "r.safetensors",
        safetensors_bytes(**_good(old_log_prob=np.zeros((6, 8), np.int64))),
        "must be floating point",
    ),
    Case(
        "st_bool_adv",
        "rollouts",
        "r.safetensors",
        safetensors_bytes(**_good(advantages=np.ones((6, 8), bool))),
        "must be floating point",
    ),
    Case("parquet_no_magic", "rollouts", "r.parquet", b"PAR0 not parquet", "no PAR1 magic"),
    Case("parquet_garbage", "rollouts", "r.parquet", b"PAR1" + b"\x00\xff" * 50 + b"PAR1", "not a readable .parquet"),
    Case("parquet_truncated", "rollouts", "r.parquet", _parquet_truncated(), "not a readable .parquet"),
    Case(
        "parquet_strings",
        "rollouts",
        "r.parquet",
        parquet_bytes({"old_log_prob": [["a", "b"]], "advantages": [1.0]}),
        "must hold numbers",
    ),
    Case(
        "parquet_string_scalar",
        "rollouts",
        "r.parquet",
        parquet_bytes({"old_log_prob": [[-0.1]], "advantages": ["high"]}),
        "advantages in 'r.parquet' must hold numbers, got string (refused before decoding)",
    ),
    Case(
        "parquet_null_row",
        "rollouts",
        "r.parquet",
        parquet_bytes({"old_log_prob": [[-0.1], None], "advantages": [1.0, 1.0]}),
        "null row",
    ),
    Case(
        "parquet_null_inside",
        "rollouts",
        "r.parquet",
        parquet_bytes({"old_log_prob": [[-0.1, None]], "advantages": [1.0]}),
        "null value(s) inside",
    ),
    Case(
        "parquet_nested",
        "rollouts",
        "r.parquet",
        parquet_bytes({"old_log_prob": [[[-0.1], [-0.2]]], "advantages": [1.0]}),
        "must hold numbers",
    ),
    Case(
        "parquet_missing_adv",
        "rollouts",
        "r.parquet",
        parquet_bytes({"old_log_prob": [[-0.1]]}),
        "lacks advantages (or advantage); it has [old_log_prob]",
    ),
    Case("jsonl_non_utf8", "rollouts", "r.jsonl", b'{"old_log_prob": [-0.1]}\n\xff\xfe', "not UTF-8"),
    Case(
        "jsonl_bad_json", "rollouts", "r.jsonl", b'{"old_log_prob": [-0.1], \n', "line 1 of 'r.jsonl' is not valid JSON"
    ),
    Case("jsonl_list_line", "rollouts", "r.jsonl", b"[1, 2, 3]\n", "is list, not a JSON object"),
    Case("jsonl_strings", "rollouts", "r.jsonl", _jsonl_rows(old_log_prob=["a", "b"]), "must be a list of numbers"),
    Case(
        "jsonl_nested", "rollouts", "r.jsonl", _jsonl_rows(old_log_prob=[[-0.1], [-0.2]]), "must be a list of numbers"
    ),
    Case(
        "jsonl_null_inside", "rollouts", "r.jsonl", _jsonl_rows(old_log_prob=[-0.1, None]), "must be a list of numbers"
    ),
    Case("jsonl_dict_value", "rollouts", "r.jsonl", _jsonl_rows(advantages={"x": 1}), "must be a list of numbers"),
    Case(
        "jsonl_huge_int", "rollouts", "r.jsonl", _jsonl_rows(old_log_prob=[-(10**400), -1]), "must be a list of numbers"
    ),
    Case("jsonl_bools", "rollouts", "r.jsonl", _jsonl_rows(old_log_prob=[True, False]), "holds booleans"),
    Case(
        "jsonl_fields_differ",
        "rollouts",
        "r.jsonl",
        jsonl_bytes([{"old_log_prob": [-0.1], "advantages": 1.0}, {"old_log_prob": [-0.1]}]),
        "has fields",
    ),
    Case(
        "jsonl_length_mismatch",
        "rollouts",
        "r.jsonl",
        _jsonl_rows(log_prob=[-0.3]),
        "log_prob in row 1 of 'r.jsonl' has 1 values, old_log_prob has 2",
    ),
    Case("jsonl_blank", "rollouts", "r.jsonl", b"\n\n  \n", "has no JSON lines"),
    Case("jsonl_nan", "rollouts", "r.jsonl", b'{"old_log_prob": [NaN, -0.1], "advantages": 1.0}\n', "not finite"),
    Case(
        "jsonl_deep",
        "rollouts",
        "r.jsonl",
        b'{"old_log_prob": ' + b"[" * 100000 + b"]" * 100000 + b"}\n",
        "nested too deeply",
    ),
    Case("jsonl_too_many_padded", "rollouts", "r.jsonl", _jsonl_too_wide(), "pads to 10001×7000 tokens, over the"),
    Case(
        "jsonl_positive_logp",
        "rollouts",
        "r.jsonl",
        _jsonl_rows(old_log_prob=[0.5, -0.1]),
        "must hold log-probabilities <= 0",
    ),
    Case("suffix_pkl", "rollouts", "r.pkl", PICKLED, "allowed: .npz", app=False),
    Case("suffix_npy", "rollouts", "r.npy", b"\x93NUMPY", "allowed: .npz", app=False),
    Case("no_suffix", "rollouts", "rollouts", GOOD_NPZ, "has suffix '(none)'", app=False),
]

# ------------------------------------------------------------------------------ bombs and budget classes
CAP = Limits().max_tokens


def _parquet_rle_bomb() -> bytes:
    """A few kilobytes that decode to more values than the cap: dictionary + RLE pages of one repeated value."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = CAP + 1
    values = pa.array(np.zeros(n, np.float32))
    col = pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), values)
    buf = io.BytesIO()
    pq.write_table(
        pa.table({"old_log_prob": col, "advantages": pa.array([1.0])}), buf, use_dictionary=True, compression="zstd"
    )
    return buf.getvalue()


def _npz_compressed_bomb() -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(
        buf, old_log_prob=np.zeros((1024, CAP // 1024 + 1), np.float32), advantages=np.zeros(1024, np.float32)
    )
    return buf.getvalue()


def _npz_many_members() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(100):
            zf.writestr(f"m{i}.npy", b"")
    return buf.getvalue()


def _npz_repeated_member(second: str = "old_log_prob.npy") -> bytes:
    """A valid .npz plus a second member of the same array name (issue 36: np.load used one in silence)."""
    good = _good()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf, zipfile.ZipFile(io.BytesIO(npz_bytes(**good))) as src:
        for info in src.infolist():
            zf.writestr(info.filename, src.read(info.filename))
        shifted = io.BytesIO()
        np.save(shifted, good["old_log_prob"] - 5.0)
        if second in src.namelist():
            with pytest.warns(UserWarning, match="Duplicate name"):
                zf.writestr(second, shifted.getvalue())
        else:
            zf.writestr(second, shifted.getvalue())
    return buf.getvalue()


def _jsonl_long_line() -> bytes:
    return b'{"old_log_prob": [' + b"-0.1," * (7 * 2**20) + b'-0.1], "advantages": 1.0}\n'


LONG_LINE = _jsonl_long_line()
BUDGET_CASES = [
    Case("parquet_rle_bomb", "rollouts", "r.parquet", _parquet_rle_bomb(), f"stores {CAP + 1} values of old_log_prob"),
    Case("npz_compressed_bomb", "rollouts", "r.npz", _npz_compressed_bomb(), "declares old_log_prob of shape (1024,"),
    Case("npz_many_members", "rollouts", "r.npz", _npz_many_members(), "holds more than 64 archive members"),
    Case(
        "npz_repeated_member",
        "rollouts",
        "r.npz",
        _npz_repeated_member(),
        "holds the array 'old_log_prob' twice (members 'old_log_prob.npy' and 'old_log_prob.npy')",
    ),
    Case(
        "npz_member_with_and_without_suffix",
        "rollouts",
        "r.npz",
        _npz_repeated_member("old_log_prob"),
        "holds the array 'old_log_prob' twice (members 'old_log_prob.npy' and 'old_log_prob')",
    ),
    Case("jsonl_long_line", "rollouts", "r.jsonl", LONG_LINE, f"line 1 of 'r.jsonl' is {len(LONG_LINE) - 1} bytes"),
    Case("jsonl_many_empty_objects", "rollouts", "r.jsonl", b"{}\n" * (2**20 + 1), "over the 1048576-line limit"),
    Case(
        "jsonl_duplicate_key",
        "rollouts",
        "r.jsonl",
        b'{"old_log_prob": [-0.1], "advantages": 1.0, "advantages": -5.0}\n',
        "sets 'advantages' twice (1.0, then",
    ),
    Case(
        "json_duplicate_key",
        "config",
        "c.json",
        b'{"epsilon": 0.2, "epsilon": 5.0}',
        "sets 'epsilon' twice (0.2, then 5.0)",
    ),
    Case(
        "yaml_duplicate_key",
        "config",
        "c.yaml",
        b"epsilon: 0.2\nloss_type: dapo\nepsilon: 5.0\n",
        "sets 'epsilon' twice (lines 1 and 3)",
    ),
    Case("json_nested_and_dotted", "config", "c.json", b'{"a.b": 1, "a": {"b": 2}}', "sets 'a.b' twice"),
    Case("yaml_flow_list_1mib", "config", "c.yaml", b"a: [" + b"1," * 2**19 + b"1]\n", "more than 200000 YAML nodes"),
    Case(
        "yaml_250k_keys",
        "config",
        "c.yaml",
        b"".join(b"k%d: 1\n" % i for i in range(250_000)),
        "more than 200000 YAML nodes",
    ),
]

CASES = CONFIG_CASES + ROLLOUT_CASES + BUDGET_CASES


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_shared_core_raises_a_named_value_error(case):
    upload = (case.name, case.data)
    with pytest.raises(SanityInputError) as exc:
        report_from_uploads(**{case.target: upload})
    assert case.needle in str(exc.value)
    assert case.name in str(exc.value) or case.target == "config"  # rollout messages name the file


# A few representative cases through the two front ends: a decompression bomb, a YAML flood, a duplicate key,
# a python tag, a pickle.
REPRESENTATIVE = ["parquet_rle_bomb", "yaml_flow_list_1mib", "json_duplicate_key", "python_apply", "pickle_as_npz"]
BY_ID = {c.id: c for c in CASES}


# Each is a real `python -m divclip.cli` process (~0.6 s of CPU): a rollout and a config case in the fast loop.
FAST_IN_A_PROCESS = ("parquet_rle_bomb", "json_duplicate_key")


@pytest.mark.parametrize(
    "case_id", [c if c in FAST_IN_A_PROCESS else pytest.param(c, marks=pytest.mark.slow) for c in REPRESENTATIVE]
)
def test_the_cli_exits_2_with_one_line_and_no_traceback(case_id, tmp_path):
    case = BY_ID[case_id]
    path = tmp_path / case.name
    path.write_bytes(case.data)
    argv = [str(path)] if case.target == "config" else ["--rollouts", str(path)]
    run = subprocess.run(
        [sys.executable, "-m", "divclip.cli", "check", *argv], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr
    assert run.stderr.startswith("divclip: error: ") and run.stderr.count("\n") == 1 and case.needle in run.stderr


def test_the_cli_turns_every_case_into_exit_2_in_process(tmp_path, capsys):
    """The in-process CLI path (argument handling, path reading) for one config and one rollout case."""
    for case in (BY_ID["yaml_duplicate_key"], BY_ID["npz_compressed_bomb"]):
        path = tmp_path / case.name
        path.write_bytes(case.data)
        argv = ["check", str(path)] if case.target == "config" else ["check", "--rollouts", str(path)]
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and case.needle in err


@pytest.fixture(scope="module")
def page():

    at = sanity_page(60)
    at.run()
    assert not at.exception
    return at


@pytest.mark.parametrize("case_id", REPRESENTATIVE)
def test_the_page_shows_one_error_box_and_no_exception(page, case_id):
    case = BY_ID[case_id]
    other = "sanity_rollouts" if case.target == "config" else "sanity_config"
    page.file_uploader(key=other).set_value(None)
    page.file_uploader(key=f"sanity_{case.target}").set_value((case.name, case.data, "application/octet-stream"))
    page.run()
    assert not page.exception
    assert len(page.error) == 1 and case.needle in page.error[0].value


def test_the_page_turns_an_unexpected_exception_into_an_error_box(monkeypatch):
    """Not only ValueError: whatever the core raises becomes one error box (here a MemoryError)."""

    import divclip.sanity.report as report

    def boom(**kwargs):
        raise MemoryError("simulated")

    monkeypatch.setattr(report, "report_from_uploads", boom)
    at = sanity_page(60).run()
    at.file_uploader(key="sanity_config").set_value(("c.json", b'{"epsilon": 0.2}', "application/json"))
    at.run()
    assert not at.exception and len(at.error) == 1 and "MemoryError: simulated" in at.error[0].value


MEMORY_PROBE = textwrap.dedent("""
    import io, resource, sys
    import numpy as np
    import torch  # imported before the limit: its address-space reservation is not the check's memory
    from divclip.sanity.report import build_report
    from divclip.sanity.validation import Limits
    b = 1024
    t = Limits().max_tokens // b  # the largest batch accepted by default
    rng = np.random.default_rng(0)
    old = -rng.random((b, t), dtype=np.float32)
    buf = io.BytesIO()
    np.savez(buf, old_log_prob=old, log_prob=old - 0.01, advantages=rng.standard_normal(b).astype(np.float32),
             response_mask=np.ones((b, t), np.int8))
    data = buf.getvalue()
    del old, buf
    import gc; gc.collect()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + 2 * 2**30, hard))  # 2 GB more than the process holds now
    report = build_report(rollouts=data, rollouts_name="big.npz")
    print("ok", report["rollouts"]["tokens"] if "tokens" in report["rollouts"] else "")
""")


@pytest.mark.slow
def test_the_largest_accepted_batch_fits_in_2_gb():
    run = subprocess.run([sys.executable, "-c", MEMORY_PROBE], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stderr[-3000:]


def test_sources_never_unpickle_or_evaluate():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sources = sorted((root / "sanity").glob("*.py")) + [root / "app" / "views" / "sanity_check.py"]
    forbidden = (
        "import pickle",
        "pickle.load",
        "torch.load(",
        "eval(",
        "exec(",
        "yaml.load(",
        "yaml.unsafe_load",
        "allow_pickle=True",
        "yaml.Loader",
        "FullLoader",
        "UnsafeLoader",
    )
    for path in sources:
        text = path.read_text()
        for word in forbidden:
            assert word not in text, f"{path.name} contains {word!r}"
    loaders = (root / "sanity" / "loaders.py").read_text()
    assert "allow_pickle=False" in loaders
