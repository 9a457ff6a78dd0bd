"""Small models (one trained), exported once for every export test, and
their answers from a fresh process that imports only TensorFlow and TF Text."""

import pytest

# TensorFlow is imported inside the fixtures, not here: pytest-xdist's main
# process reads this file when it is given tests/export, and a TensorFlow
# it imported would print its start-up lines after the summary.


@pytest.fixture(scope="session")
def exports(tmp_path_factory):
    from types import SimpleNamespace

    import keras
    import tensorflow as tf
    from export_helpers import BEAM_SIZE, MAX_LENGTH, reversal_pairs

    from keras_attention import export
    from keras_attention.data.pipeline import translation_batches
    from keras_attention.data.tokenizers import CharacterTokenizer
    from keras_attention.models import (
        build_seq2seq_attention,
        build_transformer,
        build_transformer_classifier,
        build_transformer_lm,
    )
    from keras_attention.objectives import MaskedSparseCrossentropy

    keras.utils.set_random_seed(0)
    base = tmp_path_factory.mktemp("serving")
    pairs = reversal_pairs(2048)
    tokenizer = CharacterTokenizer.train([s for s, _ in pairs])
    translator = build_transformer(tokenizer.vocabulary_size, tokenizer.vocabulary_size)
    translator.compile(keras.optimizers.Adam(3e-3), loss=MaskedSparseCrossentropy())
    batches = translation_batches(
        tf.data.Dataset.from_tensor_slices(([s for s, _ in pairs], [t for _, t in pairs])),
        tokenizer,
        tokenizer,
        batch_size=64,
        max_length=MAX_LENGTH,
    )
    # Of known length, so that Keras does not find each epoch's end by
    # running out of data (and warn that it did).
    batches = batches.apply(tf.data.experimental.assert_cardinality(sum(1 for _ in batches)))
    translator.fit(batches, epochs=4, verbose=0, shuffle=False)  # the batches are fixed

    def export_as(model, name, **kwargs):
        return export.export_model(
            model, base, name, tokenizer, max_input_length=MAX_LENGTH, **kwargs
        )

    translator_v1 = export_as(
        translator, "reverse", target_tokenizer=tokenizer, beam_size=BEAM_SIZE
    )
    v1_files = {
        p.relative_to(translator_v1): p.read_bytes()
        for p in translator_v1.rglob("*")
        if p.is_file()
    }
    # Version 2 compiles its search with XLA (and must answer as version 1).
    translator_v2 = export_as(
        translator, "reverse", target_tokenizer=tokenizer, beam_size=BEAM_SIZE, jit_compile=True
    )
    rnn = build_seq2seq_attention(tokenizer.vocabulary_size, attention="bahdanau")
    # ALiBi and rotary positions, so the classifier export tests check them too.
    classifier = build_transformer_classifier(tokenizer.vocabulary_size, 3, positions="alibi")
    rotary_classifier = build_transformer_classifier(
        tokenizer.vocabulary_size, 3, num_layers=1, positions="rotary"
    )
    # With today's attention options, so every language-model export test
    # also checks them through the SavedModel (the translator has none).
    language_model = build_transformer_lm(
        tokenizer.vocabulary_size,
        positions="learned",
        max_position_embeddings=2 * MAX_LENGTH,
        num_key_value_heads=2,
        sliding_window=4,
        use_gate=True,
    )
    return SimpleNamespace(
        base=base,
        tokenizer=tokenizer,
        translator=translator,
        translator_v1=translator_v1,
        translator_v1_files=v1_files,
        translator_v2=translator_v2,
        rnn=rnn,
        rnn_path=export_as(rnn, "rnn", target_tokenizer=tokenizer),
        classifier=classifier,
        label_names=["low", "middle", "high"],
        classifier_path=export_as(classifier, "classify", label_names=["low", "middle", "high"]),
        rotary_classifier=rotary_classifier,
        rotary_classifier_path=export_as(
            rotary_classifier, "classify_rotary", label_names=["low", "middle", "high"]
        ),
        language_model=language_model,
        language_model_path=export_as(language_model, "lm"),
    )


@pytest.fixture(scope="session")
def served(exports, tmp_path_factory):
    """Every request answered by the stand-in for TF Serving in a fresh
    process; returns (the requests, the answers)."""
    folder = tmp_path_factory.mktemp("fresh_process")
    from export_helpers import ask_a_fresh_process, requests

    spec = requests(exports)
    return spec, ask_a_fresh_process(spec, folder)
