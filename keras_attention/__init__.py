"""keras-attention: attention layers, models, recipes and TF Serving exports.

Importing the package registers every layer, model, loss, metric and
schedule with Keras, so `keras.saving.load_model` can read saved models.
"""

import os
import sys


def _quiet_tensorflow_in_our_commands():
    """TensorFlow's C++ side prints, on every CPU-only machine, lines that are
    not news: that CUDA could not be initialised (`E0000 ... failed call to
    cuInit`), that oneDNN is on, and absl's "WARNING: All log messages before
    absl::InitializeLog() ..." (written straight to the process's stderr
    while TensorFlow loads, whatever `TF_CPP_MIN_LOG_LEVEL` says). Our
    commands (`python -m keras_attention...`, the `keras-attention-*`
    scripts) start without them: TensorFlow is imported with stderr set
    aside and its log level at 3. A user who sets `TF_CPP_MIN_LOG_LEVEL`
    gets TensorFlow as it is; programs that import the package are left
    alone. An import that fails still raises, and its traceback is shown."""
    command = os.path.basename(sys.argv[0]) if sys.argv else ""
    # While `python -m` imports the packages above the module it runs,
    # `sys.argv[0]` is "-m".
    ours = command == "-m" or command.startswith("keras-attention")
    if not ours or "TF_CPP_MIN_LOG_LEVEL" in os.environ or "tensorflow" in sys.modules:
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    sys.stderr.flush()
    saved_stderr = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)


_quiet_tensorflow_in_our_commands()

from keras_attention import layers, models, objectives  # noqa: E402, F401
from keras_attention._version import __version__  # noqa: E402, F401
from keras_attention.encoder import Encoder  # noqa: E402, F401
from keras_attention.generator import Generator  # noqa: E402, F401
from keras_attention.translator import Translator  # noqa: E402, F401

# The public modules (`from keras_attention import *` imports them; the API
# reference documents them) and the version.
__all__ = [
    "Encoder",
    "Generator",
    "Translator",
    "__version__",
    "data",
    "decoding",
    "export",
    "files",
    "generator",
    "layers",
    "models",
    "objectives",
    "recipes",
    "run_files",
    "saving",
    "translate",
    "translator",
    "utils",
    "visualize",
]
