import pytest
from convert_helpers import FIXTURES

from keras_attention.convert import from_huggingface


@pytest.fixture(scope="session")
def converted():
    """The committed checkpoints, converted once: name -> `Converted`."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = from_huggingface(FIXTURES / name)
        return cache[name]

    return get
