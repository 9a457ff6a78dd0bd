"""Train, evaluate and save a decoder-only Transformer language model.

    python -m keras_attention.recipes.language_model --train-file corpus.txt  # your own
    python -m keras_attention.recipes.language_model        # written dates, 28 languages
    python -m keras_attention.recipes.language_model --preset long_context  # 8,192 tokens
    python -m keras_attention.recipes.language_model --help

Your own data: a UTF-8 text file of one example a line (empty lines are left
out). Validation and test lines are held out of it by a hash of the line
unless you give `--validation-file` and `--test-file`. Any TFDS data set
works too: `--dataset tfds:NAME --text-key KEY`.

The default corpus is the source side of the offline dates task. A run
writes under `--output-dir` the resolved config, checkpoints, TensorBoard
logs, `evaluation.json` (per-token perplexity on the test split), the model,
its vocabulary, a few completions of test prompts and an attention map.
"""

import dataclasses
import math

import numpy as np
import tensorflow as tf

from keras_attention import decoding
from keras_attention.data import datasets, text_files
from keras_attention.data.pipeline import batch_rows, language_model_batches
from keras_attention.data.tokenizers import START_ID, prompt_start
from keras_attention.models import build_transformer_lm, transformer_lm
from keras_attention.recipes.config import (
    TrainingConfig,
    document_flags,
    flag,
    model_preset_flag,
)
from keras_attention.recipes.config import main as run_recipe
from keras_attention.recipes.init_from import initial_model, initial_run
from keras_attention.recipes.recipe import Data, Evaluation, Recipe, draw_self_attention
from keras_attention.recipes.tokenizing import train_tokenizer, warn_if_truncated
from keras_attention.recipes.training import count_batches
from keras_attention.run_files import RunFiles


@document_flags
@dataclasses.dataclass
class LanguageModelConfig(TrainingConfig):
    """What `python -m keras_attention.recipes.language_model` trains, evaluates and exports."""

    dataset: str = flag(
        "multilingual_dates",
        "a data set of the translate or classify recipe (its source or text side is the "
        "corpus), or tfds:NAME with --text-key",
    )
    text_key: str | None = flag(None, "the text feature of --dataset tfds:NAME")
    pack_texts: bool = flag(
        False,
        "join the texts into one stream and cut it into windows of exactly --max-input-length "
        "tokens (long-context training)",
    )
    chunk_size: int | None = flag(
        None,
        "attention in blocks of this many tokens, exact, in memory linear in --max-input-length "
        "(long contexts); None: dense",
        positive=True,
    )
    prompt_tokens: int = flag(4, "tokens of each test text given as a prompt", positive=True)
    max_decoding_length: int | None = flag(
        None,
        "the most tokens a completion has (the test split's, the export's, and the most a "
        "request may ask for); None: --max-input-length",
        positive=True,
    )
    top_k: int = flag(5, "completions sample among the k most likely tokens", positive=True)
    output_dir: str = flag("runs/language_model", "where everything of this run is written")
    export_name: str = flag("language_model", "the model's name in TF Serving")
    model_preset: str | None = model_preset_flag({"transformer_lm": transformer_lm.PRESETS})

    def model_presets(self):
        return transformer_lm.PRESETS

    def __post_init__(self):
        super().__post_init__()
        known = {**datasets.TRANSLATION, **datasets.CLASSIFICATION}
        datasets.check_name("--dataset", self.dataset, known)


PRESETS = {
    # The default: written dates in 28 languages, by character (offline).
    "dates": {},
    # The same corpus as one stream, in windows of 8,192 characters: a
    # context dense attention could not train on this machine (its scores
    # alone would be 1 GiB per layer), in blocks of 1,024. The modern
    # decoder (rotary positions, grouped-query heads, SwiGLU, RMS norms):
    # after the same 34 steps on 16,000 texts its test perplexity was 22.6,
    # the tiny decoder's 56.2, in 10% more time (both beside another job).
    "long_context": dict(
        model_preset="modern",
        pack_texts=True,
        max_input_length=8192,
        chunk_size=1024,
        batch_size=1,
        epochs=1,
        output_dir="runs/language_model_long",
    ),
    # IMDB reviews by subword (download needed).
    "imdb": dict(
        dataset="imdb_reviews",
        tokenizer="subword",
        vocabulary_size=8000,
        max_input_length=256,
        batch_size=32,
        output_dir="runs/language_model_imdb",
    ),
}


class LanguageModelRecipe(Recipe):
    """Language modelling: one vocabulary, a decoder-only Transformer,
    per-token perplexity on the test split and sampled completions."""

    config_class = LanguageModelConfig
    model_name = "language model"

    def texts(self, split, splits=None):
        """The split's texts, a `tf.data.Dataset` of strings: of `splits`
        (the user's files, see `read_files`), or of the data set."""
        config = self.config
        if splits is not None:
            return tf.data.Dataset.from_tensor_slices(splits[split])
        return datasets.plain_texts(config.dataset, split, config.data_dir, key=config.text_key)

    def prepare(self, output_dir):
        config = self.config
        splits = None
        if config.train_file:
            splits = self.read_files(lambda path: (text_files.read_lines(path), 0))
        train_texts = self.texts("train", splits).take(config.train_examples or -1)
        train_strings = [t.decode("utf-8") for t in train_texts.as_numpy_iterator()]
        initial = initial_run(self.config, ("text",))
        if initial:
            tokenizers, self.config = initial
        config = self.choose_for_data(train_strings)
        tokenizer = tokenizers["text"] if initial else train_tokenizer(config, train_strings)
        warn_if_truncated("texts", tokenizer, train_strings, config.max_input_length - 1)
        tokenizer.save(RunFiles(output_dir).vocabulary("text", config.tokenizer))

        if config.pack_texts:
            check_windows(tokenizer, train_strings, "training", config)
        train_batches, validation = self.training_and_validation(
            lambda texts, **batching: language_model_batches(
                texts, tokenizer, pack=config.pack_texts, **batching
            ),
            train_texts,
            len(train_strings),
            self.texts("validation", splits),
        )
        return Data(
            config=config,
            tokenizer=tokenizer,
            train_batches=train_batches,
            validation=validation,
            test=self.texts("test", splits),
            description=f"{len(train_strings):,} training texts",
        )

    def build_model(self, data):
        config = data.config
        if config.init_from:
            return initial_model(self.config)
        overrides = dict(config.model_overrides)
        if config.chunk_size is not None:
            overrides.setdefault("chunk_size", config.chunk_size)
        return build_transformer_lm(
            data.tokenizer.vocabulary_size, preset=config.model_preset, **overrides
        )

    def evaluate(self, model, data, output_dir):
        """The mean loss per real token of the test split, as perplexity; and
        completions of the first tokens of test texts, sampled top-k."""
        config, tokenizer = data.config, data.tokenizer
        test_texts = data.test.take(config.test_examples or -1)
        test_batches = language_model_batches(
            test_texts, tokenizer, pack=config.pack_texts, **self.batching()
        )
        test_loss = model.evaluate(
            test_batches,
            steps=count_batches(test_batches),  # else Keras warns it "ran out of data"
            verbose=0,
            return_dict=True,
        )["loss"]
        print(f"\nper-token perplexity on the test split: {math.exp(test_loss):.3f}")

        examples = [t.decode("utf-8") for t in test_texts.take(6).as_numpy_iterator()]
        prompts = tokenizer.tokenize(tf.constant(examples))[:, : config.prompt_tokens]
        start = tf.fill([len(examples), len(prompt_start(tokenizer))], START_ID)
        prompts = tf.concat([start, prompts.to_tensor()], 1)
        completions = decoding.sample(
            model,
            prompts.numpy(),
            config.max_decoding_length or config.max_input_length,
            top_k=config.top_k,
            seed=config.seed,
        )
        prompt_texts = tokenizer.detokenize(prompts).numpy()
        completed = [t.decode() for t in tokenizer.detokenize(np.asarray(completions)).numpy()]
        for prompt, text in zip(prompt_texts, completed, strict=True):
            print(f"  {prompt.decode()!r:>12} -> {text!r}")
        results = {"perplexity": math.exp(test_loss), "test_loss": test_loss}
        return Evaluation(results, examples, completed)

    def draw(self, model, output_dir, data, evaluation, export_path):
        """The last layer's causal self-attention over a test text."""
        text = evaluation.examples[0]
        text_ids = data.tokenizer.tokenize(tf.constant([text])).numpy()[0]
        start = np.array(prompt_start(data.tokenizer), "int32")
        ids = np.concatenate([start, text_ids[: data.config.max_input_length - len(start)]])[None]
        return draw_self_attention(model, ids, data.tokenizer.vocabulary, output_dir, title=text)


def check_windows(tokenizer, texts, split, config):
    """With --pack-texts, a split must fill at least one batch of windows."""
    tokens = sum(len(ids) + 2 for ids in tokenizer.tokenize(tf.constant(texts)).numpy())
    windows = tokens // (config.max_input_length + 1)
    rows = batch_rows(config.max_input_length, config.batch_size, config.batch_tokens)
    if windows < rows:
        batch = (
            f"--batch-tokens {config.batch_tokens} ({rows} windows)"
            if config.batch_tokens
            else f"--batch-size {config.batch_size}"
        )
        raise text_files.DataFileError(
            f"--pack-texts: the {split} split has {tokens:,} tokens, {windows} windows of "
            f"--max-input-length {config.max_input_length}, fewer than a batch of "
            f"{batch}; lower --max-input-length or the batch, or add texts"
        )


def main(argv=None):
    return run_recipe(LanguageModelRecipe, PRESETS, argv, description=__doc__)


if __name__ == "__main__":
    main()
