"""Train, evaluate and save a Transformer text classifier.

    python -m keras_attention.recipes.classify --train-file texts.tsv  # your own data
    python -m keras_attention.recipes.classify                  # which language wrote a date
    python -m keras_attention.recipes.classify --preset imdb    # IMDB sentiment (download)
    python -m keras_attention.recipes.classify --help

Your own data: a UTF-8 text file of one example a line, `text<TAB>label`;
labels are any strings, and the set of them comes from the training file
(a label in the validation or test file that it does not have is an
error). Validation and test examples are held out of the training file by
a hash of the text unless you give `--validation-file` and `--test-file`.
Any TFDS data set works too: `--dataset tfds:NAME --text-key KEY
--label-key KEY` (a ClassLabel feature).

The default task (`multilingual_dates/language_id`) is generated on this
machine. Everything a run writes goes under `--output-dir`: the resolved
config, checkpoints, TensorBoard logs, `evaluation.json` (accuracy on the
test split), the model, its vocabulary and an attention map.
"""

import dataclasses
import json

import keras
import numpy as np
import tensorflow as tf

from keras_attention.data import datasets, text_files
from keras_attention.data.pipeline import classification_batches
from keras_attention.files import write_json
from keras_attention.models import build_transformer_classifier, transformer_classifier
from keras_attention.models.transformer_classifier import with_new_head
from keras_attention.recipes.config import (
    InitFromError,
    TrainingConfig,
    document_flags,
    flag,
    model_preset_flag,
)
from keras_attention.recipes.config import main as run_recipe
from keras_attention.recipes.init_from import initial_model, initial_run
from keras_attention.recipes.recipe import Data, Evaluation, Recipe, draw_self_attention
from keras_attention.recipes.tokenizing import train_tokenizer, warn_if_truncated
from keras_attention.run_files import RunFiles


@document_flags
@dataclasses.dataclass
class ClassifyConfig(TrainingConfig):
    """What `python -m keras_attention.recipes.classify` trains, evaluates and exports."""

    dataset: str = flag(
        "multilingual_dates/language_id",
        f"{', '.join(datasets.CLASSIFICATION)}, or tfds:NAME with --text-key and --label-key",
    )
    text_key: str | None = flag(None, "the text feature of --dataset tfds:NAME")
    label_key: str | None = flag(None, "the label feature of --dataset tfds:NAME")
    train_split: str = flag("train", "TFDS split to train on")
    validation_split: str = flag("validation", "TFDS split to watch during training")
    test_split: str = flag("test", "TFDS split to evaluate on")
    max_input_length: int = flag(
        64, "tokens kept per text; longer ones are truncated", positive=True
    )
    learning_rate: float = flag(1e-3, "peak learning rate (constant schedule)", positive=True)
    output_dir: str = flag("runs/classify", "where everything of this run is written")
    export_name: str = flag("classify", "the model's name in TF Serving")
    model_preset: str | None = model_preset_flag(
        {"transformer_classifier": transformer_classifier.PRESETS}
    )

    def model_presets(self):
        return transformer_classifier.PRESETS

    def __post_init__(self):
        super().__post_init__()
        datasets.check_name("--dataset", self.dataset, datasets.CLASSIFICATION)


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
        max_input_length=256,
        batch_size=32,
        epochs=2,
        output_dir="runs/classify_imdb",
    ),
}


def predict_labels(model, tokenizer, texts, config):
    """Python strings in, label ids out, in batches."""
    ids = tokenizer.tokenize(tf.constant(texts))[:, : config.max_input_length].to_tensor()
    logits = model.predict(ids, batch_size=256, verbose=0)
    return np.argmax(logits, axis=-1)


class ClassifyRecipe(Recipe):
    """Classification: one vocabulary and the label set from the training
    split, a Transformer classifier, accuracy on the test split."""

    config_class = ClassifyConfig
    model_name = "classifier"

    def load(self, split, splits=None, label_names=None):
        """The split's `(text, label id)` pairs, a `tf.data.Dataset`, and the
        label names: of `splits` (the user's files, see `read_files`) with
        the training file's `label_names`, or of the data set."""
        config = self.config
        if splits is not None:
            texts, labels = zip(*splits[split], strict=True)
            label_ids = {name: index for index, name in enumerate(label_names)}
            label_ids = [label_ids[label] for label in labels]
            return tf.data.Dataset.from_tensor_slices((list(texts), label_ids)), label_names
        return datasets.labelled_texts(
            config.dataset,
            getattr(config, f"{split}_split"),
            config.data_dir,
            keys=(config.text_key, config.label_key),
        )

    def read_labelled_files(self):
        """The files' `(text, label)` pairs (see `read_files`) and the label
        set, the training file's, which the validation and test files must
        keep to."""
        config = self.config
        examples, _ = text_files.read_columns(config.train_file, config.skip_bad_lines)
        label_names = sorted({label for _, label in examples})
        splits = self.read_files(
            lambda path: text_files.read_columns(path, config.skip_bad_lines, labels=label_names)
        )
        return splits, label_names

    def prepare(self, output_dir):
        config = self.config
        splits = label_names = None
        if config.train_file:
            splits, label_names = self.read_labelled_files()
        initial = initial_run(self.config, ("text",))
        if initial:
            tokenizers, self.config = initial
        if initial and splits is not None:
            label_names = self.initial_labels(label_names)
        train_pairs, label_names = self.load("train", splits, label_names)
        if initial and splits is None:
            self.initial_labels(label_names, fixed_order=True)
        if config.train_examples:
            train_pairs = train_pairs.take(config.train_examples)
        train_texts = [text.decode("utf-8") for text, _ in train_pairs.as_numpy_iterator()]
        config = self.choose_for_data(train_texts)
        if initial:
            tokenizer = tokenizers["text"]
            if getattr(tokenizer, "max_length", 0) > config.max_input_length:
                # A converted BERT's frames texts: `[CLS]` and `[SEP]` within --max-input-length.
                tokenizer = tokenizer.with_max_length(config.max_input_length)
        else:
            tokenizer = train_tokenizer(config, train_texts)
        warn_if_truncated("texts", tokenizer, train_texts, config.max_input_length)
        files = RunFiles(output_dir)
        tokenizer.save(files.vocabulary("text", config.tokenizer))
        write_json(files.labels, list(label_names))

        train_batches, validation = self.training_and_validation(
            lambda pairs, **batching: classification_batches(pairs, tokenizer, **batching),
            train_pairs,
            len(train_texts),
            self.load("validation", splits, label_names)[0],
        )
        return Data(
            config=config,
            tokenizer=tokenizer,
            label_names=list(label_names),
            train_batches=train_batches,
            validation=validation,
            test=self.load("test", splits, label_names)[0],
            description=f"{len(train_texts):,} training texts, {len(label_names)} classes",
        )

    def initial_labels(self, label_names, fixed_order=False):
        """The labels of a `--init-from` run: `label_names` (the training
        file's, or with `fixed_order` the data set's), in the run's order
        when they are the run's labels, whose classifier head is then kept.
        Other labels get a new head (`build_model`), said in one line."""
        labels_file = RunFiles(self.config.init_from).labels
        if not labels_file.is_file():
            raise InitFromError(
                f"--init-from {self.config.init_from} is not a classifier's run: "
                f"{labels_file} not found"
            )
        run_labels = json.loads(labels_file.read_text("utf-8"))
        label_names = list(label_names)
        if fixed_order:
            same = label_names == run_labels
        else:
            same = sorted(label_names) == sorted(run_labels)
        self.new_head = not same
        if same:
            return run_labels
        print(
            f"New labels ({', '.join(label_names)}) instead of the run's "
            f"({', '.join(run_labels)}): a new classifier head of {len(label_names)} classes, "
            "starting from zero"
        )
        return label_names

    def build_model(self, data):
        if data.config.init_from:
            model = initial_model(self.config)
            if self.new_head:
                model = with_new_head(model, len(data.label_names))
            return model
        return build_transformer_classifier(
            data.tokenizer.vocabulary_size,
            len(data.label_names),
            preset=data.config.model_preset,
            **data.config.model_overrides,
        )

    def loss_and_metrics(self, data):
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"]

    def evaluate(self, model, data, output_dir):
        """Accuracy on the test split, and a few examples."""
        config = data.config
        test_pairs = data.test.take(config.test_examples or -1)
        test = [(t.decode("utf-8"), int(label)) for t, label in test_pairs.as_numpy_iterator()]
        predictions = predict_labels(model, data.tokenizer, [t for t, _ in test], config)
        correct = int(sum(p == label for p, (_, label) in zip(predictions, test, strict=True)))
        print(f"\naccuracy on the test split: {correct / len(test):.2%} ({correct}/{len(test)})")
        names = data.label_names
        for (text, label), prediction in list(zip(test, predictions, strict=True))[:6]:
            mark = "ok " if prediction == label else "ERR"
            print(f"  {mark} {text[:60]!r:>50} -> {names[prediction]} (expected {names[label]})")
        results = {"accuracy": correct / len(test), "test_examples": len(test)}
        return Evaluation(results, test, list(predictions))

    def draw(self, model, output_dir, data, evaluation, export_path):
        """The last layer's self-attention over the first test text."""
        text = evaluation.examples[0][0]
        ids = data.tokenizer.tokenize(tf.constant([text]))[:, : data.config.max_input_length]
        title = f"{text[:40]} -> {data.label_names[evaluation.predictions[0]]}"
        return draw_self_attention(
            model, ids.to_tensor().numpy(), data.tokenizer.vocabulary, output_dir, title
        )


def main(argv=None):
    return run_recipe(ClassifyRecipe, PRESETS, argv, description=__doc__)


if __name__ == "__main__":
    main()
