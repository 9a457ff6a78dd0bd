"""tf.data pipelines: tokenise, add start/end ids, batch by length, pad."""

import tensorflow as tf

from keras_attention.data.tokenizers import END_ID, START_ID


def translation_batches(
    pairs,
    source_tokenizer,
    target_tokenizer,
    batch_size,
    max_length,
    shuffle_buffer=0,
    seed=0,
    drop_remainder=False,
):
    """`(source text, target text)` pairs -> batches for an encoder-decoder.

    Each batch is `({"source_ids": [B, S], "target_ids": [B, T]}, labels [B, T])`
    where `target_ids` is `<s> y1 .. yn` and the labels `y1 .. yn </s>`
    (teacher forcing). Sequences longer than `max_length` are truncated;
    batches group sequences of similar length and pad with 0.
    """

    def encode(source, target):
        source_ids = source_tokenizer.tokenize(source)[:max_length]
        target_ids = target_tokenizer.tokenize(target)[: max_length - 1]
        decoder_input = tf.concat([[START_ID], target_ids], axis=0)
        labels = tf.concat([target_ids, [END_ID]], axis=0)
        return {"source_ids": source_ids, "target_ids": decoder_input}, labels

    dataset = pairs
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return _batch_by_length(
        dataset,
        length=lambda inputs, labels: tf.shape(inputs["source_ids"])[0],
        batch_size=batch_size,
        max_length=max_length,
        drop_remainder=drop_remainder,
    )


def language_model_batches(
    texts, tokenizer, batch_size, max_length, shuffle_buffer=0, seed=0, drop_remainder=False
):
    """Texts -> `(token_ids [B, T], labels [B, T])`: `<s> x1 .. xn` in, the
    same shifted by one, `x1 .. xn </s>`, as labels."""

    def encode(text):
        ids = tokenizer.tokenize(text)[: max_length - 1]
        return tf.concat([[START_ID], ids], axis=0), tf.concat([ids, [END_ID]], axis=0)

    dataset = texts
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return _batch_by_length(
        dataset, lambda ids, labels: tf.shape(ids)[0], batch_size, max_length, drop_remainder
    )


def classification_batches(
    pairs, tokenizer, batch_size, max_length, shuffle_buffer=0, seed=0, drop_remainder=False
):
    """`(text, label)` pairs -> `(token_ids [B, T], labels [B])` batches."""

    def encode(text, label):
        return tokenizer.tokenize(text)[:max_length], label

    dataset = pairs
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return _batch_by_length(
        dataset, lambda ids, label: tf.shape(ids)[0], batch_size, max_length, drop_remainder
    )


def _batch_by_length(dataset, length, batch_size, max_length, drop_remainder):
    """Batches of similar lengths (less padding), padded with 0, prefetched."""
    boundaries = [b for b in (8, 16, 32, 64, 128, 256) if b < max_length]
    return dataset.bucket_by_sequence_length(
        element_length_func=length,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
        drop_remainder=drop_remainder,
    ).prefetch(tf.data.AUTOTUNE)
