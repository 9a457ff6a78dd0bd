import pytest

# TensorFlow is imported inside the fixtures, not here (see tests/export/conftest.py).


@pytest.fixture(scope="session")
def converted():
    """The committed checkpoints, converted once: name -> `Converted`."""
    from convert_helpers import FIXTURES

    from keras_attention.convert import from_huggingface

    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = from_huggingface(FIXTURES / name)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def bert_run(tmp_path_factory):
    """The tiny BERT classifier converted into a run folder, with its export."""
    from convert_helpers import FIXTURES

    from keras_attention.convert import convert

    return convert(FIXTURES / "bert", tmp_path_factory.mktemp("converted") / "bert")
