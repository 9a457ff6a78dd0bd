"""tf.data pipelines: tokenise, add start/end ids, batch by length, pad.

Every function takes the same batching arguments: `batch_size`,
`max_length` (longer sequences are truncated, or with `strict=True` stop the
pipeline with an error that says so), `shuffle_buffer` (0: no shuffling)
with its `seed` (one order, the same every time the dataset is read: Keras
on JAX reads a training set once to build the model and again to train,
and a resumed run must see the batches the stopped one would have; a new
order needs a new seed), `drop_remainder`, and `bucket_shapes`. Batches
group sequences of similar length. Without `bucket_shapes` each batch is
padded to its longest sequence: any width. With it, for a compiled step
(XLA, `jax.jit`), which compiles anew for every shape: full batches
(`drop_remainder`, for training) are padded further, to the next of a few
lengths (`length_buckets`: 8, 16, 32, ..., `max_length`), so the step
compiles a few times and never runs on more padding than that; batches
that keep every example (evaluation) are padded to `max_length`, in order.

With `batch_tokens` (Marian's and fairseq's batches by tokens), batches
are cut by a count of tokens instead of sentences: a batch of sequences
padded to a width W holds `batch_tokens // W` of them (`batch_rows`), so a
batch of short sentences holds many and one of long sentences few, and
every batch costs about the same. A batch's width is bounded by its bucket
(8, 16, 32, ..., `max_length`), which sets its rows; a pair's length is
then its longer side's. `batch_size` is not used.
"""

import tensorflow as tf

from keras_attention.data.tokenizers import END_ID, START_ID, prompt_start


def truncate(ids, limit, strict=False, what="sequence"):
    """The first `limit` ids; with `strict`, an error if there are more."""
    if strict:
        tf.debugging.assert_less_equal(
            tf.size(ids),
            limit,
            message=f"A {what} has more than {limit} tokens (max_length, strict=True)",
        )
    return ids[:limit]


def translation_batches(pairs, source_tokenizer, target_tokenizer, strict=False, **batching):
    """`(source text, target text)` pairs -> batches for an encoder-decoder:
    `({"source_ids": [B, S], "target_ids": [B, T]}, labels [B, T])`, where
    `target_ids` is `<s> y1 .. yn` and the labels `y1 .. yn </s>` (teacher
    forcing). A target keeps `max_length - 1` tokens, to leave room for
    `<s>` / `</s>`."""
    max_length = batching["max_length"]

    def encode(source, target):
        source_ids = truncate(source_tokenizer.tokenize(source), max_length, strict, "source")
        target_ids = truncate(target_tokenizer.tokenize(target), max_length - 1, strict, "target")
        decoder_input = tf.concat([[START_ID], target_ids], axis=0)
        labels = tf.concat([target_ids, [END_ID]], axis=0)
        return {"source_ids": source_ids, "target_ids": decoder_input}, labels

    def length(inputs, labels):
        if batching.get("batch_tokens"):  # the longer side sets the batch's width
            return tf.maximum(tf.shape(inputs["source_ids"])[0], tf.shape(labels)[0])
        return tf.shape(inputs["source_ids"])[0]

    return _batches(pairs, encode, length, **batching)


def language_model_batches(texts, tokenizer, strict=False, pack=False, **batching):
    """Texts -> `(token_ids [B, T], labels [B, T])`: `<s> x1 .. xn` in, the
    same shifted by one, `x1 .. xn </s>`, as labels. (A tokenizer whose
    prompts start with no token, GPT-2's and Qwen2's: `x1 .. xn` in,
    `x2 .. xn </s>` as labels.)

    With `pack`, the texts are joined into one stream, `<s> text </s>` after
    `<s> text </s>` (`text </s>` after `text </s>`), and cut into windows of
    exactly `max_length` tokens: long-context training, with no padding, on
    texts of any length (the stream's last part that fills no window is
    left out)."""
    max_length = batching["max_length"]
    if pack:
        return _packed_windows(texts, tokenizer, **batching)
    start = prompt_start(tokenizer)

    def encode(text):
        ids = truncate(tokenizer.tokenize(text), max_length - len(start), strict, "text")
        inputs = tf.concat([tf.constant(start, tf.int32), ids], axis=0)
        return inputs, tf.concat([inputs[1:], [END_ID]], axis=0)

    return _batches(texts, encode, lambda ids, labels: tf.shape(ids)[0], **batching)


def _packed_windows(
    texts,
    tokenizer,
    batch_size,
    max_length,
    shuffle_buffer=0,
    seed=0,
    batch_tokens=None,
    **unused_batching,
):
    """`language_model_batches(pack=True)`: every window has the same
    length, so batches need neither buckets nor padding."""
    if shuffle_buffer:
        texts = texts.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=False)

    start = tf.constant(prompt_start(tokenizer), tf.int32)

    def encode(text):
        return tf.concat([start, tokenizer.tokenize(text), [END_ID]], axis=0)

    stream = texts.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
    windows = stream.batch(max_length + 1, drop_remainder=True)  # inputs and labels, offset by 1
    pairs = windows.map(lambda window: (window[:-1], window[1:]))
    # Full batches only: each holds batch_size windows of max_length tokens.
    rows = batch_rows(max_length, batch_size, batch_tokens)
    return pairs.batch(rows, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def classification_batches(pairs, tokenizer, strict=False, **batching):
    """`(text, label)` pairs -> `(token_ids [B, T], labels [B])` batches."""
    max_length = batching["max_length"]

    def encode(text, label):
        return truncate(tokenizer.tokenize(text), max_length, strict, "text"), label

    return _batches(pairs, encode, lambda ids, label: tf.shape(ids)[0], **batching)


def _batches(
    dataset,
    encode,
    length,
    batch_size,
    max_length,
    shuffle_buffer=0,
    seed=0,
    drop_remainder=False,
    bucket_shapes=False,
    batch_tokens=None,
):
    """Shuffles, encodes, batches and pads (see the module docstring)."""
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=False)
    dataset = dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if bucket_shapes and not drop_remainder:
        # Every example kept (evaluation): in order, one width. Buckets
        # would each end with a smaller batch, a compile of its own.
        shapes = tf.nest.map_structure(
            lambda spec: [max_length] * spec.shape.rank, dataset.element_spec
        )
        rows = batch_rows(max_length, batch_size, batch_tokens)
        return dataset.padded_batch(rows, padded_shapes=shapes).prefetch(tf.data.AUTOTUNE)
    buckets = length_buckets(max_length)
    # Bucket i holds the lengths from buckets[i - 1] to buckets[i]: at most
    # buckets[i] wide, which sets its rows under batch_tokens.
    batched = dataset.bucket_by_sequence_length(
        element_length_func=length,
        bucket_boundaries=buckets[:-1],
        bucket_batch_sizes=[batch_rows(width, batch_size, batch_tokens) for width in buckets],
        drop_remainder=drop_remainder,
    )
    if bucket_shapes:
        batched = batched.map(
            lambda *batch: tf.nest.map_structure(lambda x: pad_to_bucket(x, buckets), batch)
        )
    return batched.prefetch(tf.data.AUTOTUNE)


def batch_rows(width, batch_size, batch_tokens=None):
    """How many sequences a batch at most `width` tokens wide holds:
    `batch_size`, or with `batch_tokens` as many as fit in that many tokens."""
    if not batch_tokens:
        return batch_size
    if batch_tokens < width:
        raise ValueError(
            f"batch_tokens={batch_tokens} holds no sequence of {width} tokens "
            "(max_length): give at least max_length"
        )
    return batch_tokens // width


def length_buckets(limit, shortest=8):
    """A few lengths to pad to: powers of two from `shortest`, then `limit`
    (the longest a sequence may be)."""
    lengths = []
    while shortest < limit:
        lengths.append(shortest)
        shortest *= 2
    return [*lengths, limit]


def bucket_of(length, buckets):
    """The first of `buckets` (ascending) >= `length` (a scalar tensor),
    or the last."""
    sizes = tf.constant(buckets, tf.int32)
    return tf.reduce_min(tf.where(sizes >= length, sizes, sizes[-1]))


def pad_to_bucket(x, buckets):
    """Pads `x` `[B, T, ...]` with 0 (padding) along T to the first bucket
    length >= T. A compiled program (XLA, `jax.jit`) compiles anew for every
    shape (seconds): a few lengths cover every batch, and padding changes
    nothing at the real positions. An empty sequence (T = 0) stays empty;
    `[B]` (a classifier's labels) is left as it is."""
    if x.shape.rank < 2:
        return x
    width = tf.shape(x)[1]
    padding = tf.where(width > 0, bucket_of(width, buckets) - width, 0)
    return tf.pad(x, [[0, 0], [0, padding]] + [[0, 0]] * (x.shape.rank - 2))
