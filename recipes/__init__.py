"""Training recipes (installed as `keras_attention.recipes`)."""
