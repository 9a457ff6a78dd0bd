"""What the models do with ids and files they cannot take."""

import json
import zipfile

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention.layers import MultiHeadSelfAttention
from keras_attention.models import build_transformer, build_transformer_lm


def test_token_ids_outside_the_vocabulary_are_named():
    model = build_transformer(20, 30)
    with pytest.raises(ValueError, match=r"Token id 25 is outside the vocabulary of 20 ids"):
        model({"source_ids": np.array([[5, 25]]), "target_ids": np.array([[1, 2]])})
    with pytest.raises(ValueError, match=r"Token id -1 is outside the vocabulary of 30 ids"):
        model({"source_ids": np.array([[5, 6]]), "target_ids": np.array([[1, -1]])})
    lm = build_transformer_lm(10)
    with pytest.raises(ValueError, match="Token id 10 is outside"):
        lm(np.array([[1, 10]]))
    assert lm(np.array([[1, 9]])).shape == (1, 2, 10)


def rewrite_config(path, change):
    """Changes the config inside a .keras file, as another version would have written it."""
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(files["config.json"])
    change(config["config"])
    files["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)


def test_a_model_saved_by_another_version_is_refused_with_a_message(tmp_path):
    path = tmp_path / "model.keras"
    model = build_transformer(20)
    assert model.get_config()["keras_attention_version"] == keras_attention.__version__
    model.save(path)
    assert keras.saving.load_model(path).count_params() == model.count_params()

    def from_the_future(config):
        config["keras_attention_version"] = "9.0.0"
        config["rotary_positions"] = True

    rewrite_config(path, from_the_future)
    with pytest.raises(
        ValueError, match=r"Transformer cannot be built from its saved config"
    ) as error:
        keras.saving.load_model(path)
    assert "rotary_positions" in str(error.value)
    assert "saved by keras_attention 9.0.0; this is " + keras_attention.__version__ in str(
        error.value
    )


def test_a_layer_config_from_another_version_is_refused_with_a_message():
    config = MultiHeadSelfAttention(num_heads=2).get_config()
    config.pop("keras_attention_version")
    config["num_query_groups"] = 1
    with pytest.raises(
        ValueError,
        match=r"(?s)MultiHeadSelfAttention cannot be built.*num_query_groups.*older than 0.1.0",
    ):
        MultiHeadSelfAttention.from_config(config)


@pytest.mark.parametrize(
    "build,arguments,model_name",
    [
        (keras_attention.models.build_transformer, (20, 20), "Transformer"),
        (keras_attention.models.build_transformer_lm, (20,), "TransformerLM"),
        (keras_attention.models.build_transformer_classifier, (20, 3), "TransformerClassifier"),
        (keras_attention.models.build_seq2seq_attention, (20, 20), "Seq2SeqAttention"),
    ],
)
def test_an_argument_a_builder_does_not_know_is_a_type_error_naming_it(
    build, arguments, model_name
):
    """`keras.Model` drops keyword arguments it does not know without a word:
    `num_layer=3` (for `num_layers`) would have built the default model."""
    message = rf"{model_name} got an unexpected keyword argument 'num_layer'\. It takes: .*name"
    with pytest.raises(TypeError, match=message):
        build(*arguments, num_layer=3)
    model_class = getattr(keras_attention.models, model_name)
    with pytest.raises(TypeError, match="unexpected keyword argument 'dropuot'"):
        model_class(*arguments, dropuot=0.2)
    # keras.Model's own arguments still pass.
    assert build(*arguments, name="named", trainable=False).name == "named"
