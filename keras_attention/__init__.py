"""keras-attention: attention layers, models, recipes and TF Serving exports."""

__version__ = "0.1.0"
