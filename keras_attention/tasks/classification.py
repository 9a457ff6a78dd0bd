"""Classification: text in, a class out (`TransformerClassifier`)."""

import json

import numpy as np

from keras_attention.tasks.base import Task


class Classification(Task):
    """Text in, one of the run's `labels.json` out, with its probabilities."""

    name = "classification"

    def export_arguments(self, config, files):
        return {"label_names": json.loads(files.labels.read_text())}

    def explore(self, explorer, ids, beam_size=None):
        logits = np.asarray(explorer.logits(ids))[0]
        probabilities = np.exp(logits - logits.max())
        probabilities /= probabilities.sum()
        best = int(probabilities.argmax())
        return {
            "source_tokens": explorer.labels(ids[0], "text"),
            "label": explorer.label_names[best],
            "probabilities": {
                label: round(float(p), 4)
                for label, p in zip(explorer.label_names, probabilities, strict=True)
            },
            "attention": explorer.attention(ids),
        }
