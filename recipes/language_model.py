"""Train, evaluate and save a decoder-only Transformer language model.

    python -m keras_attention.recipes.language_model        # written dates, 28 languages
    python -m keras_attention.recipes.language_model --help

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
from keras_attention.data import datasets
from keras_attention.data.pipeline import language_model_batches
from keras_attention.data.tokenizers import START_ID
from keras_attention.models import build_transformer_lm
from keras_attention.recipes import common


@common.document_flags
@dataclasses.dataclass
class LanguageModelConfig(common.TrainingConfig):
    """What `python -m keras_attention.recipes.language_model` trains, evaluates and exports."""

    dataset: str = common.flag(
        "multilingual_dates",
        "TFDS name; its source or text side is the corpus",
        choices=sorted(datasets.TRANSLATION) + sorted(datasets.CLASSIFICATION),
    )
    prompt_tokens: int = common.flag(4, "tokens of each test text given as a prompt", positive=True)
    top_k: int = common.flag(5, "completions sample among the k most likely tokens", positive=True)
    output_dir: str = common.flag("runs/language_model", "where everything of this run is written")
    export_name: str = common.flag("language_model", "the model's name in TF Serving")


PRESETS = {
    # The default: written dates in 28 languages, by character (offline).
    "dates": {},
    # IMDB reviews by subword (download needed).
    "imdb": dict(
        dataset="imdb_reviews",
        tokenizer="subword",
        vocabulary_size=8000,
        max_length=256,
        batch_size=32,
        output_dir="runs/language_model_imdb",
    ),
}


def run(config):
    strategy, output_dir = common.start_run(config)

    def texts(split, count=None):
        corpus = datasets.plain_texts(config.dataset, split, config.data_dir)
        return corpus.take(count or -1)

    train_texts = texts("train", config.train_examples)
    train_strings = [t.decode("utf-8") for t in train_texts.as_numpy_iterator()]
    tokenizer = common.train_tokenizer(config, train_strings)
    common.warn_if_truncated("texts", tokenizer, train_strings, config.max_length - 1)
    tokenizer.save(output_dir / common.vocabulary_file(config, "text"))

    def train_batches(epoch):
        batches = language_model_batches(
            train_texts, tokenizer, **common.batching(config, len(train_strings), epoch)
        )
        return common.distribute(config, batches)

    validation = common.distribute(
        config, language_model_batches(texts("validation"), tokenizer, **common.batching(config))
    )

    with strategy.scope():
        model = build_transformer_lm(
            tokenizer.vocabulary_size,
            preset=config.model_preset,
            **config.model_overrides,
        )
        model.compile(
            optimizer=common.make_optimizer(config, model.model_dim),
            loss=common.MaskedSparseCrossentropy(),
            metrics=[common.MaskedAccuracy()],
            jit_compile=config.jit_compile,
        )
    print(
        f"language model ({config.model_preset}): {model.count_params():,} parameters, "
        f"{len(train_strings):,} training texts, strategy {config.strategy} "
        f"({strategy.num_replicas_in_sync} replicas), precision {config.precision}"
    )
    training_seconds = common.fit(model, train_batches, validation, config, output_dir)

    # Evaluation: the mean loss per real token of the test split, as perplexity.
    test_texts = texts("test", config.test_examples)
    test_loss = model.evaluate(
        language_model_batches(test_texts, tokenizer, **common.batching(config)),
        verbose=0,
        return_dict=True,
    )["loss"]
    results = {
        "perplexity": math.exp(test_loss),
        "test_loss": test_loss,
        "training_seconds": round(training_seconds, 1),
    }
    common.write_json(output_dir / "evaluation.json", results)
    model_path = output_dir / "model.keras"
    model.save(model_path)
    print(
        f"\nper-token perplexity on the test split: {results['perplexity']:.3f}, "
        f"trained in {training_seconds:.0f} s"
    )

    # Completions: the first tokens of test texts as prompts, sampled top-k.
    strings = [t.decode("utf-8") for t in test_texts.take(6).as_numpy_iterator()]
    prompts = tokenizer.tokenize(tf.constant(strings))[:, : config.prompt_tokens]
    prompts = tf.concat([tf.fill([len(strings), 1], START_ID), prompts.to_tensor()], axis=1)
    completions = decoding.sample(
        model, prompts.numpy(), config.max_length, top_k=config.top_k, seed=config.seed
    )
    prompt_texts = tokenizer.detokenize(prompts).numpy()
    completed = tokenizer.detokenize(np.asarray(completions)).numpy()
    for prompt, text in zip(prompt_texts, completed, strict=True):
        print(f"  {prompt.decode()!r:>12} -> {text.decode()!r}")

    export_path = common.export(config, output_dir, model, tokenizer)

    # One picture: the last layer's causal self-attention over a test text.
    text_ids = tokenizer.tokenize(tf.constant([strings[0]])).numpy()[0]
    ids = np.concatenate([[START_ID], text_ids[: config.max_length - 1]])[None]
    picture = common.draw_self_attention(
        model, ids, tokenizer.vocabulary, output_dir, title=strings[0]
    )
    common.print_outputs(output_dir, model_path, export_path, picture)
    return results


def main(argv=None):
    return common.main(LanguageModelConfig, PRESETS, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
