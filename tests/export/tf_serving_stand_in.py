"""Runs exports the way TF Serving's model server does, in a process that
imports only `tensorflow` and `tensorflow_text` (never keras_attention).

TF Serving loads a SavedModel with the TF1 loader into a session (restoring
variables by name), feeds a request's tensors to the SignatureDef's input
names, fills inputs the request leaves out from the SignatureDef's
`defaults`, and fetches the output names. `ServedModel` does the same. This
machine cannot run the real model server (no Docker image or binary can be
fetched), so the tests use this stand-in, and the README shows the real
command.

    python tf_serving_stand_in.py check SPEC.pkl RESULT.pkl
        SPEC: {export path: [(signature name, {input name: array}), ...]}
        RESULT: {"modules": [...], export path: {"ops", "unregistered_ops",
                 "signatures", "shapes", "answers", "concurrent_answers"}}
        (an answer is {"error": message} where the graph refused the request)
        (the concurrent answers: every request again, from 8 threads at once)
    python tf_serving_stand_in.py serve BASE NAME[,NAME...] REST_PORT GRPC_PORT
        TF Serving's REST (`/v1/models/NAME[/versions/V]:predict`, `/metadata`)
        and gRPC `PredictionService.Predict` and `GetModelMetadata` for the
        versions under BASE/NAME.
"""

import base64
import json
import pickle
import sys
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the TF Text ops, as the model server links them)
from tensorflow.python.framework import op_def_registry


class ServedModel:
    """One SavedModel version, loaded and called as TF Serving does."""

    def __init__(self, path):
        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph)
        with self.graph.as_default():
            self.meta_graph = tf.compat.v1.saved_model.loader.load(
                self.session, ["serve"], str(path)
            )
        self.signatures = {
            name: signature
            for name, signature in self.meta_graph.signature_def.items()
            if not name.startswith("__")
        }

    def predict(self, signature_name, inputs):
        """`inputs`: dict name -> numpy array; returns dict name -> array."""
        signature = self.signatures[signature_name]
        unknown = set(inputs) - set(signature.inputs)
        missing = set(signature.inputs) - set(inputs) - set(signature.defaults)
        if unknown or missing:
            raise ValueError(
                f"input size does not match signature: extra {unknown}, missing {missing}"
            )
        for name, value in inputs.items():
            # The session refuses a tensor of another type (gRPC requests
            # come as typed tensors; REST's JSON is read as the signature's).
            expected = tf.as_dtype(signature.inputs[name].dtype)
            given = tf.string if value.dtype.kind in "OSU" else tf.as_dtype(value.dtype)
            if given != expected:
                raise ValueError(
                    f"Expects arg {name} to be {expected.name} but {given.name} is provided"
                )
        feeds = {signature.inputs[name].name: value for name, value in inputs.items()}
        for name, default in signature.defaults.items():
            feeds.setdefault(signature.inputs[name].name, tf.make_ndarray(default))
        fetches = {name: info.name for name, info in signature.outputs.items()}
        return self.session.run(fetches, feed_dict=feeds)

    def answer(self, signature_name, inputs):
        """`predict`'s outputs, or `{"error": message}` for a request the
        graph refuses (TF Serving's 400 answer)."""
        try:
            return self.predict(signature_name, inputs)
        except tf.errors.InvalidArgumentError as error:
            return {"error": error.message}

    def shapes(self):
        """`(signature, "inputs" or "outputs", name)` -> shape, -1 unknown."""
        return {
            (signature_name, kind, name): [dim.size for dim in info.tensor_shape.dim]
            if not info.tensor_shape.unknown_rank
            else None
            for signature_name, signature in self.signatures.items()
            for kind in ("inputs", "outputs")
            for name, info in getattr(signature, kind).items()
        }

    def op_types(self):
        """Every op type in the graph and in its functions."""
        graph_def = self.meta_graph.graph_def
        types = {node.op for node in graph_def.node}
        for function in graph_def.library.function:
            types.update(node.op for node in function.node_def)
        return types


def check(spec_path, result_path):
    spec = pickle.loads(Path(spec_path).read_bytes())
    result = {}
    for path, requests in spec.items():
        model = ServedModel(path)
        ops = model.op_types()
        result[path] = {
            "ops": sorted(ops),
            "unregistered_ops": sorted(op for op in ops if op_def_registry.get(op) is None),
            "signatures": {
                name: {
                    "inputs": sorted(signature.inputs),
                    "outputs": sorted(signature.outputs),
                    "defaults": {
                        k: tf.make_ndarray(v).tolist() for k, v in signature.defaults.items()
                    },
                }
                for name, signature in model.signatures.items()
            },
            "shapes": model.shapes(),
            "answers": [model.answer(name, inputs) for name, inputs in requests],
        }
        # As the server does under load: every request again, 8 at once on
        # the one session.
        with futures.ThreadPoolExecutor(max_workers=8) as pool:
            jobs = [pool.submit(model.answer, name, inputs) for name, inputs in requests]
            result[path]["concurrent_answers"] = [job.result() for job in jobs]
    result["modules"] = sorted(sys.modules)
    Path(result_path).write_bytes(pickle.dumps(result))


# --- serve: TF Serving's REST and gRPC predict APIs ---


def _from_json(value):
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value.encode("utf-8") if isinstance(value, str) else value


def _to_json(value):
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode("ascii")}
    return value


def _array(value, dtype):
    """A JSON input as TF Serving reads it: as the signature's type."""
    value = _from_json(value)
    if tf.as_dtype(dtype) == tf.string:
        return np.array(value, dtype=object)
    return np.array(value, dtype=tf.as_dtype(dtype).as_numpy_dtype)


def serve(base, names, rest_port, grpc_port):
    import grpc
    from tensorflow_serving.apis import (
        get_model_metadata_pb2,
        predict_pb2,
        prediction_service_pb2_grpc,
    )

    served = {
        model_name: {
            int(p.name): ServedModel(p)
            for p in (Path(base) / model_name).iterdir()
            if p.name.isdigit()
        }
        for model_name in names.split(",")
    }

    def find(model_name, version):
        if model_name not in served:
            raise LookupError(f"Servable not found for request: Latest({model_name})")
        models = served[model_name]
        version = max(models) if version is None else version
        if version not in models:
            raise LookupError(f"Servable not found for request: Specific({model_name}, {version})")
        return version, models[version]

    class Rest(BaseHTTPRequestHandler):
        def route(self):
            parts = self.path.strip("/").split("/")  # v1 models NAME[:predict] [versions V]
            last = parts[-1]
            action = last.split(":")[1] if ":" in last else last
            parts[-1] = last.split(":")[0]
            version = int(parts[4]) if len(parts) >= 5 and parts[3] == "versions" else None
            return parts[2], version, action

        def answer(self, status, body):
            data = json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            model_name, version, action = self.route()
            try:
                version, model = find(model_name, version)
            except LookupError as error:
                return self.answer(404, {"error": str(error)})
            signatures = {
                key: {"inputs": {k: {} for k in s.inputs}, "outputs": {k: {} for k in s.outputs}}
                for key, s in model.signatures.items()
            }
            self.answer(
                200,
                {
                    "model_spec": {"name": model_name, "version": str(version)},
                    "metadata": {"signature_def": {"signature_def": signatures}},
                },
            )

        def do_POST(self):
            model_name, version, action = self.route()
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            signature_name = request.get("signature_name", "serving_default")
            try:
                _, model = find(model_name, version)
                if "instances" in request:  # the row format: one object per row
                    rows = request["instances"]
                    if rows and not isinstance(rows[0], dict):  # one input, bare values
                        (input_name,) = model.signatures[signature_name].inputs
                        rows = [{input_name: row} for row in rows]
                    names = model.signatures[signature_name].inputs
                    columns = {k: [row[k] for row in rows] for k in names if rows}
                else:  # the columnar format
                    columns = request["inputs"]
                signature = model.signatures[signature_name]
                if set(columns) - set(signature.inputs):
                    raise ValueError(f"unknown inputs {set(columns) - set(signature.inputs)}")
                inputs = {k: _array(v, signature.inputs[k].dtype) for k, v in columns.items()}
                outputs = model.predict(signature_name, inputs)
            except LookupError as error:
                return self.answer(404, {"error": str(error)})
            except (ValueError, KeyError, tf.errors.OpError) as error:
                return self.answer(400, {"error": str(error)})
            body = {k: _to_json_tree(v.tolist()) for k, v in outputs.items()}
            if "instances" in request:
                rows = [
                    dict(zip(body, values, strict=True))
                    for values in zip(*body.values(), strict=True)
                ]
                predictions = rows if len(body) > 1 else next(iter(body.values()))
                return self.answer(200, {"predictions": predictions})
            self.answer(200, {"outputs": body if len(body) > 1 else next(iter(body.values()))})

        def log_message(self, *args):
            pass

    def _to_json_tree(value):
        return [_to_json_tree(v) for v in value] if isinstance(value, list) else _to_json(value)

    class Grpc(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):
            spec = request.model_spec
            try:
                _, model = find(spec.name, spec.version.value if spec.HasField("version") else None)
            except LookupError as error:
                context.abort(grpc.StatusCode.NOT_FOUND, str(error))
            inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
            try:
                outputs = model.predict(spec.signature_name or "serving_default", inputs)
            except (ValueError, KeyError, tf.errors.OpError) as error:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
            response = predict_pb2.PredictResponse()
            for key, value in outputs.items():
                response.outputs[key].CopyFrom(tf.make_tensor_proto(value))
            return response

        def GetModelMetadata(self, request, context):
            spec = request.model_spec
            try:
                version, model = find(
                    spec.name, spec.version.value if spec.HasField("version") else None
                )
            except LookupError as error:
                context.abort(grpc.StatusCode.NOT_FOUND, str(error))
            signatures = get_model_metadata_pb2.SignatureDefMap()
            for key, signature in model.signatures.items():
                signatures.signature_def[key].CopyFrom(signature)
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = spec.name
            response.model_spec.version.value = version
            response.metadata["signature_def"].Pack(signatures)
            return response

    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Grpc(), grpc_server)
    grpc_server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    grpc_server.start()
    rest_server = ThreadingHTTPServer(("127.0.0.1", int(rest_port)), Rest)
    print("serving", flush=True)
    rest_server.serve_forever()


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    {"check": check, "serve": serve}[command](*arguments)
