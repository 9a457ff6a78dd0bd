import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import compiled, examples, to_numpy
from hypothesis import given, settings
from hypothesis import strategies as st
from keras import ops

from keras_attention import decoding
from keras_attention.models import (
    build_seq2seq_attention,
    build_transformer,
    build_transformer_lm,
)

SOURCE = np.array([[5, 6, 7, 0, 0], [8, 9, 10, 11, 3], [4, 4, 0, 0, 0]], "int32")
PROMPT = np.array([[1, 5, 6, 0], [1, 7, 0, 0], [1, 3, 4, 9]], "int32")
MAX_LENGTH = 6


def make_model(name):
    keras.utils.set_random_seed(7)
    return {
        "transformer": lambda: build_transformer(20),
        "transformer_pre_norm": lambda: build_transformer(20, norm_first=True),
        "seq2seq_bahdanau_gru": lambda: build_seq2seq_attention(20),
        "seq2seq_luong_lstm_input_feeding": lambda: build_seq2seq_attention(
            20, cell="lstm", attention="luong", input_feeding=True
        ),
        "lm": lambda: build_transformer_lm(20),
    }[name]()


MODELS = [
    "transformer",
    "transformer_pre_norm",
    "seq2seq_bahdanau_gru",
    "seq2seq_luong_lstm_input_feeding",
    "lm",
]


def inputs_for(name):
    return PROMPT if name == "lm" else SOURCE


@pytest.mark.parametrize("name", MODELS)
def test_greedy_with_the_cache_equals_greedy_without(name):
    model, inputs = make_model(name), inputs_for(name)
    cached = to_numpy(decoding.greedy_search(model, inputs, MAX_LENGTH))
    uncached = to_numpy(decoding.greedy_search(model, inputs, MAX_LENGTH, use_cache=False))
    np.testing.assert_array_equal(cached, uncached)
    expected_width = MAX_LENGTH + (PROMPT.shape[1] if name == "lm" else 0)
    assert cached.shape == (3, expected_width)


@pytest.mark.parametrize("name", MODELS)
def test_beam_with_the_cache_equals_beam_without(name):
    model, inputs = make_model(name), inputs_for(name)
    cached, cached_scores = decoding.beam_search(model, inputs, MAX_LENGTH, beam_size=3)
    uncached, uncached_scores = decoding.beam_search(
        model, inputs, MAX_LENGTH, beam_size=3, use_cache=False
    )
    np.testing.assert_array_equal(to_numpy(cached), to_numpy(uncached))
    np.testing.assert_allclose(to_numpy(cached_scores), to_numpy(uncached_scores), atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_beam_size_one_equals_greedy(name):
    model, inputs = make_model(name), inputs_for(name)
    greedy = to_numpy(decoding.greedy_search(model, inputs, MAX_LENGTH))
    beam, _ = decoding.beam_search(model, inputs, MAX_LENGTH, beam_size=1)
    np.testing.assert_array_equal(to_numpy(beam), greedy)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_a_batch_decodes_like_each_item_alone(name, method):
    model, inputs = make_model(name), inputs_for(name)

    def run(x):
        if method == "greedy":
            return to_numpy(decoding.greedy_search(model, x, MAX_LENGTH))
        return to_numpy(decoding.beam_search(model, x, MAX_LENGTH, beam_size=3)[0])

    batch = run(inputs)
    for row in range(len(inputs)):
        alone = inputs[row : row + 1, : max(1, int((inputs[row] != 0).sum()))]  # no padding
        result = run(alone)
        width = result.shape[1]
        np.testing.assert_array_equal(result[0], batch[row, :width])
        assert np.all(batch[row, width:] == 0)


@pytest.mark.parametrize("name", ["transformer", "seq2seq_bahdanau_gru", "lm"])
@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_each_row_may_have_its_own_max_length(name, method):
    """`max_length` `[B]`: each row decodes as alone with its own. On
    TensorFlow in a graph, as the export does; on JAX eagerly (under
    `jax.jit` the buffer's size, the largest limit, must be known)."""
    model, inputs = make_model(name), inputs_for(name)
    limits = [2, MAX_LENGTH, 4]

    def run(x, max_length):
        if method == "greedy":
            return decoding.greedy_search(model, x, max_length)
        return decoding.beam_search(model, x, max_length, beam_size=2)[0]

    if keras.backend.backend() == "tensorflow":
        spec = [tf.TensorSpec([None, inputs.shape[1]], tf.int32), tf.TensorSpec([None], tf.int32)]
        run_batch = compiled(run, input_signature=spec)
    else:
        run_batch = run
    batch = to_numpy(run_batch(inputs, ops.convert_to_tensor(limits, "int32")))
    prompt_width = inputs.shape[1] if name == "lm" else 0
    assert batch.shape[1] == prompt_width + MAX_LENGTH  # room for the longest
    for row, limit in enumerate(limits):
        alone = to_numpy(run(inputs[row : row + 1], limit))[0]
        np.testing.assert_array_equal(batch[row, : len(alone)], alone)
        assert np.all(batch[row, len(alone) :] == 0)


class RowCounting:
    """A model that records how many batch items each decoding step runs
    on (`token_ids` has `group` rows per item: a beam's K)."""

    def __init__(self, model, group):
        self.model, self.group, self.batch_sizes = model, group, []
        self.is_decoder_only = model.is_decoder_only

    def decoding_start(self, *args, **kwargs):
        return self.model.decoding_start(*args, **kwargs)

    def decoding_step(self, token_ids, index, state):
        if token_ids.shape[0] is None:  # a TensorFlow graph of any batch size
            tf.py_function(self.count, [tf.shape(token_ids)[0]], [])  # (as it runs)
        else:
            self.count(token_ids.shape[0])
        return self.model.decoding_step(token_ids, index, state)

    def count(self, rows):
        size = int(rows) // self.group
        if size not in self.batch_sizes:
            self.batch_sizes.append(size)


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_finished_rows_leave_the_batch_and_each_row_decodes_as_alone(method):
    """17 rows with limits 1 ... 17 finish at different steps: the loop runs
    on all 17 until at most a quarter are left, then on 5 (17 / 4, rounded
    up), then on 2 (17 / 16). Each row's tokens are those it gets alone,
    per-row options (temperatures, seeds) included. On TensorFlow the same
    in a graph taking any batch size, as an export runs it: there one loop
    keeps only the unfinished rows whenever they are at most a quarter of
    its batch; and beam search the same in such a graph under XLA, as the
    compiled export runs it."""
    model = make_model("transformer")
    rng = np.random.default_rng(0)
    source = rng.integers(3, 20, (17, 4)).astype("int32")
    limits = rng.permutation(np.arange(1, 18)).astype("int32")
    temperatures = rng.choice([0.0, 0.5, 2.0], 17).astype("float32")
    seeds = np.arange(17, dtype="int32")

    def run(model, x, limits, temperatures, seeds):
        if method == "greedy":
            return decoding.greedy_search(model, x, limits)
        if method == "beam":
            return decoding.beam_search(model, x, limits, beam_size=2)[0]
        return decoding.sample(model, x, limits, temperature=temperatures, seed=seeds)

    counting = RowCounting(model, group=2 if method == "beam" else 1)
    options = [ops.convert_to_tensor(x) for x in (limits, temperatures, seeds)]
    eager = to_numpy(run(counting, source, *options))
    assert counting.batch_sizes == [17, 5, 2]
    if keras.backend.backend() == "tensorflow":
        spec = [tf.TensorSpec([None, 4], tf.int32), tf.TensorSpec([None], tf.int32)]
        spec += [tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.int32)]
        counting = RowCounting(model, group=counting.group)
        graph = compiled(lambda *args: run(counting, *args), input_signature=spec)
        np.testing.assert_array_equal(to_numpy(graph(source, *options)), eager)
        sizes = counting.batch_sizes
        assert sizes[0] == 17 and len(sizes) >= 3, sizes
        shrinks = zip(sizes[:-1], sizes[1:], strict=True)
        assert all(4 * smaller <= size for size, smaller in shrinks), sizes
        if method == "beam":
            batch = to_numpy(
                compiled(lambda *args: run(model, *args), input_signature=spec, jit_compile=True)(
                    source, limits, temperatures, seeds
                )
            )
            np.testing.assert_array_equal(batch, eager)

    # On TensorFlow traced once for every row (eagerly, each op is dispatched
    # on its own); on JAX as it is (under `jax.jit` the buffer's size, the
    # largest limit, must be known).
    def alone_run(*args):
        return run(model, *args)

    checked = range(17)
    if keras.backend.backend() == "tensorflow":
        alone_run = tf.function(alone_run)
    else:  # each alone run compiles anew: the rows on either side of each shrink
        checked = [list(limits).index(limit) for limit in (1, 12, 13, 15, 16, 17)]
    for row in checked:
        alone = to_numpy(
            alone_run(source[row : row + 1], *[option[row : row + 1] for option in options])
        )[0]
        np.testing.assert_array_equal(eager[row, : len(alone)], alone)
        assert np.all(eager[row, len(alone) :] == 0)


@pytest.mark.parametrize("name", ["transformer", "seq2seq_bahdanau_gru", "lm"])
def test_graph_and_xla_give_the_eager_tokens(name):
    model, inputs = make_model(name), inputs_for(name)
    eager = to_numpy(decoding.greedy_search(model, inputs, MAX_LENGTH))
    beam = to_numpy(decoding.beam_search(model, inputs, MAX_LENGTH, beam_size=2)[0])
    spec = [tf.TensorSpec([None, inputs.shape[1]], tf.int32)]
    greedy_xla = compiled(
        lambda x: decoding.greedy_search(model, x, MAX_LENGTH), spec, jit_compile=True
    )
    beam_graph = compiled(
        lambda x: decoding.beam_search(model, x, MAX_LENGTH, beam_size=2)[0], spec
    )
    np.testing.assert_array_equal(to_numpy(greedy_xla(inputs)), eager)
    np.testing.assert_array_equal(to_numpy(beam_graph(inputs)), beam)


def every_extension(log_probs, logits, k, normalized=False):
    """`decoding.best_extensions` the plain way: every candidate made, then
    `top_k` over all of them (`normalized`: the logits are log-probabilities)."""
    if normalized:
        candidates = logits + log_probs[..., None]
    else:
        largest = ops.max(logits, axis=-1, keepdims=True)
        log_sum = ops.log(ops.sum(ops.exp(logits - largest), axis=-1, keepdims=True))
        candidates = ((logits - largest) - log_sum) + log_probs[..., None]
    batch_size, beams, vocabulary_size = logits.shape
    return ops.top_k(ops.reshape(candidates, (batch_size, beams * vocabulary_size)), k)


@settings(max_examples=examples(40), deadline=None, derandomize=True)
@given(
    batch_size=st.integers(0, 3),
    beams=st.integers(1, 4),
    vocabulary_size=st.integers(1, 300),
    k=st.integers(1, 8),
    ties=st.booleans(),
    seed=st.integers(0, 2**16),
    normalized=st.booleans(),
)
def test_best_extensions_equal_top_k_over_every_extension(
    batch_size, beams, vocabulary_size, k, ties, seed, normalized
):
    """The same values and indices as `top_k` over every candidate, ties to
    the lower index, whatever the vocabulary's size (not a multiple of the
    block), with many equal logits and masked (NEG_INF) ones; and
    `first_argmax` is `np.argmax`."""
    rng = np.random.default_rng(seed)
    k = min(k, beams * vocabulary_size)
    logits = rng.normal(size=(batch_size, beams, vocabulary_size)).astype("float32")
    log_probs = rng.normal(size=(batch_size, beams)).astype("float32")
    if ties:
        logits = np.round(logits)
        logits[..., rng.integers(0, vocabulary_size, vocabulary_size // 3)] = -1e9
        log_probs[:, 1:] = log_probs[:, :1]
    blocks = compiled(
        lambda p, x: decoding.best_extensions(p, x, k, block_size=4, normalized=normalized),
        jit_compile=True,
    )
    plain = compiled(lambda p, x: every_extension(p, x, k, normalized), jit_compile=True)
    values, indices = blocks(log_probs, logits)
    expected_values, expected_indices = plain(log_probs, logits)
    np.testing.assert_array_equal(to_numpy(values), to_numpy(expected_values))
    np.testing.assert_array_equal(to_numpy(indices), to_numpy(expected_indices))
    if batch_size:
        flat = logits.reshape(-1, vocabulary_size)
        first = compiled(decoding.first_argmax, jit_compile=True)
        np.testing.assert_array_equal(to_numpy(first(flat)), np.argmax(flat, axis=-1))


def test_beam_search_over_blocks_finds_what_top_k_over_all_finds(monkeypatch):
    """With a vocabulary of many blocks, beam search returns the tokens and
    scores that a plain `top_k` over every candidate gives."""
    keras.utils.set_random_seed(3)
    model = build_transformer(700)
    source = np.array([[5, 600, 7, 0], [8, 9, 650, 11]], "int32")
    search = lambda: decoding.beam_search(model, source, 7, beam_size=3)  # noqa: E731
    tokens, scores = search()
    if keras.backend.backend() == "tensorflow":
        # A beam size given as a tensor, as the exports' per-request options.
        in_graph = tf.function(lambda x, k: decoding.beam_search(model, x, 7, beam_size=k)[0])
        np.testing.assert_array_equal(to_numpy(in_graph(source, tf.constant(3))), tokens)
    monkeypatch.setattr("keras_attention.decoding.beam.best_extensions", every_extension)
    expected_tokens, expected_scores = search()
    np.testing.assert_array_equal(to_numpy(tokens), to_numpy(expected_tokens))
    np.testing.assert_array_equal(to_numpy(scores), to_numpy(expected_scores))


def test_lm_keeps_the_prompt_and_continues_it():
    model = make_model("lm")
    tokens = to_numpy(decoding.greedy_search(model, PROMPT, MAX_LENGTH))
    lengths = (PROMPT != 0).sum(1)
    for row, length in enumerate(lengths):
        np.testing.assert_array_equal(tokens[row, :length], PROMPT[row, :length])
        generated = tokens[row, length:]
        assert generated[0] != 0  # something was generated
        assert len(generated) == MAX_LENGTH + PROMPT.shape[1] - length


class MarkovModel:
    """A stand-in model: next-token logits depend only on the previous token.

    Small enough to search exhaustively, so beam search can be checked
    against the true best sequence. It implements `decoding.Decodable` and
    nothing else, so the loops are shown to need nothing more.
    """

    is_decoder_only = False

    def __init__(self, table):
        self.table = ops.convert_to_tensor(table, "float32")  # [V, V]

    def decoding_start(self, inputs, max_length, use_cache=True):
        return {"inputs": ops.convert_to_tensor(inputs)}

    def decoding_step(self, token_ids, index, state):
        previous = ops.take(token_ids, index, axis=1)
        return ops.take(self.table, previous, axis=0), state


def test_beam_search_starts_each_sentence_once():
    """The encoder (`decoding_start`) runs on the B sentences, not on their
    B * K beams; the K beams of a sentence share its result."""

    class CountingModel(MarkovModel):
        def decoding_start(self, inputs, max_length, use_cache=True):
            self.start_rows = ops.shape(inputs)[0]
            return {"context": {"source": inputs}, **super().decoding_start(inputs, max_length)}

    model = CountingModel(early_end_table())
    decoding.beam_search(model, np.zeros((2, 1), "int32"), 3, beam_size=3)
    assert model.start_rows == 2


def log_softmax_without_padding(table):
    logits = table.copy()
    logits[:, 0] = -1e9
    logits = logits - logits.max(-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def exhaustive_scores(table, max_length, alpha, end_id=2, start_id=1):
    """Every finished sequence and its log-probability divided by
    |Y| ** alpha (CTranslate2's and Hugging Face's length penalty; |Y|
    counts the generated tokens, the end token included)."""
    log_probs = log_softmax_without_padding(table)
    vocabulary = range(1, table.shape[0])
    scores = {}
    for length in range(1, max_length + 1):
        for sequence in itertools.product(vocabulary, repeat=length):
            if end_id in sequence[:-1]:
                continue  # the end token ends a sequence
            tokens = (start_id, *sequence)
            total = sum(log_probs[a, b] for a, b in itertools.pairwise(tokens))
            if length < max_length and sequence[-1] != end_id:
                continue  # an unfinished sequence shorter than max_length is a prefix
            scores[sequence] = total / length**alpha
    return scores


def exhaustive_best(table, max_length, alpha):
    """The highest-scoring finished sequence and its score."""
    scores = exhaustive_scores(table, max_length, alpha)
    best = max(scores, key=scores.get)
    return list(best), scores[best]


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_finds_the_best_sequence(alpha, seed):
    table = np.random.default_rng(seed).normal(scale=2.0, size=(5, 5)).astype("float32")
    max_length = 3
    model = MarkovModel(table)
    # 4 generable tokens: 16 beams keep every prefix, so the search is exact.
    tokens, score = decoding.beam_search(
        model, np.zeros((1, 1), "int32"), max_length, beam_size=16, length_penalty=alpha
    )
    expected, expected_score = exhaustive_best(table, max_length, alpha)
    tokens = [t for t in to_numpy(tokens)[0] if t != 0]
    assert tokens == expected
    np.testing.assert_allclose(to_numpy(score)[0], expected_score, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_suppressed_ids_count_in_the_softmax_but_are_never_generated(seed):
    """A model's `suppressed_ids` (Hugging Face's `bad_words_ids`): the best
    sequence without them, each step's log-probabilities normalised over
    every token, them included."""
    table = np.random.default_rng(seed).normal(scale=2.0, size=(5, 5)).astype("float32")
    table[:, 3] += 3.0  # the suppressed token would often be the best
    model = MarkovModel(table)
    model.suppressed_ids = [3]
    tokens, score = decoding.beam_search(
        model, np.zeros((1, 1), "int32"), 3, beam_size=16, length_penalty=0.0
    )
    scores = {
        sequence: value
        for sequence, value in exhaustive_scores(table, 3, 0.0).items()
        if 3 not in sequence
    }
    best = max(scores, key=scores.get)
    assert [t for t in to_numpy(tokens)[0] if t != 0] == list(best)
    np.testing.assert_allclose(to_numpy(score)[0], scores[best], rtol=1e-5)
    greedy = to_numpy(decoding.greedy_search(model, np.zeros((1, 1), "int32"), 3))[0]
    assert 3 not in greedy.tolist()
    assert 3 in [int(np.argmax(row[1:])) + 1 for row in table]  # it would have been picked


@pytest.mark.parametrize("beam_size", [1, 4])
def test_all_beams_are_the_finished_hypotheses_best_first(beam_size):
    table = np.random.default_rng(5).normal(scale=2.0, size=(5, 5)).astype("float32")
    model, inputs = MarkovModel(table), np.zeros((2, 1), "int32")
    tokens, scores = decoding.beam_search(
        model, inputs, 3, beam_size=beam_size, return_all_beams=True
    )
    tokens, scores = to_numpy(tokens), to_numpy(scores)
    assert tokens.shape == (2, beam_size, 3) and scores.shape == (2, beam_size)
    best, best_score = decoding.beam_search(model, inputs, 3, beam_size=beam_size)
    np.testing.assert_array_equal(tokens[:, 0], to_numpy(best))
    np.testing.assert_allclose(scores[:, 0], to_numpy(best_score), rtol=1e-6)
    exact = exhaustive_scores(table, 3, 0.6)
    hypotheses = [tuple(int(t) for t in row if t != 0) for row in tokens[0]]
    assert len(set(hypotheses)) == beam_size  # distinct
    assert list(scores[0]) == sorted(scores[0], reverse=True)
    for hypothesis, score in zip(hypotheses, scores[0], strict=True):
        np.testing.assert_allclose(score, exact[hypothesis], rtol=1e-5)
    with pytest.raises(ValueError, match="return_all_beams"):
        decoding.beam_search(
            model, inputs, 3, beam_size=ops.convert_to_tensor(2), return_all_beams=True
        )


def early_end_table():
    """After the start token (1), the end token (2) is likely (0.3), but
    token 3 more so (0.69); after 3, tokens 5 (0.5) and 4 (0.45) keep the
    prefix ahead of the finished "</s>" for one more step; after 4 or 5
    every token is equally likely (0.2), so everything through 3 ends below
    "</s>" alone (log 0.3 = -1.20 against about -2.67, or -1.38 divided by
    3 ** 0.6)."""
    p = np.full((6, 6), 1e-9)
    p[1, [2, 3]] = [0.3, 0.69]
    p[1, [1, 4, 5]] = 0.01 / 3
    p[3, [5, 4]] = [0.5, 0.45]
    p[3, [1, 2, 3]] = 0.05 / 3
    p[[2, 4, 5], 1:] = 0.2
    return np.log(p).astype("float32")


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_a_finished_hypothesis_is_kept_when_live_ones_overtake_it_for_a_step(alpha):
    """Two beams: step 1 finishes "</s>" (-1.20) beside the live 3 (-0.37);
    step 2's two extensions of 3 both score above -1.20. A search that
    kept finished hypotheses in the beam's slots lost "</s>" there and
    returned 3 5 1 (-2.67); it must be kept aside and win."""
    table = early_end_table()
    tokens, score = decoding.beam_search(
        MarkovModel(table), np.zeros((2, 1), "int32"), 3, beam_size=2, length_penalty=alpha
    )
    expected, expected_score = exhaustive_best(table, 3, alpha)
    assert expected == [2]
    np.testing.assert_array_equal(to_numpy(tokens), [[2, 0, 0]] * 2)
    np.testing.assert_allclose(to_numpy(score), [expected_score] * 2, rtol=1e-6)


@settings(max_examples=examples(30), deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**16),
    alpha=st.sampled_from([0.0, 0.6, 1.0, 2.0]),
    max_length=st.integers(1, 4),
    scale=st.sampled_from([0.5, 2.0, 4.0]),
)
def test_beam_search_with_a_length_penalty_finds_the_best_sequence(seed, alpha, max_length, scale):
    """With as many beams as there are prefixes (3 generable tokens, up to 4
    long: 27 live prefixes at most), beam search is exhaustive search."""
    table = np.random.default_rng(seed).normal(scale=scale, size=(4, 4)).astype("float32")
    tokens, score = decoding.beam_search(
        MarkovModel(table),
        np.zeros((1, 1), "int32"),
        max_length,
        beam_size=27,
        length_penalty=alpha,
    )
    expected, expected_score = exhaustive_best(table, max_length, alpha)
    assert [t for t in to_numpy(tokens)[0] if t != 0] == expected
    np.testing.assert_allclose(to_numpy(score)[0], expected_score, rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.6, 1.0, 2.0])
def test_a_language_models_length_penalty_counts_only_what_it_generates(alpha):
    """A language model's prompt is given: n counts the tokens after it
    (its log-probability too), each prompt of the batch by its own length."""

    class MarkovLanguageModel(MarkovModel):
        is_decoder_only = True

    table = np.random.default_rng(7).normal(scale=2.0, size=(5, 5)).astype("float32")
    prompts = np.array([[1, 3, 0], [1, 4, 3]], "int32")
    tokens, scores = decoding.beam_search(
        MarkovLanguageModel(table), prompts, 3, beam_size=16, length_penalty=alpha
    )
    for row, prompt in enumerate(prompts):
        prompt = [t for t in prompt if t != 0]
        # The search goes on from the prompt's last token.
        scores_after = exhaustive_scores(table, 3, alpha, start_id=prompt[-1])
        best = max(scores_after, key=scores_after.get)
        assert [t for t in to_numpy(tokens)[row] if t != 0] == prompt + list(best)
        np.testing.assert_allclose(to_numpy(scores)[row], scores_after[best], rtol=1e-5)


def test_greedy_stops_at_the_end_token_and_pads_after_it():
    table = np.full((5, 5), -5.0, "float32")
    table[1, 3] = table[3, 4] = table[4, 2] = 5.0  # start -> 3 -> 4 -> end
    tokens = to_numpy(decoding.greedy_search(MarkovModel(table), np.zeros((2, 1)), 6))
    np.testing.assert_array_equal(tokens, [[3, 4, 2, 0, 0, 0]] * 2)


def test_sampling_is_reproducible_and_honours_top_k_and_top_p():
    model, inputs = make_model("transformer"), SOURCE
    first = to_numpy(decoding.sample(model, inputs, MAX_LENGTH, seed=3))
    again = to_numpy(decoding.sample(model, inputs, MAX_LENGTH, seed=3))
    np.testing.assert_array_equal(first, again)
    different = [to_numpy(decoding.sample(model, inputs, MAX_LENGTH, seed=s)) for s in range(4, 8)]
    assert any(not np.array_equal(first, d) for d in different)
    greedy = to_numpy(decoding.greedy_search(model, inputs, MAX_LENGTH))
    top_1 = to_numpy(decoding.sample(model, inputs, MAX_LENGTH, top_k=1, seed=0))
    nucleus = to_numpy(decoding.sample(model, inputs, MAX_LENGTH, top_p=1e-6, seed=0))
    np.testing.assert_array_equal(top_1, greedy)
    np.testing.assert_array_equal(nucleus, greedy)


def test_sampled_tokens_follow_the_softmax():
    """Gumbel-max over the hashed noise draws each token with its softmax
    probability: 4,000 sequences, each with its own seed, one step."""
    table = np.zeros((6, 6), "float32")
    table[1] = np.log([1e-9, 0.05, 0.1, 0.15, 0.3, 0.4])  # after the start token
    seeds = ops.arange(4000)
    tokens = to_numpy(decoding.sample(MarkovModel(table), np.zeros((4000, 1)), 1, seed=seeds))
    frequencies = np.bincount(tokens[:, 0], minlength=6) / 4000
    # Binomial standard deviation at p = 0.4 is 0.008; 0.03 is over 3.5 of them.
    np.testing.assert_allclose(frequencies, [0, 0.05, 0.1, 0.15, 0.3, 0.4], atol=0.03)
    # The temperature flattens it, and top-k / top-p cut its tail.
    flat = to_numpy(decoding.sample(MarkovModel(table * 0.5), np.zeros((4000, 1)), 1, seed=seeds))
    hot = to_numpy(decoding.sample(MarkovModel(table), np.zeros((4000, 1)), 1, 2.0, seed=seeds))
    np.testing.assert_array_equal(hot, flat)
    top_2 = to_numpy(decoding.sample(MarkovModel(table), np.zeros((4000, 1)), 1, top_k=2, seed=7))
    assert set(top_2[:, 0]) == {4, 5}
    top_p = to_numpy(decoding.sample(MarkovModel(table), np.zeros((4000, 1)), 1, top_p=0.6, seed=7))
    assert set(top_p[:, 0]) == {4, 5}  # 0.4 alone is short of 0.6; 0.4 + 0.3 is not


def test_per_sequence_options_and_seeds_answer_each_sequence_as_alone():
    """With a tensor of seeds and options, one value per sequence, a
    sequence's tokens do not depend on the others (what a server's batches
    need)."""
    model = make_model("lm")
    prompts = np.array([[1, 5, 6, 0], [1, 7, 0, 0], [1, 3, 4, 9], [1, 8, 0, 0]], "int32")
    options = {
        "temperature": np.array([1.0, 0.0, 0.7, 2.0], "float32"),  # 0: greedy
        "top_k": np.array([0, 3, 5, 0], "int32"),  # 0: no limit
        "top_p": np.array([0.9, 1.0, 0.0, 0.5], "float32"),  # 0 or 1: no limit
        "seed": np.array([11, 12, 13, -14], "int64"),
    }
    max_lengths = np.array([6, 2, 5, 4], "int32")

    def run(rows):
        tensors = {k: ops.convert_to_tensor(v[rows]) for k, v in options.items()}
        limit = ops.convert_to_tensor(max_lengths[rows])
        return to_numpy(decoding.sample(model, prompts[rows], limit, **tensors))

    together = run([0, 1, 2, 3])
    for row in range(4):
        alone = run([row])[0]
        np.testing.assert_array_equal(together[row, : len(alone)], alone)
        assert not together[row, len(alone) :].any()
    greedy = to_numpy(decoding.greedy_search(model, prompts[1:2], 2))
    np.testing.assert_array_equal(run([1]), greedy)
    # A seed decides the sample: the same seed again, the same tokens.
    np.testing.assert_array_equal(run([0, 2, 3]), together[[0, 2, 3], : run([0, 2, 3]).shape[1]])


def test_filter_logits():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], "float32"))
    kept = lambda x: to_numpy(x)[0] > -1e8  # noqa: E731
    assert kept(decoding.filter_logits(logits, top_k=2)).tolist() == [True, True, False, False]
    # Nucleus: the smallest set with probability >= p.
    assert kept(decoding.filter_logits(logits, top_p=0.45)).tolist() == [True, False, False, False]
    assert kept(decoding.filter_logits(logits, top_p=0.7)).tolist() == [True, True, False, False]
    assert kept(decoding.filter_logits(logits, top_p=0.9)).tolist() == [True, True, True, False]


def test_bad_arguments():
    model = make_model("transformer")
    with pytest.raises(ValueError, match="max_decoding_length=0"):
        decoding.greedy_search(model, SOURCE, 0)
    with pytest.raises(ValueError, match="beam_size"):
        decoding.beam_search(model, SOURCE, 4, beam_size=0)
    with pytest.raises(ValueError, match="top_p=1.5"):
        decoding.sample(model, SOURCE, 4, top_p=1.5)
    with pytest.raises(ValueError, match="temperature=0"):
        decoding.sample(model, SOURCE, 4, temperature=0)


def test_the_length_answers_to_its_three_names():
    """`max_decoding_length`; `max_new_tokens`, Hugging Face's name, the
    same; `max_length`, its name before, with a FutureWarning for one
    release. Two at once, or none, is a TypeError naming them."""
    model = make_model("transformer")
    for search, options in [
        (decoding.greedy_search, {}),
        (decoding.beam_search, {"beam_size": 2}),
        (decoding.sample, {"seed": 3}),
    ]:
        expected = to_numpy(search(model, SOURCE, max_decoding_length=4, **options)[0])
        as_hugging_face = search(model, SOURCE, max_new_tokens=4, **options)[0]
        np.testing.assert_array_equal(to_numpy(as_hugging_face), expected)
        with pytest.warns(
            FutureWarning, match="`max_length` is deprecated .* `max_decoding_length`"
        ):
            before = search(model, SOURCE, max_length=4, **options)[0]
        np.testing.assert_array_equal(to_numpy(before), expected)
        with pytest.raises(TypeError, match="give one of max_decoding_length, max_new_tokens"):
            search(model, SOURCE, 4, max_new_tokens=4, **options)
        with pytest.raises(TypeError, match="missing the most tokens to generate"):
            search(model, SOURCE, **options)


# Where the writes run: eagerly and in a plain graph on TensorFlow, under XLA
# on both backends (JAX's only way).
WRITE_MODES = ["xla"] if keras.backend.backend() == "jax" else ["eager", "graph", "xla"]


@pytest.mark.parametrize("mode", WRITE_MODES)
def test_the_loops_write_slices_as_keras_does(mode):
    """`utils.slice_update`, with which the decoding loops write their KV
    caches and tokens, writes what `keras.ops.slice_update` writes, at a
    position given as a tensor. On TensorFlow outside XLA it is TensorFlow's
    own `TensorStridedSliceUpdate`, not Keras's `XlaDynamicUpdateSlice`."""
    from keras_attention.utils import slice_update

    cache = np.arange(2 * 3 * 6 * 4, dtype="float32").reshape(2, 3, 6, 4)
    step = -np.ones((2, 3, 1, 4), dtype="float32")
    expected = cache.copy()
    expected[:, :, 4:5] = step

    def write(cache, step, position):
        return slice_update(cache, [0, 0, position, 0], step)

    position = np.int32(4)
    if mode == "eager":
        got = write(tf.constant(cache), tf.constant(step), tf.constant(position))
    else:
        function = compiled(write, jit_compile=mode == "xla")
        got = function(cache, step, position)
    np.testing.assert_array_equal(to_numpy(got), expected)
    if mode != "eager" and keras.backend.backend() == "tensorflow":  # the graph just traced
        graph = function.get_concrete_function(cache, step, position).graph
        kinds = {op.type for op in graph.get_operations()}
        native = "TensorStridedSliceUpdate" in kinds
        assert native == (mode == "graph")
        assert ("XlaDynamicUpdateSlice" in kinds) == (mode == "xla")


@pytest.mark.parametrize("beam_size, patience", [(1, 1.0), (2, 1.0), (2, 0.0)])
def test_a_short_room_reports_the_rows_it_cut_and_answers_the_others_as_whole(beam_size, patience):
    """`search(..., room=R, return_cut=True)`: a row whose limit is within
    R is answered as with the whole room; a row whose search needed more
    is reported cut (the export searches it again). The random model ends
    no answer early, so the row limited to 12 tokens needs more than 4."""
    model = make_model("transformer")
    limits = np.array([2, 12, 4], "int32")
    options = decoding.DecodingOptions(
        beam_size=beam_size, patience=patience, num_hypotheses=1, max_decoding_length=limits
    )
    whole_ids, whole_scores = decoding.search(model, SOURCE, options)
    ids, scores, cut = decoding.search(model, SOURCE, options, room=4, return_cut=True)
    assert to_numpy(cut).tolist() == [False, True, False]
    assert ops.shape(ids)[2] < ops.shape(whole_ids)[2]  # a narrower buffer
    for row in (0, 2):
        np.testing.assert_array_equal(
            to_numpy(ids)[row, :, : limits[row]], to_numpy(whole_ids)[row, :, : limits[row]]
        )
        np.testing.assert_allclose(to_numpy(scores)[row], to_numpy(whole_scores)[row], rtol=1e-6)
    # A room as wide as every limit cuts nothing.
    *_, cut = decoding.search(model, SOURCE, options, room=12, return_cut=True)
    assert not np.any(to_numpy(cut))
