"""Embedding: text in, one vector out (`TransformerEmbedder`)."""

import numpy as np

from keras_attention.tasks.base import Task


class Embedding(Task):
    """Text in, its vector out. A run may keep sentence-transformers'
    `prompts` (name -> the text put before a text, such as E5's
    `"query: "`) and a `default_prompt_name` in its config.json."""

    name = "embedding"
    compiles_with_xla = True

    def export_arguments(self, config, files):
        return {
            "prompts": config.get("prompts"),
            "default_prompt_name": config.get("default_prompt_name"),
        }

    def explore(self, explorer, ids, beam_size=None):
        vector = np.asarray(explorer.logits(ids), "float32")[0]
        return {
            "source_tokens": explorer.labels(ids[0], "text"),
            "embedding": [round(float(value), 4) for value in vector],
            "norm": round(float(np.linalg.norm(vector)), 4),
            "attention": explorer.attention(ids),
        }
