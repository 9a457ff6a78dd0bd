"""Attention maps of a few fixed validation examples, logged to TensorBoard
as images at the end of every epoch (`logs/attention`, the Images tab), so
the alignment can be watched forming, as tensorflow/nmt logged it."""

import io

import keras
import numpy as np
import tensorflow as tf

from keras_attention import visualize
from keras_attention.explore import token_labels
from keras_attention.run_files import RunFiles

EXAMPLES = 3  # validation examples drawn each epoch


def watched_examples(data, count=EXAMPLES):
    """The first `count` examples of the validation batches, as `(inputs,
    row tokens, column tokens, kind)`: a translation's cross-attention
    (rows the target tokens it predicts, teacher-forced, columns the
    source), or a single sequence's self-attention."""
    if data.validation is None:
        return []
    inputs, labels = next(iter(data.validation.take(1)))[:2]
    subword = data.config.tokenizer == "subword"

    def tokens(tokenizer, ids):
        return token_labels(tokenizer, ids, subword)

    examples = []
    for row in range(min(count, int(tf.shape(labels)[0]))):
        if isinstance(inputs, dict):  # an encoder-decoder: {source_ids, target_ids}
            source = inputs["source_ids"][row].numpy()
            source = source[: max(1, int(np.count_nonzero(source)))]
            target = inputs["target_ids"][row].numpy()
            target = target[: max(1, int(np.count_nonzero(target)))]
            rows = tokens(data.target_tokenizer, labels[row].numpy())[: len(target)]
            model_inputs = {"source_ids": source[None], "target_ids": target[None]}
            examples.append(
                (model_inputs, rows, tokens(data.tokenizer, source), "decoder_cross_attention")
            )
        else:
            ids = inputs[row].numpy()
            ids = ids[: max(1, int(np.count_nonzero(ids)))]
            labelled = tokens(data.tokenizer, ids)
            examples.append((ids[None], labelled, labelled, "self_attention"))
    return examples


class AttentionImages(keras.callbacks.Callback):
    """Logs the last layer's attention of `examples` (see `watched_examples`)
    as one image each, every head a panel, at the end of every epoch. Each
    example's figure is laid out once and redrawn with each epoch's weights
    (0.23 s an image, against 0.51 for a new figure each epoch)."""

    def __init__(self, examples, output_dir):
        super().__init__()
        self.examples = examples
        self.figures = {}  # example index -> its figure, drawn in the first epoch
        self.writer = tf.summary.create_file_writer(str(RunFiles(output_dir).logs / "attention"))

    def on_epoch_end(self, epoch, logs=None):
        with self.writer.as_default():
            for index, (inputs, rows, columns, kind) in enumerate(self.examples):
                weights = visualize.attention_maps(self.model, inputs)[kind][-1][0]
                weights = weights[:, : len(rows), : len(columns)]
                title = f"epoch {epoch + 1}"
                if index in self.figures:
                    figure = visualize.redraw_attention(self.figures[index], weights, title)
                else:
                    figure = visualize.plot_attention(weights, rows, columns, title=title)
                    self.figures[index] = figure
                buffer = io.BytesIO()
                figure.savefig(buffer, format="png", dpi=72)
                image = tf.image.decode_png(buffer.getvalue(), channels=3)
                tf.summary.image(f"attention/example_{index}", image[None], step=epoch + 1)
        self.writer.flush()
