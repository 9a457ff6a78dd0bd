"""A Hugging Face checkpoint folder, read with numpy alone.

`Checkpoint(folder)` reads `config.json`, `generation_config.json` and
`tokenizer_config.json` (the last two when present) and the weights:
`model.safetensors`, or the shards that `model.safetensors.index.json`
names. The safetensors format is a little-endian u64 header length, a JSON
header (each tensor's dtype, shape and byte range) and the raw bytes; it is
read here with numpy (and `ml_dtypes` for bfloat16, which TensorFlow
installs), so neither torch nor transformers is needed. Every problem is a
`CheckpointError` that names the file and, where there is one, the key.
"""

import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np

# safetensors' dtype names; floating-point weights are cast to float32.
DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
FLOATS = ("F64", "F32", "F16", "BF16")


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be converted exactly."""


def read_json(path, required=True):
    """The JSON object in `path`; None for a missing optional file."""
    path = Path(path)
    if not path.is_file():
        if required:
            raise CheckpointError(f"{path} not found: is {path.parent} a Hugging Face checkpoint?")
        return None
    try:
        value = json.loads(path.read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} must hold a JSON object; it holds {type(value).__name__}")
    return value


def read_safetensors(path):
    """`{name: np.ndarray}` of a `.safetensors` file, floats as float32."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} not found")
    data = path.read_bytes()
    try:
        (header_length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + header_length])
    except (struct.error, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is not a safetensors file: {error}") from None
    start = 8 + header_length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = (
                DTYPES[entry["dtype"]],
                entry["shape"],
                entry["data_offsets"],
            )
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(
                f"{path}: tensor {name!r} has a bad header entry {entry}"
            ) from None
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if end - begin != size or start + end > len(data):
            raise CheckpointError(
                f"{path}: tensor {name!r} (shape {shape}, {entry['dtype']}) does not fit its "
                f"bytes {begin}..{end} of {len(data) - start}: the file is truncated or corrupt"
            )
        array = np.frombuffer(
            data, dtype, count=size // np.dtype(dtype).itemsize, offset=start + begin
        )
        array = array.reshape(shape)
        tensors[name] = array.astype(np.float32) if entry["dtype"] in FLOATS else array
    return tensors


def read_weights(folder):
    """Every tensor of the checkpoint in `folder`, from `model.safetensors` or
    its shards."""
    folder = Path(folder)
    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.is_file():
        return read_safetensors(single)
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index} has no weight_map")
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            tensors.update(read_safetensors(folder / shard))
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise CheckpointError(f"{index} names tensors its shards lack: {missing[:5]}")
        return tensors
    others = sorted(p.name for p in folder.glob("*.bin")) + sorted(
        p.name for p in folder.glob("*.h5")
    )
    hint = f" (it has {', '.join(others)}: save it with safetensors)" if others else ""
    raise CheckpointError(
        f"{folder} has no model.safetensors or model.safetensors.index.json{hint}"
    )


class Weights:
    """A checkpoint's tensors, taken by name with their shape checked; what
    is never taken is an error (`check_all_taken`), so nothing a checkpoint
    holds is silently dropped."""

    def __init__(self, tensors, source):
        self.tensors, self.source, self.taken = dict(tensors), source, set()

    def __contains__(self, name):
        return name in self.tensors

    def take(self, name, shape):
        if name not in self.tensors:
            raise CheckpointError(f"{self.source}: tensor {name!r} not found")
        value = self.tensors[name]
        if tuple(value.shape) != tuple(shape):
            raise CheckpointError(
                f"{self.source}: tensor {name!r} has shape {tuple(value.shape)}; the config "
                f"says {tuple(shape)}"
            )
        self.taken.add(name)
        return value

    def dense(self, names, shape_in, shape_out, bias=True):
        """The `Linear` layers `names` (`weight [out, in]`, `bias [out]`) as
        one Dense's weights, `[kernel, bias]` (or `[kernel]`): several are
        joined along their outputs, as our layers fuse q, k and v.
        `shape_out` is one width, or one per name."""
        names = [names] if isinstance(names, str) else list(names)
        widths = (
            list(shape_out) if isinstance(shape_out, list | tuple) else [shape_out] * len(names)
        )
        pairs = list(zip(names, widths, strict=True))
        kernel = np.concatenate([self.take(f"{n}.weight", (w, shape_in)).T for n, w in pairs], 1)
        if not bias:
            return [kernel]
        return [kernel, np.concatenate([self.take(f"{n}.bias", (w,)) for n, w in pairs])]

    def norm(self, name, width, bias=True):
        """A layer norm's `[gamma, beta]` (an RMS norm's `[scale]`: no bias)."""
        weight = self.take(f"{name}.weight", (width,))
        return [weight, self.take(f"{name}.bias", (width,))] if bias else [weight]

    def skip(self, name):
        """Marks `name` as read elsewhere (a tied copy, a fixed table)."""
        self.taken.add(name)

    def check_all_taken(self):
        left = sorted(set(self.tensors) - self.taken)
        if left:
            raise CheckpointError(
                f"{self.source}: tensors this conversion does not know: {left[:8]}"
                + (f" and {len(left) - 8} more" if len(left) > 8 else "")
            )


class Checkpoint:
    """The files of a Hugging Face checkpoint folder."""

    def __init__(self, folder):
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise CheckpointError(f"{self.folder} is not a folder")
        self.config = read_json(self.folder / "config.json")
        self.generation_config = read_json(self.folder / "generation_config.json", False) or {}
        self.tokenizer_config = read_json(self.folder / "tokenizer_config.json", False) or {}

    def file(self, name, required=True):
        """The path of `name` in the folder; a CheckpointError if it is missing."""
        path = self.folder / name
        if required and not path.is_file():
            raise CheckpointError(f"{path} not found")
        return path

    def weights(self):
        return Weights(read_weights(self.folder), self.folder)

    def setting(self, key, default=None):
        """`key` of config.json, or of generation_config.json, or `default`."""
        if key in self.config and self.config[key] is not None:
            return self.config[key]
        return self.generation_config.get(key, default)

    def refuse(self, key, value, why):
        raise CheckpointError(f"{self.folder / 'config.json'}: {key}={value!r} {why}")
