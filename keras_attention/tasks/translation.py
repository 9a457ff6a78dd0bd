"""Translation: an encoder-decoder (`Transformer`, `Seq2SeqAttention`)."""

import numpy as np

from keras_attention import decoding
from keras_attention.data.tokenizers import END, END_ID
from keras_attention.decoding import cross_attention, decoder_inputs  # noqa: F401  (kept importable here)
from keras_attention.tasks.base import Task, before_end, decoding_arguments, text_of

MAX_EXPLORER_BEAM_SIZE = 8  # the explorer's page offers beams 1 to 8


class Translation(Task):
    """Source text in, target text out; beam search; cross-attention."""

    name = "translation"
    sides = ("source", "target")
    input_side = "source"
    steps = "decoder_cross_attention"
    max_beam_size = MAX_EXPLORER_BEAM_SIZE
    compiles_with_xla = True

    def export_arguments(self, config, files):
        return decoding_arguments(config)

    def explore(self, explorer, ids, beam_size=None):
        if beam_size is None:
            beam_size = int(explorer.config.get("beam_size") or 1)
        if not isinstance(beam_size, int) or not 1 <= beam_size <= self.max_beam_size:
            raise explorer.error(
                f"beam_size must be from 1 to {self.max_beam_size}; got {beam_size!r}"
            )
        output_ids, scores = explorer.search(beam_size)(ids)
        output_ids, scores = np.asarray(output_ids)[0], np.asarray(scores)[0]  # [K, L], [K]
        target = explorer.tokenizers["target"]
        hypotheses = [
            {"text": text_of(target, row), "score": round(float(score), 4)}
            for row, score in zip(output_ids, scores, strict=True)
            if score > decoding.NEG_INF / 2
        ]
        output = before_end(output_ids[0])
        best = np.array([[*output, END_ID]], "int32")  # y1 .. yn </s>
        weights = explorer.attention({"source_ids": ids, "target_ids": decoder_inputs(best)})
        return {
            "source_tokens": explorer.labels(ids[0], "source"),
            "target_tokens": explorer.labels(output, "target") + [END],
            "translation": hypotheses[0]["text"],
            "hypotheses": hypotheses,
            "beam_size": beam_size,
            "attention": weights,
        }
