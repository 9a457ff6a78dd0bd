"""Language modelling: a prompt in, its completion out (`TransformerLM`)."""

import numpy as np

from keras_attention.data.tokenizers import prompt_start
from keras_attention.tasks.base import Task, before_end, decoding_arguments, text_of

MAX_NEW_TOKENS = 64  # the explorer's completion, at most


class LanguageModeling(Task):
    """`<s>` and a prompt in, the tokens that follow out; self-attention."""

    name = "language_model"
    positions_before_text = 1  # <s>
    steps = "self_attention"
    compiles_with_xla = True

    def export_arguments(self, config, files):
        return decoding_arguments(config)

    def explore(self, explorer, ids, beam_size=None):
        start = prompt_start(explorer.tokenizers["text"])
        prompt = np.concatenate([start, ids[0][ids[0] != 0]])[None].astype("int32")
        new_tokens = min(MAX_NEW_TOKENS, explorer.max_input_length - prompt.shape[1])
        sequence = prompt[0]
        if new_tokens > 0:
            output = np.asarray(explorer.search(1, new_tokens)(prompt))[0]
            sequence = np.concatenate([prompt[0], before_end(output[prompt.shape[1] :])])
        sequence = sequence[None].astype("int32")
        return {
            "source_tokens": explorer.labels(sequence[0], "text"),
            "prompt_length": int(prompt.shape[1]),
            "completion": text_of(explorer.tokenizers["text"], sequence[0, prompt.shape[1] :]),
            "attention": explorer.attention(sequence),
        }
