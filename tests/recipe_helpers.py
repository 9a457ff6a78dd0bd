"""What the recipe tests share: tiny runs' flags and free ports for clusters."""

import socket

# The large tests that start clusters of processes run one after another,
# in one pytest-xdist worker (`pytest.mark.xdist_group(CLUSTERS)`): two at
# once would be four training processes on two cores.
CLUSTERS = "clusters"


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


def run_on_mock_data(main, preset, tmp_path, max_input_length, *extra, num_examples=40):
    """Runs a recipe's `main` with a TFDS preset on TFDS's mock data (the
    real data set is a download): `num_examples` generated examples a
    split, 1 epoch of batches of 8, a 40-piece vocabulary, 8 test
    examples. Returns the run's folder."""
    import tensorflow_datasets as tfds

    output_dir = tmp_path / "run"
    flags = [
        *("--preset", preset, "--data-dir", str(tmp_path / "tfds")),
        *("--output-dir", str(output_dir), "--vocabulary-size", "40", "--epochs", "1"),
        *("--batch-size", "8", "--max-input-length", str(max_input_length)),
        *("--test-examples", "8", *extra),
    ]
    with tfds.testing.mock_data(num_examples=num_examples, policy=tfds.testing.MockPolicy.USE_CODE):
        main(flags)
    return output_dir


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def attention_images(output_dir):
    """The images the recipe logged to TensorBoard in `logs/attention`, as
    `{tag: {step: decoded image [H, W, C]}}`."""
    import tensorflow as tf

    images = {}
    for path in sorted((output_dir / "logs" / "attention").glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                assert value.metadata.plugin_data.plugin_name == "images", value.tag
                width, height, png = tf.make_ndarray(value.tensor)  # TensorBoard's layout
                assert png[:8] == PNG_MAGIC, value.tag
                image = tf.io.decode_png(png).numpy()
                assert image.shape[:2] == (int(height), int(width)), value.tag
                images.setdefault(value.tag, {})[event.step] = image
    return images


def check_a_tiny_translate_run(output_dir, printed, decoding):
    """What a finished tiny translate run (`tiny_flags`, 24 test examples)
    leaves: its config, evaluation (by `decoding`), a model that reloads,
    vocabularies, the attention map, TensorBoard logs with attention images
    every epoch, and a servable export that translated as the model did.
    Returns the run's config."""
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
    # Three validation examples' attention, drawn at the end of every epoch.
    images = attention_images(output_dir)
    assert sorted(images) == [f"attention/example_{i}" for i in range(3)]
    for tag, by_epoch in images.items():
        assert sorted(by_epoch) == list(range(1, config["epochs"] + 1)), tag
        assert all(image.std() > 0 for image in by_epoch.values()), tag  # not blank

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


def check_language_model_export(version):
    """The language model's export in `version` answers on each of its three
    signatures (greedy, with options, sampled), a row a prompt."""
    import tensorflow as tf

    served = tf.saved_model.load(str(version))
    answer = served.signatures["serving_default"](prompt=tf.constant(["29 nov", ""]))
    assert answer["completion"].shape == (2,)
    with_options = served.signatures["complete_with_options"](
        prompt=tf.constant(["29 nov", ""]),
        beam_size=tf.constant([1, 2]),
        max_decoding_length=tf.constant([5, 3]),
    )
    assert with_options["completion"].shape == (2,)
    sampled = served.signatures["complete_by_sampling"](
        prompt=tf.constant(["29 nov", ""]),
        max_decoding_length=tf.constant([5, 3]),
        temperature=tf.constant([1.0, 0.0]),
        top_k=tf.constant([0, 0]),
        top_p=tf.constant([1.0, 1.0]),
        seed=tf.constant([1, 2]),
    )
    assert sampled["completion"].shape == (2,)
