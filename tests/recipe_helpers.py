"""What the recipe tests share: tiny runs' flags and free ports for clusters."""

import socket


def tiny_flags(data_dir, output_dir, *extra, test_examples=24):
    """A recipe run small enough for a test: 256 training examples, one
    epoch of batches of 32 (flags given in `extra` come later and win).
    `data_dir` None leaves the TFDS data folder to TFDS (TFDS_DATA_DIR)."""
    return [
        *(["--data-dir", str(data_dir)] if data_dir is not None else []),
        "--output-dir",
        str(output_dir),
        "--train-examples",
        "256",
        "--test-examples",
        str(test_examples),
        "--epochs",
        "1",
        "--batch-size",
        "32",
        *extra,
    ]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def check_a_tiny_translate_run(output_dir, printed, decoding):
    """What a finished tiny translate run (`tiny_flags`, 24 test examples)
    leaves: its config, evaluation (by `decoding`), a model that reloads,
    vocabularies, the attention map, TensorBoard logs, and a servable export
    that translated as the model did. Returns the run's config."""
    import json

    import keras
    import numpy as np
    import tensorflow as tf

    import keras_attention  # noqa: F401  (registers the models for loading)

    assert "exact match" in printed
    config = json.loads((output_dir / "config.json").read_text())
    assert config["train_examples"] == 256 and config["output_dir"] == str(output_dir)
    results = json.loads((output_dir / "evaluation.json").read_text())
    assert results["test_examples"] == 24 and 0.0 <= results["exact_match"] <= 1.0
    assert results["decoding"] == decoding

    keras.config.set_dtype_policy("float32")
    model = keras.saving.load_model(output_dir / "model.keras")
    ids = np.array([[5, 6, 7]])
    assert model({"source_ids": ids, "target_ids": ids}).shape[:2] == (1, 3)
    assert (output_dir / "source_vocabulary.txt").read_text().startswith("<pad>\n<s>\n")
    assert (output_dir / "attention.png").read_bytes()[:8] == PNG_MAGIC
    assert any((output_dir / "logs").rglob("events.out.tfevents.*"))

    # The run ends with a servable export that translates as the model did.
    version = output_dir / "serving" / "translate" / "1"
    assert f"Translated by the export in {version}" in printed
    assert "translates these differently" not in printed
    metadata = json.loads((version / "assets.extra" / "keras_attention.json").read_text())
    assert metadata["config"] == config and metadata["beam_size"] == config["beam_size"]
    served = tf.saved_model.load(str(version))
    answer = served.signatures["serving_default"](text=tf.constant(["", "29.11.2026"]))
    assert answer["translation"].shape == (2,)
    return config
