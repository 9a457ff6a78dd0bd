"""TF Serving's layout on disk: `BASE/NAME/VERSION/`, written atomically;
warm-up records; a `models.config` for several models, and beside it the
`batching_parameters.txt` for TF Serving's `--enable_batching`.

A model server watching `BASE/NAME` loads the highest integer-named folder.
A version is written under a temporary name beside it (which the server
ignores: it is not an integer) and renamed into place only when complete, so
the server never sees half a version.
"""

import os
from pathlib import Path

import tensorflow as tf

from keras_attention.files import write_atomically, write_folder_atomically
from keras_attention.utils import check_positive_int

WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"


def versions(model_dir):
    """The integer versions already in `model_dir`, ascending."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir() if p.name.isdigit() and p.is_dir())


def next_version(model_dir):
    """One more than the highest version in `model_dir`, or 1."""
    existing = versions(model_dir)
    return existing[-1] + 1 if existing else 1


def write_version(model_dir, write, version=None, overwrite=False):
    """Calls `write(folder)` on a fresh temporary folder beside
    `model_dir/VERSION` and renames it into place once `write` returns.

    Args:
        model_dir: `BASE/NAME`; created if missing.
        write: function of one `Path` that fills the folder.
        version: positive int; by default the next free version.
        overwrite: replace an existing `version` (the old one is removed only
            after the new one is in place).

    Returns:
        The `Path` of the written version. On any error nothing is left.
    """
    model_dir = Path(model_dir)
    if version is None:
        version = next_version(model_dir)
    elif isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"`version` must be a positive integer. Received: version={version!r}")
    final = model_dir / str(version)
    if final.exists() and not overwrite:
        raise FileExistsError(
            f"{final} already exists; pass overwrite=True (--overwrite) to replace it, "
            "or leave out the version to write the next one"
        )
    return write_folder_atomically(final, write, replace=overwrite)


def write_warmup_requests(version_dir, requests, model_name):
    """Writes TF Serving warm-up records: one `PredictionLog` per request.

    Args:
        version_dir: the export folder (`.../NAME/VERSION` or its staging).
        requests: dict signature name -> dict input name -> value (a list of
            strings or a number), each sent as one Predict request.
        model_name: the model's name in TF Serving.
    """
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    path = Path(version_dir) / WARMUP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for signature_name, inputs in requests.items():
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name)
            )
            for input_name, value in inputs.items():
                request.inputs[input_name].CopyFrom(tf.make_tensor_proto(value))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            writer.write(log.SerializeToString())
    return path


def read_warmup_requests(path):
    """The `PredictRequest`s of a warm-up file, in order."""
    from tensorflow_serving.apis import prediction_log_pb2

    requests = []
    for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
        log = prediction_log_pb2.PredictionLog.FromString(record)
        requests.append(log.predict_log.request)
    return requests


BATCHING_FILE = "batching_parameters.txt"

# TF Serving's server-side batching, for these models on CPU:
# - max_batch_size 32: a batch's decoding loop runs until its longest answer
#   ends, so a larger batch makes short requests wait for long ones, and on
#   a CPU core 32 rows already keep the matrix products busy;
# - batch_timeout_micros 5000: a request waits at most 5 ms for others to
#   join its batch, small beside a translation's own time (tens of ms);
# - num_batch_threads: one batch at a time per CPU core of the server;
# - max_enqueued_batches 100: beyond 3,200 waiting requests, new ones are
#   refused at once (UNAVAILABLE) instead of waiting without bound.
BATCHING = {"max_batch_size": 32, "batch_timeout_micros": 5000, "max_enqueued_batches": 100}


def write_models_config(path, models, num_batch_threads=None):
    """Writes a TF Serving `--model_config_file` for several models, and
    beside it `batching_parameters.txt` for `--enable_batching
    --batching_parameters_file` (see `BATCHING` for the values and why).

    Args:
        path: the file to write (atomically).
        models: dict model name -> base path (`BASE/NAME`, as the server sees
            it, e.g. `/models/dates` inside a container).
        num_batch_threads: batches run at once: the server's CPU cores
            (default: this machine's).

    Returns:
        The text written (protobuf text format of `ModelServerConfig`).
    """
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    if not models:
        raise ValueError(f"`models` must name at least one model. Received: {models!r}")
    threads = check_positive_int("num_batch_threads", num_batch_threads or os.cpu_count() or 1)
    config = model_server_config_pb2.ModelServerConfig()
    for name, base_path in models.items():
        if not name or "/" in name:
            raise ValueError(f"A model name must be non-empty without '/'. Received: {name!r}")
        entry = config.model_config_list.config.add()
        entry.name = name
        entry.base_path = str(base_path)
        entry.model_platform = "tensorflow"
    text = text_format.MessageToString(config)
    write_atomically(path, text)
    batching = {**BATCHING, "num_batch_threads": threads}
    write_atomically(
        Path(path).parent / BATCHING_FILE,
        "".join(f"{name} {{ value: {value} }}\n" for name, value in batching.items()),
    )
    return text
