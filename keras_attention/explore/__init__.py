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
from keras_attention.data.tokenizers import (
    END,
    END_ID,
    START_ID,
    load_run_tokenizer,
    token_ids,
)
from keras_attention.run_files import RunFiles
from keras_attention.visualize import AXES

# The step-through walks these rows: output token t and what it attended to.
STEPS = {"translation": "decoder_cross_attention", "language_model": "self_attention"}
MAX_BEAM_SIZE = 8
MAX_NEW_TOKENS = 64  # a language model's completion, at most


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
    """

    def __init__(self, path):
        import keras_attention.models  # noqa: F401  (registers the model classes)

        self.files, model_file = find_run(path)
        self.config = json.loads(self.files.config.read_text())
        self.model = keras.saving.load_model(model_file)
        self.task = getattr(self.model, "task", None)
        if self.task not in ("translation", "classification", "language_model"):
            raise ExplorerError(f"{model_file} is not a keras_attention model")
        self.subword = self.config.get("tokenizer") in ("subword", "mapped_subword")
        sides = ("source", "target") if self.task == "translation" else ("text",)
        try:
            self.tokenizers = {
                side: load_run_tokenizer(self.files, self.config, side) for side in sides
            }
        except ValueError as error:
            raise ExplorerError(str(error)) from None
        self.max_length = int(self.config["max_length"])
        self.labels = None
        if self.task == "classification":
            self.labels = json.loads(self.files.labels.read_text())
        self._searches = {}
        self._attention = _compiled(self.model.attention_scores)
        self._logits = _compiled(self.model)

    def info(self):
        """What the page needs before the first answer."""
        return {
            "task": self.task,
            "model": type(self.model).__name__,
            "run": str(self.files.folder),
            "max_length": self.max_length,
            "beam_size": int(self.config.get("beam_size") or 1),
            "max_beam_size": MAX_BEAM_SIZE if self.task == "translation" else 1,
            "labels": self.labels,
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
        tokenizer = self.tokenizers["source" if self.task == "translation" else "text"]
        count = int(tokenizer.tokenize(tf.constant([text])).row_lengths()[0])
        room = self.max_length - (1 if self.task == "language_model" else 0)  # <s> first
        ids = token_ids(tokenizer, tf.constant([text]), room).numpy().astype("int32")
        notice = None
        if count > room:
            notice = (
                f"The text has {count} tokens; the model reads at most {room}, so it "
                f"was truncated to the first {room}."
            )
        if self.task == "translation":
            result = self._translate(ids, beam_size)
        elif self.task == "classification":
            result = self._classify(ids)
        else:
            result = self._complete(ids)
        result.update(
            task=self.task,
            text=text,
            notice=notice,
            axes={kind: AXES[kind] for kind in result["attention"]},
            steps=STEPS.get(self.task),
            seconds=round(time.perf_counter() - started, 3),
        )
        return result

    # --- One task each ---

    def _translate(self, source_ids, beam_size):
        beam_size = int(self.config.get("beam_size") or 1) if beam_size is None else beam_size
        if not isinstance(beam_size, int) or not 1 <= beam_size <= MAX_BEAM_SIZE:
            raise ExplorerError(f"beam_size must be from 1 to {MAX_BEAM_SIZE}; got {beam_size!r}")
        ids, scores = self._search(beam_size)(source_ids)
        ids, scores = np.asarray(ids)[0], np.asarray(scores)[0]  # [K, L], [K]
        target = self.tokenizers["target"]
        hypotheses = [
            {"text": _text(target, row), "score": round(float(score), 4)}
            for row, score in zip(ids, scores, strict=True)
            if score > decoding.NEG_INF / 2
        ]
        output = _before_end(ids[0])
        target_ids = np.array([[START_ID, *output]], "int32")  # <s> y1 .. yn
        weights = self._attention({"source_ids": source_ids, "target_ids": target_ids})
        return {
            "source_tokens": self._labels(source_ids[0], "source"),
            "target_tokens": self._labels(output, "target") + [END],  # y1 .. yn </s>
            "translation": hypotheses[0]["text"],
            "hypotheses": hypotheses,
            "beam_size": beam_size,
            "attention": _nested(weights),
        }

    def _classify(self, ids):
        logits = np.asarray(self._logits(ids))[0]
        probabilities = np.exp(logits - logits.max())
        probabilities /= probabilities.sum()
        best = int(probabilities.argmax())
        return {
            "source_tokens": self._labels(ids[0], "text"),
            "label": self.labels[best],
            "probabilities": {
                label: round(float(p), 4)
                for label, p in zip(self.labels, probabilities, strict=True)
            },
            "attention": _nested(self._attention(ids)),
        }

    def _complete(self, ids):
        prompt = np.concatenate([[START_ID], ids[0][ids[0] != 0]])[None].astype("int32")
        new_tokens = min(MAX_NEW_TOKENS, self.max_length - prompt.shape[1])
        if new_tokens > 0:
            output = np.asarray(self._search(1, new_tokens)(prompt))[0]
            sequence = np.concatenate([prompt[0], _before_end(output[prompt.shape[1] :])])
        else:
            sequence = prompt[0]
        sequence = sequence[None].astype("int32")
        tokenizer = self.tokenizers["text"]
        return {
            "source_tokens": self._labels(sequence[0], "text"),
            "prompt_length": int(prompt.shape[1]),
            "completion": _text(tokenizer, sequence[0, prompt.shape[1] :]),
            "attention": _nested(self._attention(sequence)),
        }

    # --- Helpers ---

    def _search(self, beam_size, new_tokens=None):
        """A search compiled once: a translation's beam search, `ids [1, S]`
        -> `(ids [1, K, L], scores [1, K])`; with `new_tokens`, a language
        model's greedy completion, prompt `[1, P]` -> `[1, P + new_tokens]`."""
        key = (beam_size, new_tokens)
        if key not in self._searches:

            def search(ids):
                if new_tokens is not None:
                    return decoding.greedy_search(self.model, ids, new_tokens)
                return decoding.beam_search(
                    self.model, ids, self.max_length, beam_size=beam_size, return_all_beams=True
                )

            self._searches[key] = _compiled(search)
        return self._searches[key]

    def _labels(self, ids, side):
        return token_labels(self.tokenizers[side], ids, self.subword)


def _compiled(function):
    """`function` as one TensorFlow graph per input shape, on the
    TensorFlow backend; as it is on another. (Without AutoGraph: the
    decoding loops are `keras.ops` code that JAX traces as it is.)"""
    if keras.backend.backend() == "tensorflow":
        return tf.function(function, reduce_retracing=True, autograph=False)
    return function


def _before_end(ids):
    """The ids before the first end or padding id."""
    ids = [int(i) for i in ids]
    for position, i in enumerate(ids):
        if i in (END_ID, 0):
            return ids[:position]
    return ids


def _text(tokenizer, ids):
    ids = np.asarray(_before_end(ids) or [END_ID], "int32")[None]
    return tokenizer.detokenize(ids).numpy()[0].decode("utf-8")


def _nested(scores):
    """kind -> layers of `[1, H, Tq, Tk]` -> nested lists, rounded (the
    page shows 3 decimals)."""
    return {
        kind: [np.round(np.asarray(ops.convert_to_numpy(w))[0], 4).tolist() for w in layers]
        for kind, layers in scores.items()
    }
