"""Train, evaluate and save a translation model.

    python -m keras_attention.recipes.translate --train-file pairs.tsv  # your own data
    python -m keras_attention.recipes.translate                 # Transformer, dates task
    python -m keras_attention.recipes.translate --preset dates_bahdanau
    python -m keras_attention.recipes.translate --help          # every flag

Your own data: a UTF-8 text file of one pair a line, `source<TAB>target`
(a third and later column, such as the Tatoeba/Anki files' attribution, is
ignored). Validation and test pairs are held out of it by a hash of the
source unless you give `--validation-file` and `--test-file`. With files and
no other flag, the recipe chooses a subword vocabulary, a model size and
beam search to suit the data, and says what it chose. Any TFDS data set
works too: `--dataset tfds:NAME --source-key KEY --target-key KEY`.

The default task (TFDS `multilingual_dates`) is generated on this machine, so
the default command needs no download. Everything a run writes goes under
`--output-dir`: the resolved config, checkpoints for automatic resume,
TensorBoard logs, the evaluation JSON, the model, its vocabularies and an
attention map.
"""

import dataclasses

import keras
import numpy as np
import sacrebleu
import tensorflow as tf

from keras_attention import decoding, visualize
from keras_attention.data import datasets, text_files
from keras_attention.data.pipeline import translation_batches
from keras_attention.data.placeholders import placeholder_survival
from keras_attention.data.tokenizers import END_ID, PAD_ID, token_ids
from keras_attention.files import write_atomically
from keras_attention.models import (
    build_seq2seq_attention,
    build_transformer,
    seq2seq_attention,
    transformer,
)
from keras_attention.objectives import MaskedAccuracy, MaskedSparseCrossentropy
from keras_attention.recipes.choices import batch_tokens_for
from keras_attention.recipes.compiled_decoding import compile_decoding
from keras_attention.recipes.config import (
    TrainingConfig,
    document_flags,
    flag,
    model_preset_flag,
)
from keras_attention.recipes.config import main as run_recipe
from keras_attention.recipes.init_from import initial_model, initial_run
from keras_attention.recipes.recipe import Data, Evaluation, Recipe
from keras_attention.recipes.time_budget import DECAY_SHARE
from keras_attention.recipes.tokenizing import train_tokenizer, warn_if_truncated
from keras_attention.run_files import RunFiles, decoding_limits
from keras_attention.tasks.translation import cross_attention

MODELS = {"transformer": build_transformer, "seq2seq_attention": build_seq2seq_attention}
MODEL_PRESETS = {"transformer": transformer.PRESETS, "seq2seq_attention": seq2seq_attention.PRESETS}


@document_flags
@dataclasses.dataclass
class TranslateConfig(TrainingConfig):
    """What `python -m keras_attention.recipes.translate` trains, evaluates and exports."""

    dataset: str = flag(
        "multilingual_dates",
        f"{', '.join(datasets.TRANSLATION)}, or tfds:NAME with --source-key and --target-key",
    )
    source_key: str | None = flag(None, "the source feature of --dataset tfds:NAME")
    target_key: str | None = flag(None, "the target feature of --dataset tfds:NAME")
    reverse: bool = flag(False, "swap source and target (WMT14 de-en read as en -> de)")
    shared_vocabulary: bool = flag(
        False,
        "one subword vocabulary for both languages, and with the transformer one embedding "
        "matrix for the source, the target and the output",
    )
    model: str = flag("transformer", "transformer or seq2seq_attention", choices=MODELS)
    model_preset: str | None = model_preset_flag(MODEL_PRESETS)
    label_smoothing: float = flag(0.0, "label smoothing of the loss (paper: 0.1)")
    beam_size: int | None = flag(
        None,
        "1: greedy decoding for evaluation and the export, >1: beam search; "
        "None: 1 for the dates task, 4 otherwise",
        positive=True,
    )
    max_decoding_length: int | None = flag(
        None,
        "the most tokens of a translation (the test split's, and the export's and the most "
        "a request may ask for); None: --max-input-length",
        positive=True,
    )
    length_penalty: float | None = flag(
        None,
        "beam search ranks a hypothesis by its log-probability divided by its length to "
        "this power (CTranslate2's and Hugging Face's length_penalty); None: beam search's "
        "default",
    )
    tune_decoding: bool = flag(
        True,
        "with beam search, after training: choose the --length-penalty and --beam-size not "
        "given by sacreBLEU on the validation split, for the test split and the export",
    )
    eval_batch_size: int = flag(256, "batch size for decoding the test split", positive=True)
    output_dir: str = flag("runs/translate", "where everything of this run is written")
    export_name: str = flag("translate", "the model's name in TF Serving")

    def model_presets(self):
        return MODEL_PRESETS[self.model]

    def __post_init__(self):
        super().__post_init__()
        datasets.check_name("--dataset", self.dataset, datasets.TRANSLATION)
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"--label-smoothing must be in [0, 1); got {self.label_smoothing}")


WMT14 = dict(
    dataset="wmt14_translate/de-en",
    reverse=True,  # English -> German, as in the paper
    tokenizer="subword",
    vocabulary_size=37000,  # the paper's shared source-target vocabulary
    shared_vocabulary=True,
    model_preset="base",
    max_input_length=256,
    batch_size=256,
    schedule="warmup",
    warmup_steps=4000,
    label_smoothing=0.1,
    beam_size=4,
)
PRESETS = {
    # The default: a tiny Transformer on the offline dates task.
    "dates": {},
    # Bahdanau-attention RNN on the same task.
    "dates_bahdanau": dict(
        model="seq2seq_attention",
        model_overrides={"attention": "bahdanau"},
        output_dir="runs/translate_bahdanau",
        # As measured before the Transformer's final decay (not measured with it).
        epochs=8,
        final_decay=0.0,
    ),
    # The tensorflow.org Transformer tutorial's data set (download needed).
    "ted_pt_en": dict(
        dataset="ted_hrlr_translate/pt_to_en",
        tokenizer="subword",
        vocabulary_size=8000,
        max_input_length=128,
        schedule="warmup",
        label_smoothing=0.1,
        epochs=20,
    ),
    # The paper's WMT14 settings (download needed): Adam 0.9/0.98/1e-9 (the
    # defaults above), warm-up over 4000 steps, label smoothing 0.1, beam 4.
    "wmt14_base": WMT14,
    "wmt14_big": {**WMT14, "model_preset": "big"},
}


def texts(pairs):
    """Python strings of a (source, target) data set."""
    return [(s.decode("utf-8"), t.decode("utf-8")) for s, t in pairs.as_numpy_iterator()]


def translate(model, source_tokenizer, target_tokenizer, sources, config):
    """Python strings in, Python strings out, decoded in batches with the
    export's input steps (UTF-8 repair, tokenise, truncate) and a search
    compiled for the backend (`compiled_decoding`)."""
    max_input_length, max_decoding_length = decoding_limits(dataclasses.asdict(config))

    def search(ids):
        if config.beam_size > 1:
            output, _ = decoding.beam_search(
                model,
                ids,
                max_decoding_length,
                beam_size=config.beam_size,
                length_penalty=config.length_penalty,
            )
            return output
        return decoding.greedy_search(model, ids, max_decoding_length)

    decode = compile_decoding(model, search, max_input_length)
    outputs = []
    for start in range(0, len(sources), config.eval_batch_size):
        batch = tf.constant(sources[start : start + config.eval_batch_size])
        ids = token_ids(source_tokenizer, batch, max_input_length).numpy()
        output = target_tokenizer.detokenize(np.asarray(decode(ids)))
        outputs += [t.decode("utf-8") for t in output.numpy()]
    return outputs


# What `tune_decoding` tries: each length penalty at the run's beam size,
# then the other beam sizes at the best penalty, on the validation split's
# first TUNING_EXAMPLES pairs. Another beam size than the run's must score
# BEAM_SIZE_GAIN more sacreBLEU: smaller differences are within the noise
# of a thousand pairs, and a wider beam costs every request time.
TUNING_LENGTH_PENALTIES = (0.3, 0.6, 1.0)
TUNING_BEAM_SIZES = (2, 4, 8)
TUNING_EXAMPLES = 1000
BEAM_SIZE_GAIN = 0.3


def tune_decoding(model, data, given):
    """`(config, scores)`: `data.config` with the beam size and length
    penalty that score the best sacreBLEU on the validation split, for
    those `given` (the config as the user gave it) leaves None; and each
    trial's sacreBLEU, `{"beam 4, length penalty 0.6": 31.41, ...}` (also
    printed)."""
    config = data.config
    count = min(TUNING_EXAMPLES, config.test_examples or TUNING_EXAMPLES)  # (quick runs: fewer)
    pairs = texts(data.validation_examples.take(count))
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    penalties = TUNING_LENGTH_PENALTIES if given.length_penalty is None else ()
    beam_sizes = TUNING_BEAM_SIZES if given.beam_size is None else ()
    scores = {}

    def trial(beam_size, length_penalty):
        if (beam_size, length_penalty) not in scores:
            tried = dataclasses.replace(config, beam_size=beam_size, length_penalty=length_penalty)
            predictions = translate(model, data.tokenizer, data.target_tokenizer, sources, tried)
            score = sacrebleu.corpus_bleu(predictions, [references]).score
            scores[beam_size, length_penalty] = score
            print(f"  beam {beam_size}, length penalty {length_penalty}: sacreBLEU {score:.2f}")
        return scores[beam_size, length_penalty]

    if not penalties and not beam_sizes:
        return config, {}
    print(f"Choosing the decoding on {len(pairs):,} validation pairs:")
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")  # (each trial traces its search anew, as it must: not news)
    try:
        penalty = config.length_penalty
        if penalties:
            penalty = max(penalties, key=lambda alpha: trial(config.beam_size, alpha))
        beam_size = config.beam_size
        if beam_sizes:
            own = trial(beam_size, penalty)
            best = max(beam_sizes, key=lambda beams: trial(beams, penalty))
            if trial(best, penalty) >= own + BEAM_SIZE_GAIN:
                beam_size = best
    finally:
        logger.setLevel(level)
    print(f"Chosen on the validation split: --beam-size {beam_size} --length-penalty {penalty}")
    trials = {
        f"beam {beams}, length penalty {alpha}": round(score, 2)
        for (beams, alpha), score in scores.items()
    }
    return dataclasses.replace(config, beam_size=beam_size, length_penalty=penalty), trials


def draw_translation_attention(source_tokens, target_tokens, weights, path, title):
    """Draws one example's cross-attention `weights [H, T, S]`: output tokens
    as rows, source tokens as columns, one panel per head."""
    weights = weights[:, : len(target_tokens), : len(source_tokens)]
    visualize.plot_attention(weights, target_tokens, source_tokens, path=path, title=title)
    return path


def exported_attention(outputs):
    """The first example of a `translate_with_attention` answer, as
    `draw_translation_attention` takes it."""
    source = [t.decode("utf-8") for t in outputs["source_tokens"][0].numpy() if t]
    target = [t.decode("utf-8") for t in outputs["target_tokens"][0].numpy() if t]
    return source, target, outputs["attention"][0].numpy()


def model_attention(model, data, source, translation):
    """What `translate_with_attention` answers for `source` and the model's
    `translation` of it, from the model in this process (for a run made
    with `--no-export`): the last decoder layer's cross-attention, with
    `<s> y1 .. yn` teacher-forced, as `draw_translation_attention` takes it."""
    max_input_length, max_decoding_length = decoding_limits(dataclasses.asdict(data.config))
    source_ids = tf.constant([source])
    source_ids = tf.cast(token_ids(data.tokenizer, source_ids, max_input_length), "int32")
    output_ids = data.target_tokenizer.tokenize(tf.constant([translation]))
    output_ids = output_ids[:, : max_decoding_length - 1]
    output_ids = tf.concat([tf.cast(output_ids.to_tensor(), "int32"), [[END_ID]]], 1)  # y </s>
    weights = keras.ops.convert_to_numpy(cross_attention(model, source_ids, output_ids))
    source_vocabulary = data.tokenizer.vocabulary
    target_vocabulary = data.target_tokenizer.vocabulary
    return (
        [source_vocabulary[i] for i in source_ids.numpy()[0] if i != PAD_ID],
        [target_vocabulary[i] for i in output_ids.numpy()[0]],
        weights[0],
    )


class TranslateRecipe(Recipe):
    """Translation: a source and a target vocabulary, an encoder-decoder,
    exact match and sacreBLEU on the test split, an export whose
    `translate_with_attention` draws the picture."""

    config_class = TranslateConfig
    # On the dates task, 5 epochs whose learning rate falls to 0 over the
    # last fifth reached 100% exact match, as 8 at a constant rate did not
    # (benchmarks/results_main_job.json); on English-French the same decay
    # gained about two points of BLEU (docs/training.md).
    built_in_epochs = 5
    chosen_final_decay = DECAY_SHARE

    @property
    def model_name(self):
        return self.config.model

    def load_pairs(self, split, splits=None):
        """The split's `(source, target)` string pairs, a `tf.data.Dataset`:
        of `splits` (the user's files, see `read_files`), or of the data set."""
        config = self.config
        if splits is not None:
            sources, targets = zip(*splits[split], strict=True)
            return tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))
        return datasets.translation_pairs(
            config.dataset,
            split,
            config.data_dir,
            config.reverse,
            keys=(config.source_key, config.target_key),
        )

    def prepare(self, output_dir):
        config = self.config
        splits = None
        if config.train_file:
            splits = self.read_files(
                lambda path: text_files.read_columns(path, config.skip_bad_lines)
            )
        train_pairs = self.load_pairs("train", splits)
        if config.train_examples:
            train_pairs = train_pairs.take(config.train_examples)
        train_texts = texts(train_pairs)
        sources, targets = [s for s, _ in train_texts], [t for _, t in train_texts]
        initial = initial_run(self.config, ("source", "target"))
        if initial:
            tokenizers, self.config = initial
        config = self.choose_for_data(
            sources + targets,
            beam_size=1 if self.built_in_task else 4,
            batch_tokens=0 if self.built_in_task else batch_tokens_for(len(sources)),
        )
        if initial:
            tokenizer, target_tokenizer = tokenizers["source"], tokenizers["target"]
        elif config.shared_vocabulary:
            tokenizer = target_tokenizer = train_tokenizer(config, sources + targets)
        else:
            tokenizer = train_tokenizer(config, sources)
            target_tokenizer = train_tokenizer(config, targets)
        warn_if_truncated("sources", tokenizer, sources, config.max_input_length)
        # <s> or </s> takes one place of a target.
        warn_if_truncated("targets", target_tokenizer, targets, config.max_input_length - 1)
        files = RunFiles(output_dir)
        tokenizer.save(files.vocabulary("source", config.tokenizer))
        target_tokenizer.save(files.vocabulary("target", config.tokenizer))

        train_batches, validation = self.training_and_validation(
            lambda pairs, **batching: translation_batches(
                pairs, tokenizer, target_tokenizer, **batching
            ),
            train_pairs,
            len(train_texts),
            self.load_pairs("validation", splits),
        )
        return Data(
            config=config,
            tokenizer=tokenizer,
            target_tokenizer=target_tokenizer,
            train_batches=train_batches,
            validation=validation,
            test=self.load_pairs("test", splits),
            validation_examples=self.load_pairs("validation", splits),
            description=f"{len(train_texts):,} training pairs",
        )

    def build_model(self, data):
        config = data.config
        if config.init_from:
            return initial_model(self.config)
        overrides = config.model_overrides
        if config.model == "transformer":
            # One vocabulary: one matrix embeds source and target and projects
            # the output. Two: one each (the base and big presets share one).
            if config.shared_vocabulary:
                embeddings = dict(share_embeddings=True, tie_output_embeddings=True)
            else:
                embeddings = dict(share_embeddings=False)
            overrides = {**embeddings, **overrides}
        return MODELS[config.model](
            data.tokenizer.vocabulary_size,
            data.target_tokenizer.vocabulary_size,
            preset=config.model_preset,
            **overrides,
        )

    def loss_and_metrics(self, data):
        loss = MaskedSparseCrossentropy(data.config.label_smoothing)
        return loss, [MaskedAccuracy()]

    def evaluate(self, model, data, output_dir):
        """Exact match of the whole output, sacreBLEU and chrF on the test
        split; the translations in `test_translations.tsv`. With beam
        search, first the beam size and length penalty left to the recipe
        (`tune_decoding`), its trials recorded as `decoding_tuning`."""
        trials = {}
        if data.config.tune_decoding and data.config.beam_size > 1:
            data.config, trials = tune_decoding(model, data, given=self.given)
        config = data.config
        test = texts(data.test.take(config.test_examples or -1))
        sources, references = [s for s, _ in test], [t for _, t in test]
        predictions = translate(model, data.tokenizer, data.target_tokenizer, sources, config)
        correct = sum(p == t for p, t in zip(predictions, references, strict=True))
        bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
        bleu_score = bleu.corpus_score(predictions, [references])
        chrf_score = chrf.corpus_score(predictions, [references])
        decoding_name = "greedy" if config.beam_size == 1 else f"beam {config.beam_size}"
        print(
            f"\nOn the test split ({decoding_name}): sacreBLEU {bleu_score.score:.2f}, "
            f"chrF {chrf_score.score:.2f}, exact match {correct / len(test):.2%} "
            f"({correct}/{len(test)})"
        )
        write_translations(RunFiles(output_dir).test_translations, test, predictions)
        survival = placeholder_survival(sources, predictions)
        if survival["pairs"]:
            print(
                f"Placeholders (%s, {{name}}, <b>, ...): kept whole in {survival['kept']:,} of "
                f"the {survival['pairs']:,} test translations whose source has them "
                f"({survival['kept'] / survival['pairs']:.1%})"
            )
        results = {
            "exact_match": correct / len(test),
            "sacrebleu": round(bleu_score.score, 2),
            "sacrebleu_signature": str(bleu.get_signature()),
            "chrf": round(chrf_score.score, 2),
            "chrf_signature": str(chrf.get_signature()),
            "test_examples": len(test),
            "decoding": decoding_name,
            "length_penalty": config.length_penalty,
            "placeholders": survival,
            **({"decoding_tuning": trials} if trials else {}),
        }
        return Evaluation(results, test, predictions)

    def draw(self, model, output_dir, data, evaluation, export_path):
        """Translates a few test sources with the export, as TF Serving would,
        and draws which source tokens each output token attended to. Without
        an export (`--no-export`), the model's own first translation."""
        picture = RunFiles(output_dir).attention_picture
        if export_path is None:
            source, translation = evaluation.examples[0][0], evaluation.predictions[0]
            attention = model_attention(model, data, source, translation)
            return draw_translation_attention(*attention, picture, f"{source} -> {translation}")
        examples = evaluation.examples[:8]
        served = tf.saved_model.load(str(export_path)).signatures["translate_with_attention"]
        outputs = served(text=tf.constant([s for s, _ in examples]))
        translations = [t.decode("utf-8") for t in outputs["translation"].numpy()]
        print(f"\nTranslated by the export in {export_path}:")
        for (source, target), translation in zip(examples, translations, strict=True):
            mark = "ok " if translation == target else "ERR"
            print(f"  {mark} {source!r:>42} -> {translation}  (expected {target})")
        if translations != evaluation.predictions[: len(examples)]:
            print("WARNING: the export translates these differently from the trained model")
        title = f"{examples[0][0]} -> {translations[0]}"
        return draw_translation_attention(*exported_attention(outputs), picture, title)


def write_translations(path, test, predictions):
    """`test_translations.tsv`: source, reference and the model's translation
    of every test pair, for reading the errors and for other metrics."""
    lines = [
        f"{source}\t{reference}\t{prediction}\n"
        for (source, reference), prediction in zip(test, predictions, strict=True)
    ]
    write_atomically(path, "source\treference\ttranslation\n" + "".join(lines))


def main(argv=None):
    return run_recipe(TranslateRecipe, PRESETS, argv, description=__doc__)


if __name__ == "__main__":
    main()
