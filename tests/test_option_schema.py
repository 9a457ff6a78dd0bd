"""The decoding options' one table (`keras_attention/decoding/option_table.py`):
every surface that lists the options is made from it, and a new row
reaches each of them (the export's signature inputs and defaults, its
in-graph range checks, `Translator`'s and `Generator`'s values and checks,
`python -m keras_attention.translate`'s flags); the public Python
signatures, written out for `help()`, are held equal to it."""

import dataclasses
import inspect

import numpy as np
import pytest
import tensorflow as tf

from keras_attention import translate
from keras_attention.decoding import DecodingOptions, option_table
from keras_attention.decoding.option_table import GENERATOR, TRANSLATOR, Option, Range
from keras_attention.export.servers import base, language_model, translation
from keras_attention.generator import Generator
from keras_attention.translator import Translator, _check_options, _option_values

DUMMY = Option(
    "dummy_size",
    "int32",
    3,
    generate=(14, 4),
    range=Range(0, served_high=9),
    flag=(10, "a dummy option"),
    generate_name="dummy_length",
    decoding=False,
)


def keyword_defaults(method):
    return {
        name: parameter.default
        for name, parameter in inspect.signature(method).parameters.items()
        if parameter.kind is parameter.KEYWORD_ONLY
    }


def test_the_python_signatures_are_the_table_s():
    """`Translator.translate_batch` and `Generator.generate_batch` take
    each of their options, by its name, with its default; `DecodingOptions`
    has a field for each decoding option, with its `translate_batch`
    default, and `generation()` gives `generate_batch`'s."""
    translator = keyword_defaults(Translator.translate_batch)
    for name, (_, default) in option_table.translator_options().items():
        assert name in translator and translator[name] == default, name
        assert type(translator[name]) is type(default), name
    generator = keyword_defaults(Generator.generate_batch)
    for name, (_, default) in option_table.generator_options().items():
        assert name in generator and generator[name] == default, name
        assert type(generator[name]) is type(default), name
    # The other keyword arguments are the clients' own, not options.
    own = {"max_batch_size", "batch_type", "suppress_sequences", "return_scores"}
    assert set(translator) - set(option_table.translator_options()) == own
    assert set(generator) - set(option_table.generator_options()) == own

    fields = {field.name: field.default for field in dataclasses.fields(DecodingOptions)}
    rows = {option.name: option.default for option in option_table.decoding_options()}
    assert {name: fields[name] for name in rows} == rows
    assert set(fields) - set(rows) == {"suppress_sequences", "target_prefix"}
    generation = DecodingOptions.generation()
    for option in option_table.decoding_options():
        if option.generate is not None:
            assert getattr(generation, option.name) == option.generate_default, option.name


def test_the_surfaces_are_today_s(capsys):
    """What the table makes is what the surfaces were before it: the
    signatures' option inputs in order, with their dtypes and defaults."""
    assert [(spec.name, spec.dtype) for spec in translation.signature_inputs()] == [
        ("text", tf.string),
        ("target_prefix", tf.string),
        ("beam_size", tf.int32),
        ("patience", tf.float32),
        ("num_hypotheses", tf.int32),
        ("length_penalty", tf.float32),
        ("repetition_penalty", tf.float32),
        ("no_repeat_ngram_size", tf.int32),
        ("min_decoding_length", tf.int32),
        ("max_decoding_length", tf.int32),
        ("disable_unk", tf.bool),
        ("return_attention", tf.bool),
        ("replace_unknowns", tf.bool),
        ("suppress_sequences", tf.string),
    ]
    assert [spec.name for spec in language_model.signature_inputs()] == [
        "prompt",
        "beam_size",
        "patience",
        "num_hypotheses",
        "length_penalty",
        "repetition_penalty",
        "no_repeat_ngram_size",
        "disable_unk",
        "max_length",
        "min_length",
        "sampling_topk",
        "sampling_topp",
        "sampling_temperature",
        "include_prompt_in_result",
        "seed",
        "suppress_sequences",
    ]
    assert translation.defaults()["max_decoding_length"] == 256
    assert language_model.defaults()["max_length"] == 512
    assert list(translation.search_options()) == [
        option.name for option in option_table.decoding_options() if option.translator
    ]
    flags = [
        "--beam-size BEAM_SIZE",
        "--num-hypotheses NUM_HYPOTHESES",
        "--patience PATIENCE",
        "--length-penalty LENGTH_PENALTY",
        "--repetition-penalty REPETITION_PENALTY",
        "--no-repeat-ngram-size NO_REPEAT_NGRAM_SIZE",
        "--min-decoding-length MIN_DECODING_LENGTH",
        "--max-decoding-length MAX_DECODING_LENGTH",
        "--disable-unk ",
        "--replace-unknowns ",
    ]
    with pytest.raises(SystemExit):
        translate.parse_arguments(["--help"])
    usage = capsys.readouterr().out
    places = [usage.index("\n  " + flag) for flag in flags]
    assert places == sorted(places)


@pytest.fixture
def with_dummy(monkeypatch):
    monkeypatch.setattr(option_table, "OPTIONS", (*option_table.OPTIONS, DUMMY))


def test_a_new_option_reaches_every_surface(with_dummy, capsys):
    # The signatures' inputs (after the other options, before
    # `suppress_sequences`) and their defaults.
    inputs = translation.signature_inputs()
    assert (inputs[-2].name, inputs[-2].dtype) == ("dummy_size", tf.int32)
    assert translation.defaults()["dummy_size"] == 3
    assert translation.signature_options()["dummy_size"] == (tf.int32, 3)
    inputs = language_model.signature_inputs()
    assert (inputs[-2].name, inputs[-2].dtype) == ("dummy_length", tf.int32)
    assert language_model.defaults()["dummy_length"] == 4
    # (A `DecodingOptions` field, a row with `decoding` true, is searched.)
    assert "dummy_size" not in translation.search_options()

    # The in-graph range check, by each signature's name for it.
    for api, signature, name in [
        (TRANSLATOR, "translate_batch", "dummy_size"),
        (GENERATOR, "generate_batch", "dummy_length"),
    ]:
        defaults = (translation if api == TRANSLATOR else language_model).signature_options()
        options = {
            input_name: tf.constant([default, default], dtype)
            for input_name, (dtype, default) in defaults.items()
        }
        text = tf.constant(["a", "b"])
        base.check_options(text, options, signature, api)  # within range
        options[name] = tf.constant([5, 10])
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            base.check_options(text, options, signature, api)
        assert f"{signature}: `{name}` must be from 0 to 9; row" in error.value.message
        assert error.value.message.endswith("row'\n1\nb'has'\n10")  # row 1 has 10

    # Translator and Generator send it and check its type.
    values = _option_values("translator", {**translation.defaults(), "dummy_size": 5})
    assert values["dummy_size"] == (5, np.int32)
    values = _option_values("generator", {**language_model.defaults(), "dummy_length": 2.5})
    with pytest.raises(TypeError, match=r"`dummy_length` must be a int. Received"):
        _check_options(values)
    # ... and the signatures' test above would ask for its keyword argument.
    assert "dummy_size" not in keyword_defaults(Translator.translate_batch)

    # translate.py's flag, its default and its help.
    assert translate.parse_arguments(["model"]).dummy_size == 3
    assert translate.parse_arguments(["model", "--dummy-size", "7"]).dummy_size == 7
    with pytest.raises(SystemExit):
        translate.parse_arguments(["--help"])
    assert "--dummy-size DUMMY_SIZE" in capsys.readouterr().out

    # Its Python range text, as `DecodingOptions` would say it.
    assert DUMMY.python_requirement() == "an integer >= 0"
    assert not DUMMY.within(-1) and DUMMY.within(np.array([0, 5])).all()
