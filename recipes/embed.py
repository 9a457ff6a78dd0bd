"""Train, evaluate and save a Transformer sentence embedder on pairs of texts.

    python -m keras_attention.recipes.embed --train-file pairs.tsv   # your own pairs
    python -m keras_attention.recipes.embed --train-file pairs.tsv --init-from RUN
    python -m keras_attention.recipes.embed       # a written date and its ISO form
    python -m keras_attention.recipes.embed --help

Your own data: a UTF-8 text file of one example a line,
`anchor<TAB>positive`, two texts that should embed close together (a
question and its answer, a sentence and its translation), or
`anchor<TAB>positive<TAB>negative` with a hard negative, a text close to
the anchor that should embed apart (then every line of the file has one).
Validation and test pairs are held out of it by a hash of the anchor
unless you give `--validation-file` and `--test-file`. Any TFDS
translation data set works too, the source as the anchor and the target
as the positive: `--dataset tfds:NAME --source-key KEY --target-key KEY`.

Training is sentence-transformers' MultipleNegativesRankingLoss: in each
batch, every anchor is scored against every positive (and every hard
negative) by cosine similarity times `--similarity-scale` (20), and
learns to pick its own positive among them. From scratch the recipe
learns a tokeniser on the training texts and sizes the model for the
data; `--init-from RUN` fine-tunes a finished embedding run or one
converted by `python -m keras_attention.convert` (a sentence-transformers
checkpoint), keeping its tokeniser and model.

The run evaluates retrieval on the test split before and after training:
each anchor against every distinct positive of the split, recall@1 and
MRR@10. Everything it writes goes under `--output-dir`: the resolved
config, checkpoints, TensorBoard logs, `evaluation.json` (the retrieval
figures, before and after), the embedder (`model.keras`), its vocabulary,
the TF Serving export (`embed`: text in, vectors out) and an attention
map.
"""

import dataclasses
import functools

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_attention.data import datasets, text_files
from keras_attention.data.pipeline import batch_rows, bucket_of, length_buckets
from keras_attention.data.tokenizers import token_ids
from keras_attention.files import write_atomically
from keras_attention.models import build_transformer_embedder, transformer_embedder
from keras_attention.objectives import MultipleNegativesRankingLoss
from keras_attention.recipes.compiled_decoding import compile_decoding
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
class EmbedConfig(TrainingConfig):
    """What `python -m keras_attention.recipes.embed` trains, evaluates and exports."""

    dataset: str = flag(
        "multilingual_dates",
        f"{', '.join(datasets.TRANSLATION)} (the source as the anchor, the target as the "
        "positive), or tfds:NAME with --source-key and --target-key",
    )
    source_key: str | None = flag(None, "the anchor feature of --dataset tfds:NAME")
    target_key: str | None = flag(None, "the positive feature of --dataset tfds:NAME")
    similarity_scale: float = flag(
        20.0,
        "the loss multiplies the cosine similarities by this before its softmax "
        "(sentence-transformers' MultipleNegativesRankingLoss: 20)",
        positive=True,
    )
    learning_rate: float = flag(1e-3, "peak learning rate (constant schedule)", positive=True)
    eval_batch_size: int = flag(256, "batch size for embedding the test split", positive=True)
    output_dir: str = flag("runs/embed", "where everything of this run is written")
    export_name: str = flag("embed", "the model's name in TF Serving")
    model_preset: str | None = model_preset_flag(
        {"transformer_embedder": transformer_embedder.PRESETS}
    )

    def model_presets(self):
        return transformer_embedder.PRESETS

    def __post_init__(self):
        super().__post_init__()
        datasets.check_name("--dataset", self.dataset, datasets.TRANSLATION)


PRESETS = {
    # The default: a date written in one of 28 languages, and its ISO 8601
    # form (offline).
    "dates": {},
}


# --- The data: texts in files, batches of pairs ---


def read_examples(path, skip_bad_lines=False):
    """`(anchor, positive)` of every line of `path`, or `(anchor, positive,
    negative)` where the lines have a third column; and how many lines were
    skipped.

    A line without a tab, with an empty column, or with another number of
    columns than the file's first line (two, or three: a hard negative on
    every line or on none) is an error naming the file and line; with
    `skip_bad_lines` it is skipped and counted instead. A fourth and later
    column is ignored. Reading (byte-order mark, line ends, UTF-8 errors)
    is `keras_attention.data.text_files`' own.
    """
    examples, skipped, first = [], 0, None  # first: (line number, columns)
    for number, line in text_files._numbered_lines(path):
        if not line:
            continue
        texts = tuple(line.split("\t")[:3])
        problem = None
        if len(texts) < 2:
            problem = "has no tab"
        elif not all(text.strip() for text in texts):
            problem = "has an empty column"
        elif first is not None and len(texts) != first[1]:
            problem = (
                f"has {len(texts)} columns where line {first[0]} has {first[1]} (a hard "
                "negative on every line, or on none)"
            )
        if problem:
            if skip_bad_lines:
                skipped += 1
                continue
            raise text_files.DataFileError(
                f"{path}, line {number} {problem}: {line[:80]!r}. Each line must be "
                "`anchor<TAB>positive`, or `anchor<TAB>positive<TAB>negative` on every line; "
                "pass --skip-bad-lines to skip such lines."
            )
        if first is None:
            first = (number, len(texts))
        examples.append(texts)
    if not examples:
        raise text_files.DataFileError(f"{path} has no usable line ({skipped} skipped)")
    return examples, skipped


def pair_batches(
    examples,
    tokenizer,
    batch_size,
    max_length,
    shuffle_buffer=0,
    seed=0,
    drop_remainder=False,
    bucket_shapes=False,
    batch_tokens=None,
):
    """`(anchor, positive[, negative])` strings -> batches `(anchor ids
    [B, T], candidate ids [B, T', C])`: the anchors as the model reads
    them, and the positive (`[..., 0]`) and the hard negative (`[..., 1]`)
    of each, side by side on the last axis (C is 1 for pairs). The
    batching arguments are `keras_attention.data.pipeline`'s, and batch
    as its pipelines do: grouped by length (an example's by its longest
    text), each text truncated to `max_length`; with `bucket_shapes` (a
    compiled step) full batches padded to the next bucket length, the
    anchors and the candidates alike (one compiled step a bucket), and
    batches that keep every example to `max_length`, in order."""
    if shuffle_buffer:
        examples = examples.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=False)
    sides = len(examples.element_spec) - 1  # C: the positive, and a hard negative

    def encode(*texts):
        # One call for the example's texts: the tokeniser is traced once.
        ids = tokenizer.tokenize(tf.stack(texts))[:, :max_length]  # [1 + C, None]
        candidates = tf.ensure_shape(ids[1:].to_tensor(), [sides, None])  # [C, T'], 0-padded
        return ids[0], tf.transpose(candidates)

    def length(anchor_ids, candidate_ids):
        return tf.maximum(tf.shape(anchor_ids)[0], tf.shape(candidate_ids)[0])

    encoded = examples.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if bucket_shapes and not drop_remainder:
        rows = batch_rows(max_length, batch_size, batch_tokens)
        shapes = ([max_length], [max_length, sides])
        return encoded.padded_batch(rows, padded_shapes=shapes).prefetch(tf.data.AUTOTUNE)
    buckets = length_buckets(max_length)
    batched = encoded.bucket_by_sequence_length(
        element_length_func=length,
        bucket_boundaries=buckets[:-1],
        bucket_batch_sizes=[batch_rows(width, batch_size, batch_tokens) for width in buckets],
        drop_remainder=drop_remainder,
    )
    if bucket_shapes:

        def pad_to_bucket(anchor_ids, candidate_ids):
            width = bucket_of(length(anchor_ids[0], candidate_ids[0]), buckets)
            anchor_ids = tf.pad(anchor_ids, [[0, 0], [0, width - tf.shape(anchor_ids)[1]]])
            padding = [[0, 0], [0, width - tf.shape(candidate_ids)[1]], [0, 0]]
            return anchor_ids, tf.pad(candidate_ids, padding)

        batched = batched.map(pad_to_bucket)
    return batched.prefetch(tf.data.AUTOTUNE)


# --- The model that trains: the embedder, with the candidates in the loss ---


class InBatchNegatives(keras.Model):
    """Trains `embedder` (a `TransformerEmbedder`) with `model.fit` on
    `pair_batches`: its input is the anchors' ids, its output their
    vectors (the embedder's); `compute_loss` embeds the candidates' ids
    (the labels) with the same embedder, the same weights, and hands the
    compiled loss (`MultipleNegativesRankingLoss`) the vectors `[B, 1 + C,
    D]`. Everything else is the embedder's: its weights, its attention
    (`attention_scores`, which the recipes draw), and `save`, which saves
    the embedder alone, the run's `model.keras` that the export and
    `--init-from` read.

    Each replica scores its anchors against its own share of the batch's
    candidates (under `mirrored` and `multi_worker`, as sentence-transformers
    without `gather_across_devices`); JAX's `data_parallel` computes the
    whole batch at once, so there every anchor meets every candidate.
    """

    def __init__(self, embedder, **kwargs):
        super().__init__(**kwargs)
        self.embedder = embedder
        self.model_dim = embedder.model_dim  # the warm-up schedule's
        self.built = embedder.built

    def build(self, input_shape=None):
        self.built = True

    def call(self, token_ids, training=None):
        return self.embedder(token_ids, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        candidates = [self.embedder(y[..., side], training=training) for side in range(y.shape[-1])]
        vectors = ops.stack([y_pred, *candidates], axis=1)  # [B, 1 + C, D]
        if sample_weight is not None:
            # JAX's filled rows weigh 0 (`strategy.fill_and_share`), weights
            # shaped as the labels: one a row.
            while len(sample_weight.shape) > 1:
                sample_weight = sample_weight[:, 0]
        rows = ops.zeros_like(vectors[:, 0, 0])  # not read: one label a row
        return super().compute_loss(x, rows, vectors, sample_weight, training=training)

    def attention_scores(self, token_ids):
        return self.embedder.attention_scores(token_ids)

    def save(self, filepath, *args, **kwargs):
        """Saves the embedder alone (the trained model; this wrapper only
        feeds it pairs)."""
        return self.embedder.save(filepath, *args, **kwargs)


# --- Retrieval: each anchor against every positive ---


def embed_texts(embedder, tokenizer, texts, config):
    """Vectors `[N, D]` of `texts` (strings), embedded in batches of
    `--eval-batch-size` with the export's input steps (UTF-8 repair,
    tokenise, truncate) by the embedder compiled for the backend."""
    embed = compiled_embedder(embedder, config.max_input_length)
    vectors = []
    for start in range(0, len(texts), config.eval_batch_size):
        batch = tf.constant(texts[start : start + config.eval_batch_size])
        ids = token_ids(tokenizer, batch, config.max_input_length).numpy()
        vectors.append(np.asarray(embed(ids), dtype="float32"))
    return np.concatenate(vectors)


@functools.cache
def compiled_embedder(embedder, max_input_length):
    """`embedder`'s ids -> vectors compiled for the backend, once a run
    (before training, after, and for the export's check)."""
    return compile_decoding(embedder, lambda ids: embedder(ids, training=False), max_input_length)


def unit(vectors):
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def retrieval_ranks(anchor_vectors, candidate_vectors, targets, chunk=1024):
    """Each anchor's rank of its target among the candidates, by cosine
    similarity (1: the target scores highest), and the candidate it ranks
    first. A tie counts against the target: its rank is 1 + the other
    candidates that score at least as high, so a model that embeds every
    text alike ranks every target last."""
    anchors, candidates = unit(anchor_vectors), unit(candidate_vectors)
    ranks, first = [], []
    for start in range(0, len(anchors), chunk):
        scores = anchors[start : start + chunk] @ candidates.T  # [n, M]
        rows = np.arange(len(scores))
        own = scores[rows, targets[start : start + chunk]]
        ranks.append((scores >= own[:, None]).sum(axis=1))  # the target itself, and ties
        first.append(scores.argmax(axis=1))
    return np.concatenate(ranks), np.concatenate(first)


def retrieval_results(ranks, depth=10):
    """recall@1 (the share of anchors whose target ranks first) and
    MRR@`depth` (the mean of 1 / rank, 0 below `depth`)."""
    reciprocal = np.where(ranks <= depth, 1.0 / ranks, 0.0)
    return {
        "recall_at_1": round(float(np.mean(ranks == 1)), 4),
        f"mrr_at_{depth}": round(float(np.mean(reciprocal)), 4),
    }


@dataclasses.dataclass
class EmbedData(Data):
    """`Data`, and the test split's retrieval before training (`build_model`)."""

    retrieval_before: dict | None = None


class EmbedRecipe(Recipe):
    """Sentence embeddings: one vocabulary for every text, a Transformer
    embedder trained with in-batch negatives, retrieval on the test split
    before and after training."""

    config_class = EmbedConfig
    model_name = "embedder"

    def load(self, split, splits=None):
        """The split's `(anchor, positive[, negative])` string examples, a
        `tf.data.Dataset`: of `splits` (the user's files, see `read_files`),
        or of the data set (its source and target)."""
        config = self.config
        if splits is not None:
            columns = zip(*splits[split], strict=True)
            return tf.data.Dataset.from_tensor_slices(tuple(list(texts) for texts in columns))
        return datasets.translation_pairs(
            config.dataset, split, config.data_dir, keys=(config.source_key, config.target_key)
        )

    def prepare(self, output_dir):
        config = self.config
        splits = None
        if config.train_file:
            splits = self.read_files(lambda path: read_examples(path, config.skip_bad_lines))
        initial = initial_run(self.config, ("text",))
        if initial:
            tokenizers, self.config = initial
        train = self.load("train", splits)
        if config.train_examples:
            train = train.take(config.train_examples)
        examples = [tuple(t.decode("utf-8") for t in row) for row in train.as_numpy_iterator()]
        texts = [text for example in examples for text in example]
        config = self.choose_for_data(texts)
        if initial:
            tokenizer = tokenizers["text"]
            if getattr(tokenizer, "max_length", 0) > config.max_input_length:
                # A converted BERT's frames texts: `[CLS]` and `[SEP]` within --max-input-length.
                tokenizer = tokenizer.with_max_length(config.max_input_length)
        else:
            tokenizer = train_tokenizer(config, texts)
        warn_if_truncated("texts", tokenizer, texts, config.max_input_length)
        tokenizer.save(RunFiles(output_dir).vocabulary("text", config.tokenizer))

        train_batches, validation = self.training_and_validation(
            lambda pairs, **batching: pair_batches(pairs, tokenizer, **batching),
            train,
            len(examples),
            self.load("validation", splits),
        )
        negatives = " with hard negatives" if len(examples[0]) > 2 else ""
        return EmbedData(
            config=config,
            tokenizer=tokenizer,
            train_batches=train_batches,
            validation=validation,
            test=self.load("test", splits),
            description=f"{len(examples):,} training pairs{negatives}",
        )

    def build_model(self, data):
        config = data.config
        if config.init_from:
            embedder = initial_model(self.config)
            if getattr(embedder, "task", None) != "embedding":
                raise InitFromError(
                    f"--init-from {config.init_from} is not an embedder's run: its model is a "
                    f"{type(embedder).__name__} (task {getattr(embedder, 'task', None)!r}). "
                    "Give a run of this recipe, or a sentence-transformers checkpoint converted "
                    "by python -m keras_attention.convert"
                )
        else:
            # Unit vectors: a dot product is then the cosine the loss trains.
            overrides = {"unit_normalize": True, **config.model_overrides}
            embedder = build_transformer_embedder(
                data.tokenizer.vocabulary_size, preset=config.model_preset, **overrides
            )
        data.retrieval_before, _ = self.retrieval(embedder, data)
        print(f"Before training: {describe(data.retrieval_before)}")
        return InBatchNegatives(embedder)

    def loss_and_metrics(self, data):
        return MultipleNegativesRankingLoss(data.config.similarity_scale), []

    def test_pairs(self, data):
        """The test split's `(anchor, positive)` pairs (of the first
        `--test-examples`)."""
        test = data.test.take(data.config.test_examples or -1)
        return [tuple(t.decode("utf-8") for t in row[:2]) for row in test.as_numpy_iterator()]

    def retrieval(self, embedder, data):
        """recall@1 and MRR@10 of the test split's anchors, each against
        every distinct positive of the split, and the positive each
        retrieves first."""
        pairs = self.test_pairs(data)
        candidates = sorted({positive for _, positive in pairs})
        index = {text: i for i, text in enumerate(candidates)}
        targets = np.array([index[positive] for _, positive in pairs])
        anchor_vectors = embed_texts(embedder, data.tokenizer, [a for a, _ in pairs], data.config)
        candidate_vectors = embed_texts(embedder, data.tokenizer, candidates, data.config)
        ranks, first = retrieval_ranks(anchor_vectors, candidate_vectors, targets)
        results = {
            **retrieval_results(ranks),
            "test_examples": len(pairs),
            "candidates": len(candidates),
        }
        return results, [candidates[i] for i in first]

    def evaluate(self, model, data, output_dir):
        """Retrieval on the test split after training, beside the figures
        before it; `test_retrieval.tsv` holds each anchor's positive and
        the text it retrieved first."""
        after, retrieved = self.retrieval(model.embedder, data)
        before = data.retrieval_before
        print(
            f"\nRetrieval on the test split ({after['test_examples']:,} anchors, each against "
            f"the {after['candidates']:,} distinct positives): recall@1 "
            f"{before['recall_at_1']:.2%} -> {after['recall_at_1']:.2%}, MRR@10 "
            f"{before['mrr_at_10']:.4f} -> {after['mrr_at_10']:.4f} (before -> after training)"
        )
        pairs = self.test_pairs(data)
        for (anchor, positive), first in list(zip(pairs, retrieved, strict=True))[:6]:
            mark = "ok " if first == positive else "ERR"
            print(f"  {mark} {anchor[:40]!r:>42} -> {first[:40]!r} (expected {positive[:40]!r})")
        lines = [f"{a}\t{p}\t{r}\n" for (a, p), r in zip(pairs, retrieved, strict=True)]
        write_atomically(
            RunFiles(output_dir).folder / "test_retrieval.tsv",
            "anchor\tpositive\tretrieved\n" + "".join(lines),
        )
        results = {
            "recall_at_1": after["recall_at_1"],
            "mrr_at_10": after["mrr_at_10"],
            "before_training": {k: before[k] for k in ("recall_at_1", "mrr_at_10")},
            "test_examples": after["test_examples"],
            "candidates": after["candidates"],
        }
        return Evaluation(results, pairs, retrieved)

    def export(self, model, output_dir, data):
        return super().export(model.embedder, output_dir, data)

    def draw(self, model, output_dir, data, evaluation, export_path):
        """The last layer's self-attention over the first test anchor; with
        an export, first a check that it embeds as the model does."""
        texts = [anchor for anchor, _ in evaluation.examples[:8]]
        if export_path is not None:
            served = tf.saved_model.load(str(export_path)).signatures["embed"]
            exported = served(text=tf.constant(texts))["embeddings"].numpy()
            expected = embed_texts(model.embedder, data.tokenizer, texts, data.config)
            if not np.allclose(exported, expected, atol=1e-4):
                print("WARNING: the export embeds these test anchors differently from the model")
            else:
                print(
                    f"The export in {export_path} embeds the first test anchors as the model does"
                )
        ids = data.tokenizer.tokenize(tf.constant(texts[:1]))[:, : data.config.max_input_length]
        title = f"{texts[0][:40]} -> {evaluation.predictions[0][:40]}"
        return draw_self_attention(
            model.embedder, ids.to_tensor().numpy(), data.tokenizer.vocabulary, output_dir, title
        )


def describe(results):
    return (
        f"recall@1 {results['recall_at_1']:.2%}, MRR@10 {results['mrr_at_10']:.4f} on the test "
        f"split ({results['test_examples']:,} anchors, each against the "
        f"{results['candidates']:,} distinct positives)"
    )


def main(argv=None):
    return run_recipe(EmbedRecipe, PRESETS, argv, description=__doc__)


if __name__ == "__main__":
    main()
