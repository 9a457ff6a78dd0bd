"""keras-attention: attention layers, models, recipes and TF Serving exports.

Importing the package registers every layer, model, loss, metric and
schedule with Keras, so `keras.saving.load_model` can read saved models.
"""

from keras_attention import layers, models, training  # noqa: F401
from keras_attention._version import __version__  # noqa: F401
