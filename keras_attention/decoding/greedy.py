"""Greedy search: the most likely token at every step."""

from keras_attention.decoding._loop import _decode, _most_likely
from keras_attention.utils import END_ID, START_ID


def greedy_search(model, inputs, max_length, start_id=START_ID, end_id=END_ID, use_cache=True):
    """Picks the most likely token at every step.

    Args:
        model: a zoo model (`Transformer`, `Seq2SeqAttention`, `TransformerLM`).
        inputs: source ids `[B, S]`, or for a `TransformerLM` prompt ids
            `[B, P]` (right-padded with 0).
        max_length: int, the most tokens generated per sequence; also an
            int32 tensor, a scalar or `[B]` (a limit per sequence).
        start_id, end_id: int, the start and end token ids.
        use_cache: bool, run only the newest position each step (KV cache,
            RNN state) instead of the whole prefix. Same tokens, less work.

    Returns:
        int32 ids: `[B, max_length]` generated tokens for encoder-decoders,
        `[B, P + max_length]` prompt and completion for language models
        (the largest `max_length`, when there is one per sequence); padded
        with 0 after the end token.
    """
    return _decode(model, inputs, max_length, start_id, end_id, use_cache, _most_likely)
