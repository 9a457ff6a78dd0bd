"""Batched decoding for every model of the zoo: greedy, beam search, sampling.

The loops talk to a model only through the `Decodable` protocol below, so a
new model decodes (and exports) by implementing it.

The loops are `keras.ops.while_loop`s over fixed-size buffers, so they trace
into a `tf.function` (and compile with XLA) and export in a SavedModel. They
stop early once every sequence of the batch has produced the end token.

Token ids: 0 is padding (never generated), `start_id` (default 1) starts a
target, `end_id` (default 2) ends it.

`search` decodes with CTranslate2's options (`DecodingOptions`: n-best
lists, target prefixes, its length penalty and stopping rule, repetition
penalties, banned n-grams and sequences, length bounds, sampling), as its
`Translator.translate_batch`; `generate` continues a language model's
prompts with the same options, as its `Generator.generate_batch`.
`score_targets` gives each token of given answers its log-probability
(its `Translator.score_batch`), `score_sequences` each token of given
texts under a language model (its `Generator.score_batch`); `alignments`
the source position each token of the answers attended to most
(CTranslate2's `return_attention`), read back by teacher forcing
(`cross_attention`).

The package: `greedy.py` (`greedy_search`), `sampling.py` (`sample`,
`filter_logits`, `gumbel_noise`), `beam.py` (`beam_search`,
`best_extensions`), `constraints.py` (rules applied to a step's logits),
`options.py` (`DecodingOptions`, `search`), `option_table.py` (each
decoding option once: its dtype, defaults, names, range and flag; what
lists the options is made from it), `alignments.py`
(`alignments`, `cross_attention`, `decoder_inputs`), and `_loop.py`, what they share
(the loop that drops finished rows, the one-best loop of greedy search and
sampling, `Scoring`: how hypotheses are scored and rows stopped).
"""

from typing import Protocol

from keras_attention.decoding._loop import first_argmax
from keras_attention.decoding.alignments import alignments, cross_attention, decoder_inputs
from keras_attention.decoding.beam import beam_search, best_extensions, most_hypotheses
from keras_attention.decoding.constraints import Constraints
from keras_attention.decoding.greedy import greedy_search
from keras_attention.decoding.options import (
    DecodingOptions,
    generate,
    score_sequences,
    score_targets,
    search,
)
from keras_attention.decoding.sampling import filter_logits, gumbel_noise, sample, sampling_choice
from keras_attention.utils import NEG_INF

__all__ = [
    "NEG_INF",
    "Constraints",
    "Decodable",
    "DecodingOptions",
    "alignments",
    "beam_search",
    "best_extensions",
    "cross_attention",
    "decoder_inputs",
    "filter_logits",
    "first_argmax",
    "generate",
    "greedy_search",
    "gumbel_noise",
    "most_hypotheses",
    "sample",
    "sampling_choice",
    "score_sequences",
    "score_targets",
    "search",
]


class Decodable(Protocol):
    """What a model provides to be decoded (`Transformer`, `Seq2SeqAttention`
    and `TransformerLM` do).

    `is_decoder_only`: True for a language model, whose inputs are prompts
    (`[B, P]`, right-padded with 0) that decoding continues, returning each
    prompt with its continuation. False for an encoder-decoder, whose inputs
    are source ids; decoding starts from `start_id` and returns only what
    it generated.

    `suppressed_ids` (optional): token ids never generated, which still
    count in each step's softmax (a converted Marian model's `<pad>`).

    `attention_scores(inputs)` (optional, an encoder-decoder's): every
    layer's attention weights for `{"source_ids", "target_ids"}`, the
    decoder's cross-attention under `"decoder_cross_attention"` (a list of
    `[B, H, T, S]`); `alignments` reads the last.
    """

    is_decoder_only: bool

    def decoding_start(self, inputs, max_length, use_cache=True):
        """Runs what is computed once (the encoder, the cross-attention keys
        and values) and returns the state the loop carries (KV caches, RNN
        states): a dict of tensor structures, each tensor batch first. What
        is fixed for a sentence (the encoder's output, the source mask, the
        cross-attention keys and values) goes under `"context"`: beam
        search computes it once per sentence and never reorders it."""

    def decoding_step(self, token_ids, index, state):
        """Float32 logits `[B, V]` for the token after position `index` of
        `token_ids [B, max_length]`, and the new state. With a cache only
        position `index` is run."""
