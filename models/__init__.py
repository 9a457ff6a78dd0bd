"""Model builders (installed as `keras_attention.models`)."""
