import os

import keras
import pytest
from hypothesis import settings

# Each example runs real layers eagerly: few examples, no per-example deadline.
settings.register_profile("ci", max_examples=12, deadline=None, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _seed_and_policy():
    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")
