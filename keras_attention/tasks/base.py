"""What every task answers; see `keras_attention.tasks`."""

import dataclasses

import numpy as np

from keras_attention.data.tokenizers import END_ID, PAD_ID


@dataclasses.dataclass(frozen=True)
class ExportSettings:
    """What an export fixes beside the model and its tokenizers (see
    `keras_attention.export.export_model`, which checks them)."""

    max_input_length: int
    max_decoding_length: int | None = None  # None: max_input_length
    beam_size: int = 1
    length_penalty: float | None = None  # None: beam search's default
    label_names: list | None = None
    jit_compile: bool = False

    @property
    def decoding_length(self):
        return self.max_decoding_length or self.max_input_length


class Task:
    """A task: which tokenizers its runs have, what its export needs and
    what the explorer shows of it (its export's server is
    `keras_attention.export.servers`').

    Attributes:
        name: the name the models carry (`model.task`) and runs record.
        sides: the tokenizers of its runs, named as the run's files are.
        input_side: the side a user's text is tokenized with.
        positions_before_text: tokens the model reads before the text (a
            language model's `<s>`).
        steps: the attention kind the explorer steps through, a row per
            output token (None: no step-through).
        max_beam_size: the most beams the explorer offers.
        compiles_search: whether its export can compile the search with
            XLA (`jit_compile`).
    """

    name = None
    sides = ("text",)
    input_side = "text"
    positions_before_text = 0
    steps = None
    max_beam_size = 1
    compiles_search = False

    def export_arguments(self, config, files):
        """What `export_model` needs beyond the model and its tokenizers,
        read from a finished run's `config` and files."""
        return {}

    def explore(self, explorer, ids, beam_size=None):
        """The explorer's answer for `ids` `[1, S]` (the text's ids)."""
        raise NotImplementedError


def before_end(ids):
    """The ids before the first end or padding id, as a list."""
    ids = [int(i) for i in ids]
    for position, i in enumerate(ids):
        if i in (END_ID, PAD_ID):
            return ids[:position]
    return ids


def text_of(tokenizer, ids):
    """The text of `ids` (up to the end), as a Python string."""
    ids = np.asarray(before_end(ids) or [END_ID], "int32")[None]
    return tokenizer.detokenize(ids).numpy()[0].decode("utf-8")
