"""A small client for TF Serving's predict APIs, REST and gRPC.

    python -m keras_attention.export.client --model translate "29 novembre 2026"
    python -m keras_attention.export.client --model translate --grpc localhost:8500 \\
        --beam-size 4 "29 novembre 2026"      # asks translate_with_options
    python -m keras_attention.export.client --model lm \\
        --temperature 0.8 --top-p 0.9 --seed 7 "Once"   # asks complete_by_sampling

Both functions take the signature's inputs as a dict of columns, one value
per text each (a list of strings for `text` / `prompt`, lists of ints for
`beam_size` / `max_decoding_length`, of floats for `temperature` / `top_p`), and
return its outputs as numpy arrays, so `predict_rest(...)` and
`predict_grpc(...)` answer alike.
"""

import argparse
import json
import sys
import urllib.error
import urllib.request

import numpy as np

from keras_attention.renamed import warn_of_renamed_flags

REST_PORT, GRPC_PORT = 8501, 8500
# The options signatures' length input; exports made before its rename call it
# `max_length`.
LENGTH_INPUTS = ("max_decoding_length", "max_length")
RENAMED_FLAGS = {"--max-length": "--max-decoding-length"}


def predict_rest(
    inputs,
    model,
    host=f"localhost:{REST_PORT}",
    signature_name="serving_default",
    version=None,
    timeout=60.0,
    rows=False,
):
    """Calls `POST /v1/models/MODEL[/versions/V]:predict` with the columnar
    request format (`"inputs"`), or with `rows` the row format
    (`"instances"`: one object per text).

    Returns:
        dict output name -> numpy array (strings as `bytes`).

    Raises:
        RuntimeError: the server answered with an error (its message included).
    """
    path = f"/v1/models/{model}" + (f"/versions/{int(version)}" if version is not None else "")
    columns = {k: _to_json(v) for k, v in inputs.items()}
    if rows:
        instances = [
            dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)
        ]
        body = {"signature_name": signature_name, "instances": instances}
        predictions = _http(_post(host, path, body), host, timeout)["predictions"]
        if predictions and isinstance(predictions[0], dict):
            return {name: _from_json([p[name] for p in predictions]) for name in predictions[0]}
        (name,) = _output_names(host, path, signature_name, timeout)
        return {name: _from_json(predictions)}
    body = {"signature_name": signature_name, "inputs": columns}
    outputs = _http(_post(host, path, body), host, timeout)["outputs"]
    if not isinstance(outputs, dict):
        # A signature with one output is answered without its name.
        (name,) = _output_names(host, path, signature_name, timeout)
        outputs = {name: outputs}
    return {name: _from_json(value) for name, value in outputs.items()}


def _post(host, path, body):
    return urllib.request.Request(
        f"http://{host}{path}:predict",
        data=json.dumps(body).encode("utf-8"),
        headers={"Content-Type": "application/json"},
        method="POST",
    )


def _output_names(host, path, signature_name, timeout):
    """The signature's output names, from the model's metadata."""
    return list(_named(_signatures_rest(host, path, timeout), signature_name)["outputs"])


def _signatures_rest(host, path, timeout):
    """Signature name -> its definition (JSON), from the model's metadata."""
    metadata = _http(urllib.request.Request(f"http://{host}{path}/metadata"), host, timeout)
    return metadata["metadata"]["signature_def"]["signature_def"]


def _named(signatures, signature_name):
    """`signatures[signature_name]`, or an error that lists the signatures."""
    if signature_name not in signatures:
        raise RuntimeError(f"the model has no signature {signature_name!r}: {sorted(signatures)}")
    return signatures[signature_name]


def input_names(model, signature_name="serving_default", rest=None, grpc=None, version=None):
    """The signature's input names, from the model's metadata, over REST
    (`GET /v1/models/MODEL[/versions/V]/metadata`, `rest` its host:port)
    or gRPC (`PredictionService.GetModelMetadata`, `grpc` its target)."""
    return _named(served_signatures(model, rest, grpc, version), signature_name)


def served_signatures(model, rest=None, grpc=None, version=None):
    """Signature name -> its input names, for every signature the model
    serves, from its metadata (as `input_names` reads it)."""
    path = f"/v1/models/{model}" + (f"/versions/{int(version)}" if version is not None else "")
    if grpc is None:
        signatures = _signatures_rest(rest, path, timeout=60.0)
        return {name: list(signature["inputs"]) for name, signature in signatures.items()}
    import grpc as grpc_api
    from tensorflow_serving.apis import get_model_metadata_pb2, prediction_service_pb2_grpc

    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = model
    if version is not None:
        request.model_spec.version.value = int(version)
    with grpc_api.insecure_channel(grpc) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            response = stub.GetModelMetadata(request, timeout=60.0)
        except grpc_api.RpcError as error:
            raise RuntimeError(
                f"TF Serving at {grpc} answered {error.code().name}: {error.details()}"
            ) from None
    signatures = get_model_metadata_pb2.SignatureDefMap()
    response.metadata["signature_def"].Unpack(signatures)
    return {name: list(signature.inputs) for name, signature in signatures.signature_def.items()}


def options_signature(signatures, inputs):
    """The signature, of `signatures` (name -> its input names), that takes
    `inputs` and a length (`LENGTH_INPUTS`) and nothing else: a
    translator's `translate_with_options` or a language model's
    `complete_with_options` for a text and a beam size, its
    `complete_by_sampling` for a prompt and the sampling options."""
    for name, names in sorted(signatures.items()):
        others = set(names) - set(inputs)
        if set(inputs) <= set(names) and len(others) == 1 and others <= set(LENGTH_INPUTS):
            return name
    raise RuntimeError(
        f"the model has no signature that takes {', '.join(inputs)} and max_decoding_length: "
        f"{sorted(signatures)}"
    )


def _http(request, host, timeout):
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as error:
        message = error.read().decode("utf-8", "replace")
        raise RuntimeError(f"TF Serving at {host} answered {error.code}: {message}") from None


def predict_grpc(
    inputs,
    model,
    target=f"localhost:{GRPC_PORT}",
    signature_name="serving_default",
    version=None,
    timeout=60.0,
):
    """Calls `PredictionService.Predict` over an insecure gRPC channel.

    Returns:
        dict output name -> numpy array (strings as `bytes`).
    """
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature_name
    if version is not None:
        request.model_spec.version.value = int(version)
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(_to_numpy(value)))
    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            response = stub.Predict(request, timeout=timeout)
        except grpc.RpcError as error:
            raise RuntimeError(
                f"TF Serving at {target} answered {error.code().name}: {error.details()}"
            ) from None
    return {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}


def _to_numpy(value):
    """Python lists as the signatures' types: strings, int32 and float32
    (numpy's own defaults, int64 and float64, would be refused)."""
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (str, bytes)) for v in value):
            return np.array([v.encode("utf-8") if isinstance(v, str) else v for v in value], object)
        array = np.array(value)
        if array.dtype.kind == "f":
            return array.astype(np.float32)
        return array.astype(np.int32) if array.dtype.kind in "iu" else array
    return np.array(value, dtype=np.int32) if isinstance(value, int) else np.asarray(value)


def _to_json(value):
    """Strings that are not UTF-8 go as {"b64": ...}, as TF Serving's REST API asks."""
    import base64

    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode("ascii")}
    return value.item() if isinstance(value, np.generic) else value


def _from_json(value):
    array = np.array(value)
    if array.dtype.kind == "U":
        array = np.vectorize(lambda s: s.encode("utf-8"), otypes=[object])(array)
    return array


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_attention.export.client",
        description="Send texts to a model in TF Serving and print the answers.",
    )
    parser.add_argument("texts", nargs="+", help="the texts (sources, or prompts)")
    parser.add_argument("--model", required=True, help="the model's name in TF Serving")
    parser.add_argument("--rest", default=f"localhost:{REST_PORT}", help="REST host:port")
    parser.add_argument("--grpc", help="gRPC host:port (used instead of REST when given)")
    parser.add_argument(
        "--signature",
        help="signature name (default: serving_default, or with --beam-size the options "
        "signature, translate_with_options or complete_with_options)",
    )
    parser.add_argument(
        "--input",
        help="the text input's name (default: serving_default's, read from the model's "
        "metadata: text for translators and classifiers, prompt for language models)",
    )
    parser.add_argument(
        "--beam-size",
        type=int,
        help="beam size (default: the export's; with --max-decoding-length, needed)",
    )
    parser.add_argument(  # its name before (RENAMED_FLAGS), hidden from --help
        "--max-length", dest="max_decoding_length", type=int, help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--max-decoding-length",
        type=int,
        help="most tokens generated, up to the export's max_decoding_length (default: that, "
        "sent as 0; exports made before limits were checked read 0 as 1, so give those "
        "--max-decoding-length); with --beam-size or --temperature",
    )
    sampling = parser.add_argument_group(
        "sampling (a language model's complete_by_sampling signature)"
    )
    sampling.add_argument("--temperature", type=float, help="> 0 samples; <= 0 is greedy")
    sampling.add_argument("--top-k", type=int, default=0, help="0: no limit")
    sampling.add_argument("--top-p", type=float, default=1.0, help="1: no limit")
    sampling.add_argument("--seed", type=int, default=0, help="the same seed, the same text")
    parser.add_argument("--version", type=int, help="model version (default: the latest)")
    args = parser.parse_args(argv)
    warn_of_renamed_flags(sys.argv[1:] if argv is None else argv, RENAMED_FLAGS)
    if args.max_decoding_length is not None and args.beam_size is None and args.temperature is None:
        parser.error(
            "--max-decoding-length needs --beam-size (or --temperature): the options "
            "signature takes "
            "both, and the export's own beam size is not in its metadata (it is in "
            "assets.extra/keras_attention.json in the export)"
        )
    options = args.temperature is not None or args.beam_size is not None
    try:
        # The signatures the export serves and their inputs, from its metadata.
        signatures = {}
        if args.input is None or options:
            signatures = served_signatures(args.model, args.rest, args.grpc, args.version)
        if args.input is None:
            (args.input,) = _named(signatures, "serving_default")

        inputs = {args.input: args.texts}
        n = len(args.texts)
        if args.temperature is not None:
            inputs["temperature"] = [args.temperature] * n
            inputs["top_k"] = [args.top_k] * n
            inputs["top_p"] = [args.top_p] * n
            inputs["seed"] = [args.seed] * n
        elif args.beam_size is not None:
            # The options signature takes both, one value per text (a length
            # of 0 is the export's own; one over it is refused by name).
            inputs["beam_size"] = [args.beam_size] * n
        if options:
            # The signature that takes these inputs and a length, and the
            # length by the name this export gives it.
            args.signature = args.signature or options_signature(signatures, inputs)
            length = [args.max_decoding_length or 0] * n  # 0: the export's own
            names = _named(signatures, args.signature)
            inputs.update({name: length for name in LENGTH_INPUTS if name in names})
        args.signature = args.signature or "serving_default"
        if args.grpc:
            outputs = predict_grpc(inputs, args.model, args.grpc, args.signature, args.version)
        else:
            outputs = predict_rest(inputs, args.model, args.rest, args.signature, args.version)
    except (RuntimeError, OSError) as error:
        raise SystemExit(f"error: {error}") from None
    for name, value in outputs.items():
        if value.dtype == object:
            value = np.vectorize(lambda b: b.decode("utf-8", "replace"))(value)
        print(f"{name}: {value.tolist()}")


if __name__ == "__main__":
    main()
