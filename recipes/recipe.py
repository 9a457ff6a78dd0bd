"""The outline every recipe follows (`Recipe`): `run()` starts the run in
its folder (`run_folder.py`), then calls the recipe's steps in order,
training between them (`training.py`), each step handing what it made
(`Data`, `Evaluation`) to the next; and what the steps share (reading the
user's files, choosing for the data, drawing self-attention)."""

import dataclasses
import typing

import tensorflow as tf

from keras_attention import visualize
from keras_attention.data import text_files
from keras_attention.export.run import export_run
from keras_attention.files import write_json
from keras_attention.objectives import DecayToEnd, MaskedAccuracy, MaskedSparseCrossentropy
from keras_attention.recipes import resume
from keras_attention.recipes.attention_images import AttentionImages, watched_examples
from keras_attention.recipes.choices import (
    bfloat16_flags,
    epochs_for,
    precision_note,
    vocabulary_size_for,
)
from keras_attention.recipes.config import TrainingConfig, as_flag
from keras_attention.recipes.jax_job import saving_alone
from keras_attention.recipes.run_folder import start_run
from keras_attention.recipes.time_budget import DECAY_SHARE, TimeBudget
from keras_attention.recipes.training import (
    batching,
    fit,
    global_batch,
    keep_the_better_weights,
    learning_rate,
    make_optimizer,
    step_compiles,
)
from keras_attention.run_files import RunFiles


@dataclasses.dataclass
class Data:
    """What a recipe's `prepare` hands to the rest of the run."""

    config: TrainingConfig  # the run's config, with what was chosen for the data
    tokenizer: typing.Any  # the (source) tokeniser, saved in the run's folder
    train_batches: typing.Callable  # epoch -> that epoch's training batches
    validation: tf.data.Dataset  # the validation batches
    test: tf.data.Dataset  # the test split's examples, unbatched
    description: str  # the data in a few words, for the summary line
    target_tokenizer: typing.Any = None  # a translation's target tokeniser
    label_names: list | None = None  # a classifier's classes, in id order
    validation_examples: tf.data.Dataset | None = None  # the validation split's, unbatched


@dataclasses.dataclass
class Evaluation:
    """What a recipe's `evaluate` hands to `draw`, and its results."""

    results: dict  # written to evaluation.json
    examples: list  # the test examples evaluated, as the recipe reads them
    predictions: list  # the model's output for each


class Recipe:
    """One run of a recipe, in the same order for every recipe: `run()`
    starts the run (seeds, precision, the strategy, its folder and
    config), then calls the parts each recipe fills in, each
    handing what it made to the next:

    1. `prepare(output_dir) -> Data`: the data, the choices made for it and
       the vocabularies (learned from the training split only, saved under
       `output_dir`);
    2. `build_model(data)` and `loss_and_metrics(data)`, under the
       strategy's scope;
    3. (training: `fit`, shared);
    4. `evaluate(model, data, output_dir) -> Evaluation`: the test split's results,
       which `run` writes to `evaluation.json` before saving `model.keras`;
    5. `export(model, output_dir, data)`: the SavedModel for TF Serving
       (unless `--no-export`);
    6. `draw(model, output_dir, data, evaluation, export_path)`: an
       attention map (`export_path` None without an export).
    """

    config_class = TrainingConfig
    model_name = "model"  # how the summary line names the model
    built_in_epochs = 3  # epochs on the built-in dates task
    chosen_final_decay = 0.0  # --final-decay when not given

    def __init__(self, config):
        self.config = config  # completed by what the run chooses for its data
        self.given = config  # the flags as given: what the run may choose is None here

    def prepare(self, output_dir):
        raise NotImplementedError

    def build_model(self, data):
        raise NotImplementedError

    def training_and_validation(self, pipeline, train, train_count, validation):
        """`train_batches(epoch)` and the validation batches, each made by
        `pipeline(data, **batching arguments)` (see `batching`);
        `train_count` is the number of training examples (the shuffle
        buffer). `fit` distributes them as the strategy needs."""

        def train_batches(epoch):
            return pipeline(train, **self.batching(train_count, epoch))

        return train_batches, pipeline(validation, **self.batching())

    def batching(self, train_examples=0, epoch=0):
        """The batching arguments of this run (see `batching`)."""
        return batching(self.config, step_compiles(self.config.jit_compile), train_examples, epoch)

    def read_files(self, read):
        """`{"train": [...], "validation": [...], "test": [...]}` from
        `--train-file`, `--validation-file` and `--test-file`, each read by
        `read(path)`, which returns `(examples, skipped lines)`. A split
        without its own file is held out of the training file by a hash of
        the source (`text_files.hold_out`), so no source is in two splits."""
        config = self.config

        def load(path):
            examples, skipped = read(path)
            if skipped:
                print(f"WARNING: skipped {skipped:,} lines of {path} that lack a column")
            return examples

        train = load(config.train_file)
        splits = {"train": train}
        if not (config.validation_file and config.test_file):
            rest, validation, test = text_files.hold_out(train, config.held_out_share)
            if not validation or not test:
                raise text_files.DataFileError(
                    f"{config.train_file} has too few examples ({len(train)}) to hold out "
                    f"{config.held_out_share:.0%} for validation and for test; add lines, or "
                    "pass --validation-file and --test-file"
                )
            # A split given as a file leaves its held-out share in training.
            splits["train"] = rest + (validation if config.validation_file else [])
            splits["train"] += test if config.test_file else []
            splits.update(validation=validation, test=test)
        for split in ("validation", "test"):
            path = getattr(config, f"{split}_file")
            if path:
                splits[split] = load(path)
        described = []
        for split, examples in splits.items():
            source = getattr(config, f"{split}_file") or f"held out of {config.train_file}"
            described.append(f"{split} {len(examples):,} ({source})")
        print("Examples: " + ", ".join(described))
        return splits

    @property
    def built_in_task(self):
        """Whether this run trains on the built-in dates task, whose defaults
        (characters, the tiny preset, greedy decoding) were tuned for it."""
        return not self.config.train_file and self.config.dataset.startswith("multilingual_dates")

    def choose_for_data(self, texts, **recipe_choices):
        """Fills in the config's fields left None with what suits the
        training `texts` (strings; both languages of a translation), prints
        what it chose, and returns the config. `recipe_choices` are the
        recipe's own fields' choices, used for those left None. The recipe
        goes on with that config (`self.config`)."""
        config = self.config
        built_in = self.built_in_task
        choices = dict(
            tokenizer="character" if built_in else "subword",
            vocabulary_size=vocabulary_size_for(texts),
            # On real text (20,000 English-French pairs), a larger model (3+3
            # layers, d_model 128) was behind tiny after as many epochs and
            # 1.8x slower a step: within about 10 minutes, tiny learns more.
            model_preset="tiny",
            batch_tokens=0,  # none: batches of --batch-size sentences
            final_decay=self.chosen_final_decay,
        )
        choices.update(recipe_choices)
        given = config.batch_tokens
        by_tokens = bool(choices["batch_tokens"] if given is None else given)
        choices["epochs"] = self.built_in_epochs if built_in else epochs_for(texts, by_tokens)
        if config.time_budget:
            choices["final_decay"] = DECAY_SHARE
            choices.pop("epochs")  # planned by the budget, --epochs at most
        if config.init_from:  # the run's vocabulary and model are kept
            choices.pop("vocabulary_size"), choices.pop("model_preset")
        chosen = {name: value for name, value in choices.items() if getattr(config, name) is None}
        config = dataclasses.replace(config, **chosen)
        if config.tokenizer == "character":
            chosen.pop("vocabulary_size", None)  # not used
        for name in ("batch_tokens", "final_decay"):
            if not chosen.get(name, True):
                chosen.pop(name)  # none: as before they were flags
        if chosen:
            print(
                "Chosen for the data (set these flags to choose otherwise): "
                + ", ".join(as_flag(name, value) for name, value in chosen.items())
            )
        self.config = config  # what `batching` reads
        return config

    def loss_and_metrics(self, data):
        return MaskedSparseCrossentropy(), [MaskedAccuracy()]

    def evaluate(self, model, data, output_dir):
        raise NotImplementedError

    def export(self, model, output_dir, data):
        """Exports the run just saved in `output_dir` for TF Serving and
        returns the version folder: `export_run`, the one export of a run
        (what it serves, its beam size and lengths, class names, folder
        and name, as the run's config.json and files say), given the model
        and tokenisers in hand and this run's `--export-version`,
        `--overwrite-export` and `--export-jit-compile`, which describe
        this export rather than the run. `export_model` also writes the
        base folder's `models.config` and `batching_parameters.txt`."""
        config = data.config
        return export_run(
            output_dir,
            {
                "export_version": config.export_version,
                "overwrite_export": config.overwrite_export,
                "export_jit_compile": config.export_jit_compile,
            },
            model=model,
            tokenizers=[t for t in (data.tokenizer, data.target_tokenizer) if t is not None],
        )

    def draw(self, model, output_dir, data, evaluation, export_path):
        raise NotImplementedError

    def run(self):
        # `output_dir` is this process's: workers other than the chief write apart.
        strategy, output_dir, self.config = start_run(self.config)
        data = self.prepare(output_dir)
        config = data.config  # with what `prepare` chose for the data
        strategy.batches_of(global_batch(config))
        files = RunFiles(output_dir)
        write_json(files.config, dataclasses.asdict(config))
        with strategy.scope():
            model = self.build_model(data)
            loss, metrics = self.loss_and_metrics(data)
            rate = learning_rate(config, model.model_dim)
            model.compile(
                optimizer=make_optimizer(config, rate),
                loss=loss,
                # Weighted: a batch filled with empty rows weighs them 0
                # (`strategy.fill_and_share`); unweighted batches count alike.
                weighted_metrics=metrics,
                jit_compile=step_compiles(config.jit_compile),
            )
        print(
            f"{self.model_name} ({config.model_preset}): {model.count_params():,} parameters, "
            f"{data.description}, strategy {config.strategy} "
            f"({strategy.num_replicas_in_sync} replicas), precision {config.precision}"
        )
        note = precision_note(config.precision, bfloat16_flags())
        if note:
            print(note)
        # The attention of a few validation examples, drawn into TensorBoard
        # every epoch.
        examples = watched_examples(data)
        watched = [AttentionImages(examples, output_dir)] if examples else []
        decay = rate if isinstance(rate, DecayToEnd) else None
        budget = None
        if config.time_budget:
            budget = TimeBudget(
                config.time_budget,
                RunFiles(config.output_dir).checkpoints,
                decay,
                writer=files.folder == RunFiles(config.output_dir).folder,
                max_epochs=config.epochs,
            )
        training_seconds = fit(
            model,
            strategy,
            data.train_batches,
            data.validation,
            config,
            output_dir,
            watched,
            budget,
            decay,
        )
        used = {}
        weights = keep_the_better_weights(
            model,
            strategy,
            data.validation,
            resume.Checkpoints(RunFiles(config.output_dir).checkpoints, writer=False),
            config.average_last,
        )
        if weights is not None:
            used["weights"] = weights
        if budget is not None:
            used["time_budget"] = budget.summary(training_seconds)
            data.config = dataclasses.replace(data.config, epochs=budget.plan.epochs)
            print(
                f"Time budget {budget.minutes:g} min: {budget.plan.epochs} epochs trained, "
                f"{used['time_budget']['used_minutes']:.1f} min of training"
            )
        evaluation = self.evaluate(model, data, output_dir)
        results = {
            **evaluation.results,
            "training_seconds": round(training_seconds, 1),
            **used,
        }
        print(f"(trained in {training_seconds:.0f} s)")
        write_json(files.evaluation, results)
        write_json(files.config, dataclasses.asdict(data.config))  # with what evaluation chose
        if not strategy.saves:
            print(f"Process {strategy.worker_index}: done; process 0 writes the run's files.")
            return results
        with saving_alone():
            model.save(files.model)
        export_path = self.export(model, output_dir, data) if config.export else None
        picture = self.draw(model, output_dir, data, evaluation, export_path)
        if export_path is None:
            export_path = f"none (--no-export: python -m keras_attention.export {output_dir})"
        print(
            f"\nmodel: {files.model}\nevaluation: {files.evaluation}\n"
            f"TF Serving export: {export_path}\nattention map: {picture}"
        )
        return results


def draw_self_attention(model, ids, vocabulary, output_dir, title):
    """Saves the last layer's self-attention over one sequence `ids [1, T]`
    as `attention.png`, tokens on both axes, and returns its path."""
    weights = visualize.attention_maps(model, ids)["self_attention"][-1]
    tokens = [vocabulary[i] for i in ids[0]]
    picture = RunFiles(output_dir).attention_picture
    visualize.plot_attention(weights[0], tokens, tokens, path=picture, title=title)
    return picture
