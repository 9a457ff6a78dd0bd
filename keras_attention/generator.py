"""`Generator`: CTranslate2's `Generator` API over a language model's
export.

A CTranslate2 user switches by changing the import:

    from keras_attention import Generator

    generator = Generator("runs/llama")
    results = generator.generate_batch(["The file"], max_length=32, sampling_topk=10)
    results[0].sequences  # ["The file was opened and ..."]

The methods and arguments are CTranslate2's, with one difference: they take
and return text, not tokens. The SavedModel tokenizes in its graph (the
`generate_batch` signature, which puts the start token first where the
model's prompts have one), so what runs here is what TF Serving runs.
"""

import dataclasses

import numpy as np

from keras_attention.translator import (
    ExportClient,
    ScoringResult,
    _batches,
    _check_batching,
    _check_options,
    _option_values,
    _texts,
)

__all__ = ["GenerationResult", "Generator", "ScoringResult"]


@dataclasses.dataclass
class GenerationResult:
    """One prompt's answer, as CTranslate2's: `sequences`, best first (texts,
    not tokens: each the prompt and its continuation, or the continuation
    alone with `include_prompt_in_result=False`), and their `scores` (empty
    unless asked for)."""

    sequences: list
    scores: list


class Generator(ExportClient):
    """Continues prompts with an export's `generate_batch` signature, with
    CTranslate2's method names, arguments and defaults.

    Args:
        model_path: a language model's export version folder, a TF Serving
            model folder (its highest version) or a run folder (the
            highest version of its export).
        device: "cpu" (TensorFlow places the work; "auto" is the same).
        inter_threads, intra_threads: int, TensorFlow's thread pools (0:
            TensorFlow's choice), as in `Translator`.
    """

    SIGNATURE = "generate_batch"
    KIND = "a language model's"

    def generate_batch(
        self,
        prompts,
        *,
        max_batch_size=0,
        batch_type="examples",
        beam_size=1,
        patience=1.0,
        num_hypotheses=1,
        length_penalty=1.0,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        disable_unk=False,
        suppress_sequences=None,
        max_length=512,
        min_length=0,
        include_prompt_in_result=True,
        return_scores=False,
        sampling_topk=1,
        sampling_topp=1.0,
        sampling_temperature=1.0,
        seed=0,
    ):
        """Continues each prompt; returns one `GenerationResult` per
        prompt, in order.

        Args:
            prompts: list of str, the prompts as text (not tokens: no start
                token to add, the export adds it where the model's prompts
                have one). CTranslate2 calls them `start_tokens`.
            max_batch_size, batch_type: as in `Translator.translate_batch`
                (with "tokens", a batch's prompts times its longest
                prompt's tokens).
            beam_size, patience, num_hypotheses, length_penalty,
            repetition_penalty, no_repeat_ngram_size, disable_unk,
            max_length, min_length, include_prompt_in_result,
            sampling_topk, sampling_topp, sampling_temperature: as
                CTranslate2's (`keras_attention.decoding.generate` says what
                each counts); the same for every prompt. With the prompt in
                the result, `max_length` counts the prompt's tokens too.
            suppress_sequences: optional list of str, texts never produced
                (each tokenized as a prompt is, without the start token).
            return_scores: bool, fill each result's `scores`.
            seed: int, where sampling draws from: the prompt at index i of
                `prompts` draws from `seed + i`, the same in any batch
                (CTranslate2 draws from one generator,
                `ctranslate2.set_random_seed`).
        """
        prompts = _texts("prompts", prompts)
        suppressed = _texts("suppress_sequences", suppress_sequences or [""])
        options = _option_values("generator", locals())
        _check_options(options)
        options.pop("seed")  # (each prompt's own: below)
        results = [None] * len(prompts)
        for rows in _batches(
            self._lengths(prompts, max_batch_size, batch_type), max_batch_size, batch_type
        ):
            size = len(rows)
            inputs = {
                "prompt": np.array([prompts[i] for i in rows], object),
                "suppress_sequences": np.array([suppressed] * size, object).reshape(size, -1),
                "seed": np.array([(seed + i) % 2**31 for i in rows], np.int32),
                **{name: np.full([size], value, dtype) for name, (value, dtype) in options.items()},
            }
            outputs = self._signature(**{k: self._tf.constant(v) for k, v in inputs.items()})
            sequences, scores = outputs["sequences"].numpy(), outputs["scores"].numpy()
            for row, i in enumerate(rows):
                texts = [s.decode("utf-8") for s in sequences[row][:num_hypotheses]]
                kept = [float(s) for s in scores[row][:num_hypotheses]] if return_scores else []
                results[i] = GenerationResult(texts, kept)
        return results

    def generate_iterable(self, prompts, max_batch_size=32, batch_type="examples", **options):
        """Continues an iterable of prompts (text) lazily; yields a
        `GenerationResult` per prompt, in order. As CTranslate2 does, it
        reads 16 batches' worth of prompts at a time and runs them sorted
        by length, in batches of `max_batch_size` prompts or tokens
        (`batch_type`). The other arguments are `generate_batch`'s; a
        `seed` counts from the first prompt of the iterable."""
        _check_batching(max_batch_size, batch_type)
        if max_batch_size < 1:
            raise ValueError(f"`max_batch_size` must be >= 1. Received: {max_batch_size!r}")
        read_size = max_batch_size * 16 if max_batch_size > 1 else max_batch_size
        seed, done = options.pop("seed", 0), 0
        for texts, _ in self._read(prompts, None, read_size, batch_type):
            yield from self.generate_batch(
                texts,
                max_batch_size=max_batch_size,
                batch_type=batch_type,
                seed=seed + done,
                **options,
            )
            done += len(texts)

    def score_batch(self, texts, *, max_batch_size=0, batch_type="examples"):
        """Scores each text (not tokens) under the model: one
        `ScoringResult` per text, in order, with its tokens after the first
        (the start token, where the model's prompts have one, is read, not
        scored) and each one's log-probability given those before it, as
        CTranslate2's `Generator.score_batch` (no end token is added).
        `max_batch_size`, `batch_type`: as in `generate_batch`."""
        texts = _texts("texts", texts)
        signature = self._scoring_signature()
        results = [None] * len(texts)
        for rows in _batches(
            self._lengths(texts, max_batch_size, batch_type), max_batch_size, batch_type
        ):
            outputs = signature(text=self._tf.constant([texts[i] for i in rows], self._tf.string))
            tokens, log_probs = outputs["tokens"].numpy(), outputs["log_probs"].numpy()
            for row, i in enumerate(rows):
                kept = [t.decode("utf-8") for t in tokens[row] if t]
                results[i] = ScoringResult(kept, [float(x) for x in log_probs[row][: len(kept)]])
        return results
