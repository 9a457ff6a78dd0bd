"""What every task answers; see `keras_attention.tasks`."""

import dataclasses

import numpy as np

from keras_attention.data.tokenizers import END_ID, PAD_ID
from keras_attention.run_files import decoding_limits


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
    prompts: dict | None = None  # an embedder's: name -> the text put first
    default_prompt_name: str | None = None  # the prompt a text gets by default

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
        compiles_with_xla: whether its export can be compiled with XLA
            (`jit_compile`): a search, or an embedder's forward pass.
    """

    name = None
    sides = ("text",)
    input_side = "text"
    positions_before_text = 0
    steps = None
    max_beam_size = 1
    compiles_with_xla = False

    def export_arguments(self, config, files):
        """What `export_model` needs beyond the model, its tokenizers and
        `max_input_length`, as a finished run records it: `config` (its
        config.json, a dict) and `files` (its `RunFiles`). A recipe's run
        and a converted checkpoint's record these alike; this is the one
        place that reads them (`keras_attention.export.run.export_run`
        asks it for every export of a run)."""
        return {}

    def explore(self, explorer, ids, beam_size=None):
        """The explorer's answer for `ids` `[1, S]` (the text's ids)."""
        raise NotImplementedError


def decoding_arguments(config):
    """The decoding settings a run records, for the export of a task that
    decodes: `beam_size` (a translation recipe's, chosen for the data or by
    `--tune-decoding`, or a converted checkpoint's `num_beams`; 1 where the
    run has none, as a language-model recipe's), `max_decoding_length`
    (default: `max_input_length`) and `length_penalty` (None: beam
    search's own)."""
    _, max_decoding_length = decoding_limits(config)
    return {
        "beam_size": config.get("beam_size") or 1,
        "max_decoding_length": max_decoding_length,
        "length_penalty": config.get("length_penalty"),
    }


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
