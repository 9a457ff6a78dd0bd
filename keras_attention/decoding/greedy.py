"""Greedy search: the most likely token at every step."""

from keras_attention.decoding._loop import _decode, _most_likely, decoding_length
from keras_attention.utils import END_ID, START_ID


def greedy_search(
    model,
    inputs,
    max_decoding_length=None,
    start_id=START_ID,
    end_id=END_ID,
    use_cache=True,
    *,
    max_new_tokens=None,
    max_length=None,
):
    """Picks the most likely token at every step.

    Args:
        model: a zoo model (`Transformer`, `Seq2SeqAttention`, `TransformerLM`).
        inputs: source ids `[B, S]`, or for a `TransformerLM` prompt ids
            `[B, P]` (right-padded with 0).
        max_decoding_length: int, the most tokens generated per sequence
            (the end token included); also an int32 tensor, a scalar or
            `[B]` (a limit per sequence). `max_new_tokens`, Hugging Face's
            name, is the same; `max_length`, its name before, still works
            for one release, with a FutureWarning.
        start_id, end_id: int, the start and end token ids.
        use_cache: bool, run only the newest position each step (KV cache,
            RNN state) instead of the whole prefix. Same tokens, less work.

    Returns:
        int32 ids: `[B, max_decoding_length]` generated tokens for
        encoder-decoders, `[B, P + max_decoding_length]` prompt and
        completion for language models (the largest `max_decoding_length`,
        when there is one per sequence); padded with 0 after the end token.
    """
    length = decoding_length(max_decoding_length, max_new_tokens, max_length)
    return _decode(model, inputs, length, start_id, end_id, use_cache, _most_likely)
