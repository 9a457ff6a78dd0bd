"""What an encoder-decoder attended to while it produced an answer: the
last decoder layer's cross-attention, read back by teacher forcing, and
CTranslate2's alignments (`return_attention`, `replace_unknowns`).

The decoder is causal, so feeding it `<s> y1 .. y(T-1)` in one pass gives,
at row t, exactly the attention it had while it produced y_t in the
search: the attention is read after the search, from its answers, with
one more pass of the model, not carried through the beam loop.

The model must have `attention_scores(inputs)` (the `Transformer` and
`Seq2SeqAttention` do), whose `"decoder_cross_attention"` is a list, one
`[B, H, T, S]` per decoder layer.
"""

from keras import ops

from keras_attention.decoding._loop import first_argmax
from keras_attention.utils import END_ID, PAD_ID, START_ID


def decoder_inputs(output_ids, start_id=START_ID):
    """`<s> y1 .. y(T-1)` for an answer `y1 .. yT` `[B, T]`: teacher-forced,
    row t of the decoder's attention is what it attended to while
    producing y_t (the way attention pictures are drawn)."""
    start = ops.full([ops.shape(output_ids)[0], 1], start_id, dtype=output_ids.dtype)
    return ops.concatenate([start, output_ids[:, :-1]], axis=1)


def cross_attention(model, source_ids, output_ids, start_id=START_ID):
    """The last decoder layer's cross-attention `[B, H, T, S]` (H = 1 for
    the RNN), float32, while the model produced `output_ids` `[B, T]` (an
    answer, with or without its end token), teacher-forced
    (`decoder_inputs`)."""
    inputs = {"source_ids": source_ids, "target_ids": decoder_inputs(output_ids, start_id)}
    return ops.cast(model.attention_scores(inputs)["decoder_cross_attention"][-1], "float32")


def alignments(model, source_ids, hypothesis_ids, start_id=START_ID, end_id=END_ID):
    """CTranslate2's `return_attention` for a search's answers: for each
    token of each hypothesis, the last decoder layer's cross-attention
    averaged over its heads (what `ctranslate2.Translator` returns with a
    model whose `alignment_heads` is 0, all heads), and the source position
    it weighs most.

    As in CTranslate2, every token of a hypothesis has its attention (a
    target prefix's too: the attention while it was read), and the end
    token has none.

    Args:
        source_ids: int `[B, S]`, 0-padded.
        hypothesis_ids: int `[B, N, T]`, N hypotheses per source (as
            `search` returns them: each with its target prefix, then its
            end token, 0-padded; an end token is optional).

    Returns:
        `(positions, attention)`: int32 `[B, N, T]`, the source position
        each token weighs most (the first of equals), -1 at the end token,
        padding, and where the source is empty; and float32
        `[B, N, T, S]`, the head-averaged weights (0 where there is no
        position).
    """
    hypothesis_ids = ops.cast(hypothesis_ids, "int32")
    source_ids = ops.cast(source_ids, "int32")
    batch_size, count, length = ops.shape(hypothesis_ids)
    width = ops.shape(source_ids)[1]
    answers = ops.reshape(hypothesis_ids, (batch_size * count, length))  # [B * N, T]
    sources = ops.repeat(source_ids, count, axis=0)  # [B * N, S]
    weights = ops.mean(cross_attention(model, sources, answers, start_id), axis=1)  # [B * N, T, S]
    in_source = (sources != PAD_ID)[:, None, :]  # [B * N, 1, S]
    positions = first_argmax(ops.where(in_source, weights, -1.0))  # [B * N, T]
    before_end = ops.cumsum(ops.cast(answers == end_id, "int32"), axis=1) == 0
    has_source = ops.any(in_source, axis=2)  # [B * N, 1]
    is_token = (answers != PAD_ID) & before_end & has_source  # [B * N, T]
    positions = ops.where(is_token, positions, -1)
    weights = ops.where(is_token[:, :, None] & in_source, weights, 0.0)
    return (
        ops.reshape(positions, (batch_size, count, length)),
        ops.reshape(weights, (batch_size, count, length, width)),
    )
