"""The attention explorer: a trained run answers a text with its output and
every attention weight it used, for the page in `explore/page/` to draw.

    python -m keras_attention.explore runs/translate      # a local web page
    python -m keras_attention.explore RUN --html out.html "a sentence"

`Explorer(path)` loads a run's folder (or the `model.keras` in one) and
`Explorer.answer(text)` returns a JSON-ready dict:

- `task`: `"translation"`, `"classification"` or `"language_model"`;
- `source_tokens` (and for a translation `target_tokens`): the tokens as
  the model saw them, labelled readably (a SentencePiece piece that
  continues a word starts with `##`; a space is `␣`);
- `attention`: kind -> layers -> heads -> rows -> weights, the kinds of
  `visualize.AXES` the model has (encoder self, decoder self and cross
  attention for a Transformer; cross attention alone, one "head", for the
  RNN models; self attention for the classifier and the language model);
- `axes`: kind -> which tokens label its rows and columns;
- `steps`: the kind the step-through walks, one row per output token;
- the output: `translation` and the beam's `hypotheses` with their scores,
  the classifier's `label` and `probabilities`, or the language model's
  `completion`;
- `notice`: what the page must say (the text was truncated), or None.

A translation's weights are the model's with its own output teacher-forced
(`<s> y1 .. yn` in, `y1 .. yn </s>` the rows), the way `attention.png` is
drawn: row t is what the decoder attended to while producing token t.
"""

import json
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_attention import decoding
from keras_attention.data.tokenizers import load_run_tokenizer, token_ids
from keras_attention.run_files import RunFiles, decoding_limits, read_config
from keras_attention.tasks import task_of
from keras_attention.visualize import AXES


class ExplorerError(ValueError):
    """A message for the user: a bad text, a folder that is not a run."""


def readable(token, subword):
    """A token's label: `▁the` -> `the`, `s` (inside a word) -> `##s`, and a
    space -> `␣`."""
    if token in (" ", "▁"):
        return "␣"
    if not subword or token.startswith("<"):
        return token
    return token[1:] if token.startswith("▁") else "##" + token


def token_labels(tokenizer, ids, subword):
    """The readable labels of `ids` in `tokenizer`'s vocabulary, padding
    left out."""
    return [readable(tokenizer.vocabulary[int(i)], subword) for i in ids if i != 0]


def find_run(path):
    """The run folder and model file of `path`: a run's folder, or the
    `model.keras` inside one."""
    path = Path(path)
    if not path.exists():
        raise ExplorerError(f"{path} does not exist: give a run's folder or its model.keras")
    folder = path if path.is_dir() else path.parent
    files = RunFiles(folder)
    model = files.model if path.is_dir() else path
    if not files.config.is_file():
        raise ExplorerError(
            f"{folder} is not a training run: it has no config.json (a run's folder holds "
            "config.json, model.keras and the vocabularies the recipe wrote)"
        )
    if not model.is_file():
        raise ExplorerError(f"{folder} is a run without a trained model: no {model.name}")
    return files, model


class Explorer:
    """A trained run, loaded once, answering texts for the explorer's page.

    Args:
        path: a run's folder, as a recipe wrote it, or the `model.keras` in
            one (its config and vocabularies are read from beside it).

    What the page shows of each task is the task's (`keras_attention.tasks`):
    `task.explore(explorer, ids)` calls back `search`, `attention`,
    `logits` and `labels` here.
    """

    error = ExplorerError

    def __init__(self, path):
        import keras_attention.models  # noqa: F401  (registers the model classes)

        self.files, model_file = find_run(path)
        self.config = read_config(self.files.config)
        self.model = keras.saving.load_model(model_file)
        try:
            self._task = task_of(self.model)
        except ValueError:
            raise ExplorerError(f"{model_file} is not a keras_attention model") from None
        self.task = self._task.name
        self.subword = self.config.get("tokenizer") in ("subword", "mapped_subword")
        try:
            self.tokenizers = {
                side: load_run_tokenizer(self.files, self.config, side) for side in self._task.sides
            }
        except ValueError as error:
            raise ExplorerError(str(error)) from None
        self.max_input_length, self.max_decoding_length = map(int, decoding_limits(self.config))
        self.label_names = None
        if self.files.labels.is_file():
            self.label_names = json.loads(self.files.labels.read_text())
        self._searches = {}
        self._attention = _compiled(self.model.attention_scores)
        self.logits = _compiled(self.model)

    def info(self):
        """What the page needs before the first answer."""
        return {
            "task": self.task,
            "model": type(self.model).__name__,
            "run": str(self.files.folder),
            "max_input_length": self.max_input_length,
            "beam_size": int(self.config.get("beam_size") or 1),
            "max_beam_size": self._task.max_beam_size,
            "labels": self.label_names,
        }

    def answer(self, text, beam_size=None):
        """The model's output for `text` and every attention weight behind
        it (see the module's docstring); `beam_size` for a translation
        (default: the run's)."""
        if not isinstance(text, str):
            raise ExplorerError(f"The text must be a string; got {type(text).__name__}")
        if not text.strip():
            raise ExplorerError("The text is empty: type a sentence.")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ExplorerError("The text is not valid UTF-8.") from None
        started = time.perf_counter()
        tokenizer = self.tokenizers[self._task.input_side]
        count = int(tokenizer.tokenize(tf.constant([text])).row_lengths()[0])
        room = self.max_input_length - self._task.positions_before_text
        ids = token_ids(tokenizer, tf.constant([text]), room).numpy().astype("int32")
        notice = None
        if count > room:
            notice = (
                f"The text has {count} tokens; the model reads at most {room}, so it "
                f"was truncated to the first {room}."
            )
        result = self._task.explore(self, ids, beam_size)
        result.update(
            task=self.task,
            text=text,
            notice=notice,
            axes={kind: AXES[kind] for kind in result["attention"]},
            steps=self._task.steps,
            seconds=round(time.perf_counter() - started, 3),
        )
        return result

    # --- What the tasks call back ---

    def search(self, beam_size, new_tokens=None):
        """A search compiled once: a translation's beam search, `ids [1, S]`
        -> `(ids [1, K, L], scores [1, K])`; with `new_tokens`, a language
        model's greedy completion, prompt `[1, P]` -> `[1, P + new_tokens]`."""
        key = (beam_size, new_tokens)
        if key not in self._searches:

            def search(ids):
                if new_tokens is not None:
                    return decoding.greedy_search(self.model, ids, new_tokens)
                return decoding.beam_search(
                    self.model,
                    ids,
                    self.max_decoding_length,
                    beam_size=beam_size,
                    return_all_beams=True,
                )

            self._searches[key] = _compiled(search)
        return self._searches[key]

    def attention(self, inputs):
        """kind -> layers of `[H, Tq, Tk]` weights for one input, as nested
        lists rounded to 4 decimals (the page shows 3)."""
        scores = self._attention(inputs)
        return {
            kind: [np.round(np.asarray(ops.convert_to_numpy(w))[0], 4).tolist() for w in layers]
            for kind, layers in scores.items()
        }

    def labels(self, ids, side):
        return token_labels(self.tokenizers[side], ids, self.subword)


def _compiled(function):
    """`function` as one TensorFlow graph per input shape, on the
    TensorFlow backend; as it is on another. (Without AutoGraph: the
    decoding loops are `keras.ops` code that JAX traces as it is.)"""
    if keras.backend.backend() == "tensorflow":
        return tf.function(function, reduce_retracing=True, autograph=False)
    return function
