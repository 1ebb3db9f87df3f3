"""Safe loaders for rollout files: per-token `old_log_prob`, `advantages`, `response_mask`, optional `log_prob`.

Formats (picked by the file name's suffix, then checked by magic bytes):
* `.npz`          numpy archive, read with `np.load(..., allow_pickle=False)` (object arrays are refused)
* `.safetensors`  read with `safetensors.torch.load` (bf16/fp16 become float32)
* `.parquet`      one row per sequence; list columns (ragged) or scalar columns; read with pyarrow
* `.jsonl`        one JSON object per line (a sequence); lists of numbers (ragged) or scalars
2-D formats hold (B, T) arrays; ragged rows are padded to the longest with `response_mask = 0` (a missing
`response_mask` in a ragged file means "every listed token counts"). `advantages` may also be one number per
sequence ((B,) arrays, or a scalar per row), broadcast over its tokens as GRPO does.

Nothing is ever unpickled or evaluated. The file size is checked before reading; the decoded size before
allocating, from the file's own metadata: npz member count, uncompressed member sizes and .npy header shapes;
safetensors header shapes; parquet value counts per column (rows × values × 8 bytes, not the encoded size, which
dictionary/RLE encoding makes tiny); JSONL line count and line length. Every problem raises `RolloutFileError`
naming the file and field; `divclip.sanity.validation` then checks shapes and values.
"""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import numpy as np

from divclip.engines.files import display_name, json_loads_unique, json_object_line, read_capped
from divclip.sanity.errors import RolloutFileError
from divclip.sanity.validation import FIELDS, Limits, Rollouts, field_names, too_many_tokens, validate

FORMATS = {".npz": "npz", ".safetensors": "safetensors", ".parquet": "parquet", ".jsonl": "jsonl"}
MAX_NPZ_MEMBERS = 64  # numpy writes one member per array; a rollout file has at most four
MAX_SAFETENSORS_HEADER = 2**20  # a few tensors' names, dtypes and shapes
MAX_JSONL_LINE_BYTES = 32 * 2**20  # one sequence: ~100 k tokens of three fields
MAX_JSONL_LINES = 2**20  # sequences

__all__ = ["FORMATS", "Limits", "Rollouts", "load_rollouts", "rollout_format"]


# ------------------------------------------------------------------------------------------ entry point
def load_rollouts(source, name: str | None = None, limits: Limits = Limits()) -> Rollouts:
    """Read and validate a rollout file given as a path or as bytes (then `name` picks the format)."""
    data, name = _read(source, name, limits)
    fmt = rollout_format(name)
    reader = {"npz": _read_npz, "safetensors": _read_safetensors, "parquet": _read_parquet, "jsonl": _read_jsonl}
    try:
        arrays, ragged, file_keys = reader[fmt](data, name, limits)
    except RolloutFileError as exc:
        if str(exc).startswith("rollout file has"):  # field_names: say which file
            raise RolloutFileError(str(exc).replace("rollout file", f"rollout file {name!r}", 1)) from None
        raise
    except (MemoryError, RecursionError, OverflowError) as exc:
        raise RolloutFileError(
            f"rollout file {name!r} is too large or too deeply nested to read ({type(exc).__name__})"
        ) from None
    return validate(arrays, name, fmt, ragged, limits, file_keys)


def rollout_format(name: str) -> str:
    suffix = Path(name).suffix.lower()
    if suffix not in FORMATS:
        raise RolloutFileError(
            f"rollout file {name!r} has suffix {suffix or '(none)'!r}; allowed: {', '.join(FORMATS)}"
        )
    return FORMATS[suffix]


def _read(source, name, limits: Limits) -> tuple[bytes, str]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        if name is None:
            raise RolloutFileError("rollout data given as bytes needs a file name (its suffix picks the format)")
        rollout_format(name)
        data = bytes(source)
    elif isinstance(source, (str, Path)):
        path = Path(source)
        name = display_name(name or path.name)
        rollout_format(name)
        data = read_capped(path, limits.max_bytes, "rollout file", RolloutFileError, " (raise it with --max-bytes)")
    else:
        raise RolloutFileError(f"rollout source must be a path or bytes, got {type(source).__name__}")
    if len(data) > limits.max_bytes:
        raise RolloutFileError(_too_big(name, len(data), limits))
    if not data:
        raise RolloutFileError(f"rollout file {name!r} is empty")
    if data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise RolloutFileError(f"rollout file {name!r} is a Python pickle: divclip never unpickles files")
    return data, name


def _too_big(name, size, limits: Limits) -> str:
    return f"rollout file {name!r} is {size} bytes, over the {limits.max_bytes}-byte limit (raise it with --max-bytes)"


# ---------------------------------------------------------------------------------------------- npz
def _read_npz(data: bytes, name: str, limits: Limits):
    if not data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        raise RolloutFileError(f"rollout file {name!r} is not an .npz archive (no zip signature)")
    _check_zip_member_count(data, name)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            total = sum(info.file_size for info in zf.infolist())
            if total > limits.max_bytes:
                raise RolloutFileError(
                    f"rollout file {name!r} unpacks to {total} bytes, over the {limits.max_bytes}-byte limit"
                )
            keys = [info.filename.removesuffix(".npy") for info in zf.infolist()]
            _refuse_repeated_members(zf, keys, name)
            wanted = field_names(keys)
            for info in zf.infolist():
                if info.filename.removesuffix(".npy") in wanted.values():
                    _check_npy_header(zf, info, name, limits)
        out = {}
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            for key, file_key in wanted.items():
                value = npz[file_key]
                if not isinstance(value, np.ndarray):  # an entry that is not .npy data comes back as bytes
                    raise RolloutFileError(f"{file_key} in {name!r} is not a numpy array")
                out[key] = value
    except RolloutFileError:
        raise
    except ValueError as exc:  # object arrays, bad .npy headers, truncated data
        raise RolloutFileError(f"rollout file {name!r} has an unreadable array: {exc}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, KeyError, NotImplementedError) as exc:
        raise RolloutFileError(f"rollout file {name!r} is not a readable .npz archive: {exc}") from None
    return out, False, keys


def _refuse_repeated_members(zf: zipfile.ZipFile, keys: list[str], name: str) -> None:
    """An archive holding one array name twice (`x.npy` twice, or `x` and `x.npy`): np.load would use one of
    them in silence."""
    seen: dict = {}
    for info, key in zip(zf.infolist(), keys):
        if key in seen:
            raise RolloutFileError(
                f"rollout file {name!r} holds the array {key!r} twice (members {seen[key]!r} and "
                f"{info.filename!r}): refused, since only one of them would be read; keep one"
            )
        seen[key] = info.filename


def _check_zip_member_count(data: bytes, name: str) -> None:
    """Refuse archives with more members than a rollout file has, counted in the archive's real central
    directory before zipfile builds an object per member (millions of tiny members would take gigabytes). The
    count in the end record is not trusted: zipfile reads entries until the directory's size is used up, so a
    record claiming 1 member may front 3 million. At most MAX_NPZ_MEMBERS + 1 entries are stepped over."""
    at = data.rfind(b"PK\x05\x06", max(0, len(data) - 65_557))
    if at < 0 or at + 22 > len(data):
        raise RolloutFileError(f"rollout file {name!r} is not a readable .npz archive (no end of central directory)")
    members, cd_size, cd_offset = struct.unpack("<HLL", data[at + 10 : at + 20])
    if 0xFFFF in (members,) or 0xFFFFFFFF in (cd_size, cd_offset):
        raise RolloutFileError(
            f"rollout file {name!r} is a ZIP64 archive (over 65535 members or 4 GiB): an .npz "
            f"of rollouts holds at most {len(FIELDS)} arrays and at most 1 GiB"
        )
    start = at - cd_size  # where zipfile looks too (it allows data before the archive)
    if start < 0:
        raise RolloutFileError(
            f"rollout file {name!r} is not a readable .npz archive (central directory size {cd_size} exceeds the file)"
        )
    count, pos = 0, start
    while pos < at:
        if data[pos : pos + 4] != b"PK\x01\x02" or pos + 46 > at:
            raise RolloutFileError(
                f"rollout file {name!r} is not a readable .npz archive (bad central directory entry at byte {pos})"
            )
        name_len, extra_len, comment_len = struct.unpack("<HHH", data[pos + 28 : pos + 34])
        pos += 46 + name_len + extra_len + comment_len
        count += 1
        if count > MAX_NPZ_MEMBERS:
            raise RolloutFileError(
                f"rollout file {name!r} holds more than {MAX_NPZ_MEMBERS} archive members in its central directory "
                f"(its end record claims {members}); an .npz of rollouts holds at most {len(FIELDS)} arrays"
            )


def _check_npy_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, limits: Limits) -> None:
    """Read one entry's .npy header (numpy's own parser, no pickle) and refuse object dtypes, more values than
    `limits.max_tokens`, and sizes that exceed the entry: numpy allocates the declared shape before it finds the
    data missing."""
    key = info.filename.removesuffix(".npy")
    with zf.open(info) as fh:
        try:
            version = np.lib.format.read_magic(fh)
        except ValueError:
            raise RolloutFileError(f"{key} in {name!r} is not .npy data") from None
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = reader(fh)
    if dtype.hasobject:
        raise RolloutFileError(f"{key} in {name!r} is an object array (pickled Python objects): refused")
    count = int(np.prod(shape, dtype=object))
    if count > limits.max_tokens:
        raise RolloutFileError(too_many_tokens(name, f"declares {key} of shape {shape} ({count} values)", limits))
    nbytes = count * dtype.itemsize
    if nbytes > info.file_size:
        raise RolloutFileError(
            f"{key} in {name!r} declares shape {shape} ({nbytes} bytes) but its entry holds {info.file_size} bytes"
        )


# -------------------------------------------------------------------------------------- safetensors
def _read_safetensors(data: bytes, name: str, limits: Limits):
    if len(data) < 8:
        raise RolloutFileError(f"rollout file {name!r} is too short for a .safetensors file ({len(data)} bytes)")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > len(data) - 8 or data[8:9] != b"{":
        raise RolloutFileError(f"rollout file {name!r} is not a .safetensors file (bad header length or header)")
    _check_safetensors_shapes(data[8 : 8 + header_len], name, limits)
    try:
        from safetensors.torch import load
    except ImportError:
        raise RolloutFileError("reading .safetensors needs the safetensors package: pip install safetensors") from None
    import torch

    try:
        tensors = load(data)
    except Exception as exc:  # SafetensorError and friends: the library's own validation
        raise RolloutFileError(f"rollout file {name!r} is not a valid .safetensors file: {exc}") from None
    out = {}
    for key, file_key in field_names(list(tensors)).items():
        t = tensors[file_key]
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()  # exact; the loss computes half precision in float32 anyway
        try:
            out[key] = t.numpy()
        except TypeError as exc:
            raise RolloutFileError(f"{key} in {name!r} has unsupported dtype {t.dtype}: {exc}") from None
    return out, False, list(tensors)


def _check_safetensors_shapes(header: bytes, name: str, limits: Limits) -> None:
    if len(header) > MAX_SAFETENSORS_HEADER:
        raise RolloutFileError(
            f"rollout file {name!r} has a {len(header)}-byte .safetensors header, over the "
            f"{MAX_SAFETENSORS_HEADER}-byte limit (a rollout file names a few tensors)"
        )
    try:
        meta = json_loads_unique(header.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # bad JSON, duplicate names, not UTF-8
        raise RolloutFileError(f"rollout file {name!r} is not a valid .safetensors file: header {exc}") from None
    if not isinstance(meta, dict):
        raise RolloutFileError(f"rollout file {name!r} is not a valid .safetensors file: header is not an object")
    for key in field_names([k for k in meta if k != "__metadata__"]).values():
        shape = meta.get(key, {}).get("shape") if isinstance(meta.get(key), dict) else None
        if isinstance(shape, list) and all(isinstance(n, int) and n >= 0 for n in shape):
            count = int(np.prod(shape, dtype=object))
            if count > limits.max_tokens:
                raise RolloutFileError(too_many_tokens(name, f"declares {key} of shape {tuple(shape)}", limits))


# ------------------------------------------------------------------------------------------ parquet
def _read_parquet(data: bytes, name: str, limits: Limits):
    if not (data.startswith(b"PAR1") and data.endswith(b"PAR1")):
        raise RolloutFileError(f"rollout file {name!r} is not a .parquet file (no PAR1 magic at both ends)")
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        raise RolloutFileError("reading .parquet needs pyarrow: pip install pyarrow") from None
    try:
        pf = pq.ParquetFile(io.BytesIO(data))
        keys = list(pf.schema_arrow.names)
        wanted = field_names(keys)
        present = list(wanted.values())
        _check_parquet_types(pf.schema_arrow, present, name, pa)
        _check_parquet_sizes(pf.metadata, present, name, limits)
        table = pf.read(columns=present)
        out = {}
        for key, file_key in wanted.items():
            col = table.column(file_key).combine_chunks()
            out[key] = _arrow_rows(col, key, name, pa, pc)
    except RolloutFileError:
        raise
    except Exception as exc:  # ArrowInvalid, ArrowTypeError, OSError on corrupt pages
        raise RolloutFileError(f"rollout file {name!r} is not a readable .parquet file: {exc}") from None
    return out, True, keys


def _check_parquet_types(schema, present: list[str], name: str, pa) -> None:
    """Refuse a field column that is not numbers (or lists of numbers) from the schema alone, before a page is
    decoded: a compressed string column of a few kilobytes can decode to gigabytes."""
    for key in present:
        t = schema.field(key).type
        inner = (
            t.value_type if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) else t
        )
        if not (_arrow_numeric(inner, pa) or pa.types.is_boolean(inner)):
            raise RolloutFileError(f"{key} in {name!r} must hold numbers, got {t} (refused before decoding)")


def _check_parquet_sizes(meta, present: list[str], name: str, limits: Limits) -> None:
    """Decoded sizes from the footer: values per column (a list column counts every element) and rows. The
    encoded sizes say nothing here: dictionary + RLE pages store 2^26 equal values in a few kilobytes."""
    if meta.num_rows > limits.max_tokens:
        raise RolloutFileError(too_many_tokens(name, f"has {meta.num_rows} rows", limits))
    paths = {meta.schema.column(j).path.split(".")[0]: j for j in range(meta.num_columns)}
    total = 0
    for key in present:
        j = paths.get(key)
        if j is None:
            continue
        values = sum(meta.row_group(i).column(j).num_values for i in range(meta.num_row_groups))
        if values > limits.max_tokens:
            raise RolloutFileError(too_many_tokens(name, f"stores {values} values of {key}", limits))
        stored = sum(meta.row_group(i).column(j).total_uncompressed_size for i in range(meta.num_row_groups))
        total += max(8 * (values + meta.num_rows), stored)  # float64 values and list offsets, or the pages'
        # own uncompressed size when larger (a claim the decoder holds the file to)
    if total > limits.max_bytes:
        raise RolloutFileError(
            f"rollout file {name!r} decodes to about {total} bytes, over the "
            f"{limits.max_bytes}-byte limit (raise it with --max-bytes)"
        )


def _arrow_rows(col, key, name, pa, pc):
    """A list column -> list of 1-D arrays; a numeric column -> 1-D array of per-row scalars."""
    if col.null_count:
        raise RolloutFileError(f"{key} in {name!r} has {col.null_count} null row(s)")
    t = col.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = t.value_type
        if not (_arrow_numeric(inner, pa) or (key == "response_mask" and pa.types.is_boolean(inner))):
            raise RolloutFileError(f"{key} in {name!r} must hold numbers, got lists of {inner}")
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(col)
        if flat.null_count:
            raise RolloutFileError(f"{key} in {name!r} has {flat.null_count} null value(s) inside its lists")
        values = flat.to_numpy(zero_copy_only=False)
        return np.split(values, np.cumsum(lengths)[:-1]) if len(lengths) else []
    if _arrow_numeric(t, pa) or (key == "response_mask" and pa.types.is_boolean(t)):
        return col.to_numpy(zero_copy_only=False)
    raise RolloutFileError(f"{key} in {name!r} must be a list of numbers per row (or a number), got {t}")


def _arrow_numeric(t, pa) -> bool:
    return pa.types.is_floating(t) or pa.types.is_integer(t)


# -------------------------------------------------------------------------------------------- jsonl
def _read_jsonl(data: bytes, name: str, limits: Limits):
    lines = data.count(b"\n") + 1
    if lines > MAX_JSONL_LINES + 1:
        raise RolloutFileError(
            f"rollout file {name!r} has {lines - 1} lines, over the {MAX_JSONL_LINES}-line limit "
            "(one line per sequence)"
        )
    rows: dict[str, list] = {}
    keys = None
    n = values = 0
    start = 0
    for lineno in range(1, lines + 1):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        raw, start = data[start:end], end + 1
        if len(raw) > MAX_JSONL_LINE_BYTES:
            raise RolloutFileError(
                f"line {lineno} of {name!r} is {len(raw)} bytes, over the "
                f"{MAX_JSONL_LINE_BYTES}-byte limit for one sequence"
            )
        line = _decode_line(raw, lineno, name)
        if not line.strip():
            continue
        obj = _json_line(line, lineno, name)
        present = tuple(field_names(obj).items())
        if keys is None:
            keys, file_keys = present, list(obj)
            rows = {k: [] for k, _ in keys}
        elif present != keys:
            raise RolloutFileError(
                f"line {lineno} of {name!r} has fields {[f for _, f in present]}, line 1 had {[f for _, f in keys]}"
            )
        for k, file_key in keys:
            row = _json_row(obj[file_key], k, lineno, name)
            values += row.size
            rows[k].append(row)
        if values > len(FIELDS) * limits.max_tokens:
            raise RolloutFileError(too_many_tokens(name, f"holds more than {values} values by line {lineno}", limits))
        n += 1
    if n == 0:
        raise RolloutFileError(f"rollout file {name!r} has no JSON lines")
    return rows, True, file_keys


def _decode_line(raw: bytes, lineno: int, name: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RolloutFileError(
            f"rollout file {name!r} is not UTF-8 text: byte 0x{raw[exc.start]:02x} on line {lineno}"
        ) from None


def _json_line(line: str, lineno: int, name: str) -> dict:
    return json_object_line(line, f"line {lineno} of {name!r}", RolloutFileError)


def _json_row(value, key, lineno, name):
    arr = np.asarray(value) if isinstance(value, (list, int, float, bool)) else None
    if arr is None or arr.ndim > 1 or arr.dtype.kind not in "biuf":
        what = type(value).__name__ if arr is None else f"{arr.ndim}-D {arr.dtype} data"
        raise RolloutFileError(
            f"{key} on line {lineno} of {name!r} must be a list of numbers (or a number), got {what}"
        )
    if arr.dtype.kind == "b" and key != "response_mask":
        raise RolloutFileError(f"{key} on line {lineno} of {name!r} holds booleans, not numbers")
    return arr
