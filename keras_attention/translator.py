"""`Translator`: CTranslate2's `Translator` API over a translator's export
(`Generator`, its `Generator` API over a language model's, is in
`keras_attention/generator.py`; both are `ExportClient`s: the export
loaded, its batches cut as CTranslate2 cuts them, texts checked).

A CTranslate2 user switches by changing the import:

    from keras_attention import Translator

    translator = Translator("runs/translate")
    results = translator.translate_batch(["Hello world!"], beam_size=4, num_hypotheses=2)
    results[0].hypotheses  # ["Bonjour le monde !", "Bonjour monde !"]

The methods and arguments are CTranslate2's, with one difference: they take
and return text, not tokens. The SavedModel tokenizes in its graph (the
`translate_batch` signature), so what runs here is what TF Serving runs.
"""

import dataclasses
import itertools
import json
import time
from pathlib import Path

import numpy as np

from keras_attention.files import write_atomically
from keras_attention.run_files import RunFiles, read_config

BATCH_TYPES = ("examples", "tokens")
_MISSING = object()  # (an iterable that ran out before the other)


@dataclasses.dataclass
class TranslationResult:
    """One text's answer, as CTranslate2's: `hypotheses`, best first (texts,
    not tokens), their `scores` (empty unless asked for) and their
    `attention` (empty unless asked for): per hypothesis, one vector per
    target token (the end token has none), its attention over the source
    tokens (the last decoder layer's cross-attention, averaged over the
    heads); `alignments`, per hypothesis, the source position of each
    vector's largest weight (-1 where the source is empty)."""

    hypotheses: list
    scores: list
    attention: list = dataclasses.field(default_factory=list)
    alignments: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ScoringResult:
    """One pair's score, as CTranslate2's: the target's `tokens` (its end
    token included) and each one's log-probability, `log_probs`."""

    tokens: list
    log_probs: list


@dataclasses.dataclass
class TranslationStats:
    """What `translate_file` did, as CTranslate2's: how many target tokens
    it wrote, how many texts, and how long it took."""

    num_tokens: int
    num_examples: int
    total_time_in_ms: float


def find_export(path):
    """The SavedModel folder for `path`: an export version folder itself;
    a TF Serving model folder (`BASE/NAME`), its highest version; or a
    run folder, the highest version of the export it recorded."""
    from keras_attention.export.layout import versions

    path = Path(path)
    if (path / "saved_model.pb").is_file():
        return path
    if versions(path):
        return path / str(versions(path)[-1])
    files = RunFiles(path)
    if files.config.is_file():
        config = read_config(files.config)
        base = Path(config.get("export_dir") or files.serving)
        model_dir = base / (config.get("export_name") or path.name)
        if versions(model_dir):
            return model_dir / str(versions(model_dir)[-1])
        raise FileNotFoundError(
            f"{path} is a run folder without an export under {model_dir}: "
            f"export it with `python -m keras_attention.export {path}`"
        )
    raise FileNotFoundError(
        f"{path} is not an export (no saved_model.pb), a model folder of versions, "
        "or a run folder (no config.json)"
    )


class ExportClient:
    """What `Translator` and `Generator` share: an export loaded with its
    `SIGNATURE`, the texts' lengths batches are cut by, and reading an
    iterable a few batches at a time.

    Args:
        model_path: an export version folder, a TF Serving model folder (its
            highest version) or a run folder (the highest version of its
            export).
        device: "cpu" (TensorFlow places the work; "auto" is the same).
        inter_threads, intra_threads: int, TensorFlow's thread pools (0:
            TensorFlow's choice). They can be set only before TensorFlow
            starts; a value TensorFlow already runs with differently is an
            error.
    """

    SIGNATURE = None  # the signature the class calls
    KIND = None  # whose export has it

    def __init__(self, model_path, device="cpu", inter_threads=0, intra_threads=0):
        if device not in ("cpu", "auto"):
            raise ValueError(f"`device` must be 'cpu' or 'auto'. Received: device={device!r}")
        import tensorflow as tf

        _set_threads(tf, inter_threads, intra_threads)
        import tensorflow_text  # noqa: F401  (the export's tokenizers are TF Text ops)

        self.model_path = find_export(model_path)
        loaded = tf.saved_model.load(str(self.model_path))
        if self.SIGNATURE not in loaded.signatures:
            raise ValueError(
                f"{self.model_path} has no `{self.SIGNATURE}` signature (an export from an "
                f"older version, or not {self.KIND}): export the run again with "
                "`python -m keras_attention.export RUN`"
            )
        metadata = self.model_path / "assets.extra" / "keras_attention.json"
        # The tokens of a text the model reads (`max_length` in exports made
        # before the name was `max_input_length`).
        about = json.loads(metadata.read_text()) if metadata.is_file() else {}
        self.max_input_length = about.get("max_input_length", about.get("max_length"))
        self._loaded = loaded  # (the signature needs its object alive)
        self._signature = loaded.signatures[self.SIGNATURE]
        self._tf = tf

    def _scoring_signature(self):
        if "score_batch" not in self._loaded.signatures:
            raise ValueError(
                f"{self.model_path} has no `score_batch` signature: export the run again "
                "with `python -m keras_attention.export RUN`"
            )
        return self._loaded.signatures["score_batch"]

    def _read(self, source, target_prefix, read_size, batch_type):
        """`(texts, prefixes)` from the iterables, `read_size` texts (or
        tokens, padding counted, as `_batches` counts them) at a time."""
        if target_prefix is None:
            pairs = ((text, None) for text in source)
        else:
            pairs = itertools.zip_longest(source, target_prefix, fillvalue=_MISSING)
        texts, prefixes, lengths = [], [], []

        def counted():  # the texts whose tokens are counted, as `read_size` allows
            nonlocal texts, prefixes, lengths
            lengths += self._lengths(texts[len(lengths) :], 1, "tokens")
            while (cut := _first_over(lengths, read_size)) is not None:
                yield texts[:cut], prefixes[:cut]
                texts, prefixes, lengths = texts[cut:], prefixes[cut:], lengths[cut:]

        for text, prefix in pairs:
            if text is _MISSING or prefix is _MISSING:
                raise ValueError("`source` and `target_prefix` have different lengths")
            texts.append(text)
            prefixes.append(prefix)
            if batch_type == "examples" and len(texts) == read_size:
                yield texts, prefixes
                texts, prefixes = [], []
            elif batch_type == "tokens" and len(texts) - len(lengths) == 64:
                yield from counted()  # (tokens are counted 64 texts at a time)
        if batch_type == "tokens" and texts:
            yield from counted()
        if texts:
            yield texts, prefixes

    def truncated(self, texts, chunk_size=4096):
        """The indices of `texts` that have more tokens than the model reads
        (`max_input_length`): those are cut. (None listed for an export from before
        the `tokenize` signature, which cannot count them.)"""
        if self.max_input_length is None or "tokenize" not in self._loaded.signatures:
            return []
        lengths = (
            length
            for start in range(0, len(texts), chunk_size)
            for length in self._lengths(texts[start : start + chunk_size], 1, "tokens")
        )
        return [index for index, length in enumerate(lengths) if length > self.max_input_length]

    def _lengths(self, texts, max_batch_size, batch_type):
        """Each text's length, for cutting batches: its tokens (the
        export's `tokenize` signature) when batches count tokens, its
        characters otherwise."""
        _check_batching(max_batch_size, batch_type)
        texts = _texts("source", texts)
        if batch_type == "examples" or not max_batch_size:
            return [len(text) for text in texts]
        if "tokenize" not in self._loaded.signatures:
            raise ValueError(
                f"{self.model_path} has no `tokenize` signature, which batch_type='tokens' "
                "counts tokens with: export the run again with "
                "`python -m keras_attention.export RUN`"
            )
        tokenize = self._loaded.signatures["tokenize"]
        return [int(n) for n in tokenize(text=self._tf.constant(texts, self._tf.string))["length"]]


class Translator(ExportClient):
    """Translates text with an export's `translate_batch` signature, with
    CTranslate2's method names, arguments and defaults.

    Args:
        model_path: an export version folder, a TF Serving model folder (its
            highest version) or a run folder (the highest version of its
            export).
        device: "cpu" (TensorFlow places the work; "auto" is the same).
        inter_threads, intra_threads: int, TensorFlow's thread pools (0:
            TensorFlow's choice). They can be set only before TensorFlow
            starts; a value TensorFlow already runs with differently is an
            error.
    """

    SIGNATURE = "translate_batch"
    KIND = "a translator's"

    def translate_batch(
        self,
        source,
        target_prefix=None,
        *,
        max_batch_size=0,
        batch_type="examples",
        beam_size=2,
        patience=1.0,
        num_hypotheses=1,
        length_penalty=1.0,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        disable_unk=False,
        suppress_sequences=None,
        max_decoding_length=256,
        min_decoding_length=1,
        return_scores=False,
        return_attention=False,
        replace_unknowns=False,
    ):
        """Translates texts; returns one `TranslationResult` per text, in
        order.

        Args:
            source: list of str, the texts (not tokens).
            target_prefix: optional list (one per text) of str or None: the
                text each translation starts with.
            max_batch_size: int, the most texts per call of the model (0:
                all at once); the texts are sorted by length first, so that
                a batch holds texts of similar lengths.
            batch_type: "examples" (`max_batch_size` counts texts) or
                "tokens" (it counts tokens, padding included: a batch's
                texts times its longest text's source tokens).
            beam_size, patience, num_hypotheses, length_penalty,
            repetition_penalty, no_repeat_ngram_size, disable_unk,
            max_decoding_length, min_decoding_length: as CTranslate2's
                (`keras_attention.decoding.DecodingOptions` says each); the
                same for every text.
            suppress_sequences: optional list of str, texts never produced
                (each tokenized as the target side is).
            return_scores: bool, fill each result's `scores`.
            return_attention: bool, fill each result's `attention` and
                `alignments`.
            replace_unknowns: bool, each `<unk>` token of a translation
                becomes the source token it is aligned to (the one its
                attention weighs most).
        """
        source = _texts("source", source)
        prefixes = [""] * len(source) if target_prefix is None else target_prefix
        prefixes = [p or "" for p in _texts("target_prefix", prefixes, allow_none=True)]
        if len(prefixes) != len(source):
            raise ValueError(
                f"`target_prefix` needs one entry per text: {len(prefixes)} for {len(source)}"
            )
        suppressed = _texts("suppress_sequences", suppress_sequences or [""])
        options = _option_values("translator", locals())
        _check_options(options)
        if return_attention or replace_unknowns:
            self._require_input("return_attention" if return_attention else "replace_unknowns")
        else:  # (an export from before them answers as it did)
            options = {k: v for k, v in options.items() if k in self._signature_inputs()}
        results = [None] * len(source)
        for rows in _batches(
            self._lengths(source, max_batch_size, batch_type), max_batch_size, batch_type
        ):
            size = len(rows)
            inputs = {
                "text": np.array([source[i] for i in rows], object),
                "target_prefix": np.array([prefixes[i] for i in rows], object),
                "suppress_sequences": np.array([suppressed] * size, object).reshape(size, -1),
                **{name: np.full([size], value, dtype) for name, (value, dtype) in options.items()},
            }
            outputs = self._signature(**{k: self._tf.constant(v) for k, v in inputs.items()})
            hypotheses = outputs["hypotheses"].numpy()
            scores = outputs["scores"].numpy()
            if return_attention:
                tokens, alignments = outputs["tokens"].numpy(), outputs["alignments"].numpy()
                weights = outputs["attention"].numpy()  # [b, N, T, S]
                source_lengths = self._lengths([source[i] for i in rows], 1, "tokens")
            for row, i in enumerate(rows):
                texts = [h.decode("utf-8") for h in hypotheses[row][:num_hypotheses]]
                kept = [float(s) for s in scores[row][:num_hypotheses]] if return_scores else []
                results[i] = TranslationResult(texts, kept)
                if return_attention:
                    width = min(source_lengths[row], self.max_input_length or source_lengths[row])
                    for n in range(num_hypotheses):
                        length = sum(1 for token in tokens[row, n] if token)
                        results[i].attention.append(weights[row, n, :length, :width].tolist())
                        results[i].alignments.append(alignments[row, n, :length].tolist())
        return results

    def _signature_inputs(self):
        return set(self._signature.structured_input_signature[1])

    def _require_input(self, name):
        if name not in self._signature_inputs():
            raise ValueError(
                f"{self.model_path}'s `{self.SIGNATURE}` has no `{name}` input (an export from an "
                "older version): export the run again with `python -m keras_attention.export RUN`"
            )

    def score_batch(self, source, target, *, max_batch_size=0, batch_type="examples"):
        """Scores each of `target` as the translation of its `source` (lists
        of texts): one `ScoringResult` per pair, in order, its tokens' log
        probabilities with the end token's, without length penalty (as
        CTranslate2's `score_batch`). `max_batch_size`, `batch_type`: as in
        `translate_batch`."""
        source, target = _texts("source", source), _texts("target", target)
        if len(target) != len(source):
            raise ValueError(
                f"`target` needs one text per source text: {len(target)} for {len(source)}"
            )
        signature = self._scoring_signature()
        results = [None] * len(source)
        for rows in _batches(
            self._lengths(source, max_batch_size, batch_type), max_batch_size, batch_type
        ):
            outputs = signature(
                source=self._tf.constant([source[i] for i in rows], self._tf.string),
                target=self._tf.constant([target[i] for i in rows], self._tf.string),
            )
            tokens, log_probs = outputs["tokens"].numpy(), outputs["log_probs"].numpy()
            for row, i in enumerate(rows):
                kept = [t.decode("utf-8") for t in tokens[row] if t]
                results[i] = ScoringResult(kept, [float(x) for x in log_probs[row][: len(kept)]])
        return results

    def translate_iterable(
        self, source, target_prefix=None, max_batch_size=32, batch_type="examples", **options
    ):
        """Translates an iterable of texts lazily; yields a
        `TranslationResult` per text, in order. As CTranslate2 does, it
        reads 16 batches' worth of texts at a time and translates them
        sorted by length, in batches of `max_batch_size` texts or tokens
        (`batch_type`). The other arguments are `translate_batch`'s."""
        _check_batching(max_batch_size, batch_type)
        if max_batch_size < 1:
            raise ValueError(f"`max_batch_size` must be >= 1. Received: {max_batch_size!r}")
        read_size = max_batch_size * 16 if max_batch_size > 1 else max_batch_size
        for texts, prefixes in self._read(source, target_prefix, read_size, batch_type):
            yield from self.translate_batch(
                texts, prefixes, max_batch_size=max_batch_size, batch_type=batch_type, **options
            )

    def translate_file(
        self,
        source_path,
        output_path,
        target_path=None,
        max_batch_size=32,
        with_scores=False,
        **options,
    ):
        """Translates `source_path` (UTF-8, one text a line) into
        `output_path`, one translation a line, written whole or not at all.
        `target_path`: an optional file of target prefixes, a line each.
        With `num_hypotheses` above 1, each text's hypotheses are lines of
        their own; with `with_scores`, a line is `score ||| translation`.
        Returns a `TranslationStats`."""
        start = time.perf_counter()
        source = read_lines(source_path)
        prefixes = read_lines(target_path) if target_path is not None else None
        if prefixes is not None and len(prefixes) != len(source):
            raise ValueError(
                f"{target_path} has {len(prefixes)} lines and {source_path} {len(source)}: "
                "a target prefix is needed for each text"
            )
        results = self.translate_iterable(
            source,
            prefixes,
            max_batch_size,
            return_scores=with_scores,
            **options,
        )
        lines, tokens = [], 0
        for result in results:
            for index, hypothesis in enumerate(result.hypotheses):
                tokens += len(hypothesis.split())
                lines.append(
                    f"{result.scores[index]} ||| {hypothesis}" if with_scores else hypothesis
                )
        write_atomically(Path(output_path), "".join(line + "\n" for line in lines))
        elapsed = (time.perf_counter() - start) * 1000
        return TranslationStats(tokens, len(source), elapsed)


def read_lines(path):
    """The lines of a UTF-8 text file, without their ends; a line that is
    not UTF-8 is an error naming the file and the line."""
    with open(path, "rb") as file:
        return decode_lines(file, path)


def decode_lines(lines, name):
    """Byte lines (an open binary file, say) -> str lines without their
    ends; a line that is not UTF-8 is an error naming `name` and the line."""
    texts = []
    for number, line in enumerate(lines, 1):
        try:
            texts.append(line.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError as error:
            raise ValueError(f"{name}, line {number}, is not UTF-8: {error}") from None
    return texts


def _texts(name, values, allow_none=False):
    """A list of str (or None where allowed); tokens (lists) are refused."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"`{name}` must be a list of texts, not one text: {values!r}")
    values = list(values)
    for value in values:
        if value is None and allow_none:
            continue
        if not isinstance(value, str):
            raise TypeError(
                f"`{name}` must be a list of texts (str): this Translator takes text, not "
                f"tokens. Received an item {value!r}"
            )
    return values


def _option_values(api, arguments):
    """`api`'s options ("translator" or "generator", as `option_table` lists
    them, in its signature's order): `{input name: (value, numpy dtype)}`,
    each value from `arguments` (the method's `locals()`)."""
    from keras_attention.decoding import option_table

    return {
        option_table.input_name(option, api): (
            arguments[option_table.input_name(option, api)],
            np.dtype(option.dtype).type,
        )
        for option in option_table.options_of(api)
    }


def _check_options(options):
    for name, (value, dtype) in options.items():
        expected = bool if dtype is np.bool_ else (float if dtype is np.float32 else int)
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise TypeError(f"`{name}` must be a {expected.__name__}. Received: {name}={value!r}")


def _batches(lengths, max_batch_size, batch_type):
    """Row indices, batch by batch, cut as CTranslate2 cuts them: all at
    once (`max_batch_size` 0); or sorted longest first, then cut so that
    a batch holds at most `max_batch_size` texts (`"examples"`) or, its
    padding counted, tokens: its number of texts times its longest
    text's tokens (`"tokens"`; a longer text is a batch of its own).
    `lengths`: each text's length (its tokens, for `"tokens"`)."""
    _check_batching(max_batch_size, batch_type)
    rows = list(range(len(lengths)))
    if not max_batch_size:
        return [rows] if rows else []
    rows.sort(key=lambda i: -lengths[i])
    widths = [1 if batch_type == "examples" else lengths[i] for i in rows]
    batches = []
    while (cut := _first_over(widths, max_batch_size)) is not None:
        batches.append(rows[:cut])
        rows, widths = rows[cut:], widths[cut:]
    return batches + [rows] if rows else batches


def _first_over(lengths, size):
    """How many of `lengths` fit in `size` tokens, padding counted (at
    least one), when the next would not fit; None when all fit."""
    widest = 0
    for count, length in enumerate(lengths):
        widest = max(widest, length)
        if count and (count + 1) * widest > size:
            return count
    return None


def _check_batching(max_batch_size, batch_type):
    if batch_type not in BATCH_TYPES:
        raise ValueError(f"`batch_type` must be one of {BATCH_TYPES}. Received: {batch_type!r}")
    if (
        isinstance(max_batch_size, bool)
        or not isinstance(max_batch_size, int)
        or max_batch_size < 0
    ):
        raise ValueError(f"`max_batch_size` must be an integer >= 0. Received: {max_batch_size!r}")


def _set_threads(tf, inter_threads, intra_threads):
    for name, value, setter, getter in (
        (
            "inter_threads",
            inter_threads,
            tf.config.threading.set_inter_op_parallelism_threads,
            tf.config.threading.get_inter_op_parallelism_threads,
        ),
        (
            "intra_threads",
            intra_threads,
            tf.config.threading.set_intra_op_parallelism_threads,
            tf.config.threading.get_intra_op_parallelism_threads,
        ),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"`{name}` must be an integer >= 0. Received: {name}={value!r}")
        if value and getter() != value:
            try:
                setter(value)
            except RuntimeError:
                raise RuntimeError(
                    f"`{name}={value}` cannot be set: TensorFlow already runs with "
                    f"{getter()} (set it before TensorFlow starts, or leave it 0)"
                ) from None
