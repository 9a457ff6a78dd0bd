"""Train, evaluate and save a Transformer text classifier.

    python -m keras_attention.recipes.classify                  # which language wrote a date
    python -m keras_attention.recipes.classify --preset imdb    # IMDB sentiment (download)
    python -m keras_attention.recipes.classify --help

The default task (`multilingual_dates/language_id`) is generated on this
machine. Everything a run writes goes under `--output-dir`: the resolved
config, checkpoints, TensorBoard logs, `evaluation.json` (accuracy on the
test split), the model, its vocabulary and an attention map.
"""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from keras_attention.data import datasets
from keras_attention.data.pipeline import classification_batches
from keras_attention.models import build_transformer_classifier
from keras_attention.recipes import common


@common.document_flags
@dataclasses.dataclass
class ClassifyConfig(common.TrainingConfig):
    """What `python -m keras_attention.recipes.classify` trains, evaluates and exports."""

    dataset: str = common.flag(
        "multilingual_dates/language_id",
        "TFDS name of (text, label) pairs",
        choices=datasets.CLASSIFICATION,
    )
    train_split: str = common.flag("train", "TFDS split to train on")
    validation_split: str = common.flag("validation", "TFDS split to watch during training")
    test_split: str = common.flag("test", "TFDS split to evaluate on")
    max_length: int = common.flag(
        64, "tokens kept per text; longer ones are truncated", positive=True
    )
    learning_rate: float = common.flag(
        1e-3, "peak learning rate (constant schedule)", positive=True
    )
    output_dir: str = common.flag("runs/classify", "where everything of this run is written")
    export_name: str = common.flag("classify", "the model's name in TF Serving")


PRESETS = {
    # The default: which of 28 languages wrote a date (offline).
    "dates_language": {},
    # IMDB sentiment, as in the Keras and TF text-classification tutorials
    # (download needed); it has no validation split, so 10% of train is kept.
    "imdb": dict(
        dataset="imdb_reviews",
        train_split="train[:90%]",
        validation_split="train[90%:]",
        tokenizer="subword",
        vocabulary_size=8000,
        max_length=256,
        batch_size=32,
        epochs=2,
        output_dir="runs/classify_imdb",
    ),
}


def predict_labels(model, tokenizer, texts, config):
    """Python strings in, label ids out, in batches."""
    ids = tokenizer.tokenize(tf.constant(texts))[:, : config.max_length].to_tensor()
    logits = model.predict(ids, batch_size=256, verbose=0)
    return np.argmax(logits, axis=-1)


def run(config):
    strategy, output_dir = common.start_run(config)

    # Data and vocabulary (from the training split only).
    train_pairs, label_names = datasets.labelled_texts(
        config.dataset, config.train_split, config.data_dir
    )
    validation_pairs, _ = datasets.labelled_texts(
        config.dataset, config.validation_split, config.data_dir
    )
    if config.train_examples:
        train_pairs = train_pairs.take(config.train_examples)
    train_texts = [text.decode("utf-8") for text, _ in train_pairs.as_numpy_iterator()]
    tokenizer = common.train_tokenizer(config, train_texts)
    common.warn_if_truncated("texts", tokenizer, train_texts, config.max_length)
    tokenizer.save(output_dir / common.vocabulary_file(config, "text"))
    common.write_json(output_dir / "labels.json", list(label_names))

    def train_batches(epoch):
        pairs = classification_batches(
            train_pairs, tokenizer, **common.batching(config, len(train_texts), epoch)
        )
        return common.distribute(config, pairs)

    validation = common.distribute(
        config, classification_batches(validation_pairs, tokenizer, **common.batching(config))
    )

    with strategy.scope():
        model = build_transformer_classifier(
            tokenizer.vocabulary_size,
            len(label_names),
            preset=config.model_preset,
            **config.model_overrides,
        )
        model.compile(
            optimizer=common.make_optimizer(config, model.model_dim),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit_compile=config.jit_compile,
        )
    print(
        f"classifier ({config.model_preset}): {model.count_params():,} parameters, "
        f"{len(train_texts):,} training texts, {len(label_names)} classes, strategy "
        f"{config.strategy} ({strategy.num_replicas_in_sync} replicas), "
        f"precision {config.precision}"
    )
    training_seconds = common.fit(model, train_batches, validation, config, output_dir)

    # Evaluation on the test split.
    test_pairs, _ = datasets.labelled_texts(config.dataset, config.test_split, config.data_dir)
    test = [
        (t.decode("utf-8"), int(label))
        for t, label in test_pairs.take(config.test_examples or -1).as_numpy_iterator()
    ]
    predictions = predict_labels(model, tokenizer, [t for t, _ in test], config)
    correct = int(sum(p == label for p, (_, label) in zip(predictions, test, strict=True)))
    results = {
        "accuracy": correct / len(test),
        "test_examples": len(test),
        "training_seconds": round(training_seconds, 1),
    }
    common.write_json(output_dir / "evaluation.json", results)
    model_path = output_dir / "model.keras"
    model.save(model_path)

    print(
        f"\naccuracy on the test split: {results['accuracy']:.2%} ({correct}/{len(test)}), "
        f"trained in {training_seconds:.0f} s"
    )
    for (text, label), prediction in list(zip(test, predictions, strict=True))[:6]:
        mark = "ok " if prediction == label else "ERR"
        print(
            f"  {mark} {text[:60]!r:>50} -> {label_names[prediction]} "
            f"(expected {label_names[label]})"
        )

    export_path = common.export(config, output_dir, model, tokenizer, label_names=label_names)

    # One picture: the last layer's self-attention over the first test text.
    ids = tokenizer.tokenize(tf.constant([test[0][0]]))[:, : config.max_length].to_tensor()
    picture = common.draw_self_attention(
        model,
        ids.numpy(),
        tokenizer.vocabulary,
        output_dir,
        title=f"{test[0][0][:40]} -> {label_names[predictions[0]]}",
    )
    common.print_outputs(output_dir, model_path, export_path, picture)
    return results


def main(argv=None):
    return common.main(ClassifyConfig, PRESETS, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
