"""The decoding options' one table: each option once, with its dtype, its
defaults and names for translators and for generators, its range, and the
flag of `python -m keras_attention.translate` that sets it.

Everything that lists the options is made from `OPTIONS`, read when it is
made (so a test may add a row and build them again):

- `DecodingOptions`' checks of Python values (`python_requirement`,
  `Option.within`) and `DecodingOptions.generation`'s names and defaults;
- the export's `translate_batch` and `generate_batch` signatures: their
  option inputs, dtypes, order and defaults (`translator_options`,
  `generator_options`), and their in-graph range checks (`check_options`
  in `export/servers/base.py`: `served_requirement`, `Option.within`);
- `Translator.translate_batch` and `Generator.generate_batch`: the values
  they send and the types they check (their keyword arguments are written
  out, for `help()` and an IDE; a test holds them equal to the table);
- `python -m keras_attention.translate`'s flags (`flag_options`).

A new option is a row here, plus its decoding code (a `DecodingOptions`
field where `decoding` is true). Rules between options (`num_hypotheses`
and the beam, `min_decoding_length` and the maximum, sampling and the
beam) stay with the code that checks them; a row's range is its own.
The text options (`target_prefix`, `suppress_sequences`: token ids in
`DecodingOptions`, texts in the export) are not rows: the export tokenizes
them.
"""

import dataclasses

MAX_BEAM_SIZE = 16  # the most beams a request may ask for, in every signature
# The most tokens a request may ask for: a bound on the buffers one request
# makes the server allocate.
MAX_DECODING_LENGTH = 1024
# The most draws of one prompt a request may ask for (`num_hypotheses` with
# sampling): each is a row of the search.
MAX_DRAWS = 64

TRANSLATOR, GENERATOR = "translator", "generator"


@dataclasses.dataclass(frozen=True)
class Range:
    """Where an option's values lie: from `low` (above it, with
    `open_low`) up to `high` (included; None: no bound), and, in an
    export's request, up to `served_high` too (a bound on what one request
    makes the server allocate)."""

    low: object
    high: object = None
    open_low: bool = False
    served_high: object = None


@dataclasses.dataclass(frozen=True)
class Option:
    """One decoding option.

    Attributes:
        name: its name in CTranslate2's `translate_batch` and in
            `DecodingOptions`.
        dtype: "int32", "float32" or "bool" (the export's input dtype; the
            Python type a client checks: int, float or bool).
        default: CTranslate2's `translate_batch` default (`DecodingOptions`'
            and the translator export's; None: not a translator's).
        translator: whether it is an option of `Translator.translate_batch`
            and the `translate_batch` signature (in table order).
        generate: None (not a generator's), or `(position, default)`: its
            place among `Generator.generate_batch`'s options and the
            `generate_batch` signature's option inputs, and its default
            there (CTranslate2's).
        range: a `Range`, or None: any value of its dtype.
        flag: None, or `(position, help)`: its flag of `python -m
            keras_attention.translate` (`--name-with-dashes`; a bool is
            `store_true`), its place among those flags and its help.
        generate_name: its name in `generate_batch`, where it differs.
        decoding: whether it is a `DecodingOptions` field (else the
            export's or the client's: attention, a seed, the prompt in
            the result).
    """

    name: str
    dtype: str
    default: object
    translator: bool = True
    generate: tuple = None
    range: Range = None
    flag: tuple = None
    generate_name: str = None
    decoding: bool = True

    @property
    def generator_name(self):
        return self.generate_name or self.name

    @property
    def generate_default(self):
        return self.generate[1]

    @property
    def python_type(self):
        return {"int32": int, "float32": float, "bool": bool}[self.dtype]

    def within(self, value, served=False):
        """Whether `value` (a Python number, or an array or tensor of them)
        is within the range (`served`: within the export's bound too), by
        comparisons that numpy and TensorFlow broadcast."""
        bounds = self.range
        valid = value > bounds.low if bounds.open_low else value >= bounds.low
        if bounds.high is not None:
            valid = valid & (value <= bounds.high)
        if served and bounds.served_high is not None:
            valid = valid & (value <= bounds.served_high)
        return valid

    def python_requirement(self):
        """What a Python value must be, as `DecodingOptions` says it."""
        if self.dtype == "bool":
            return "a bool"
        bounds = self.range
        if bounds.open_low:
            if bounds.high is None:
                return f"> {bounds.low}"
            return f"in ({bounds.low}, {bounds.high}]"
        kind = "an integer" if self.dtype == "int32" else "a number"
        if bounds.high is None:
            return f"{kind} >= {bounds.low}"
        return f"{kind} from {bounds.low} to {bounds.high}"

    def served_requirement(self):
        """What a request's value must be, as the export says it."""
        bounds = self.range
        high = bounds.served_high if bounds.served_high is not None else bounds.high
        if bounds.open_low:
            return f"> {bounds.low}" if high is None else f"in ({bounds.low}, {high}]"
        return f">= {bounds.low}" if high is None else f"from {bounds.low} to {high}"


# fmt: off
OPTIONS = (
    Option("beam_size", "int32", 2, generate=(0, 1),
           range=Range(1, served_high=MAX_BEAM_SIZE), flag=(0, "beams; 1 is greedy search")),
    Option("patience", "float32", 1.0, generate=(1, 1.0), range=Range(0), flag=(
        2, "a line's search stops once round(beam size * patience) hypotheses ended")),
    Option("num_hypotheses", "int32", 1, generate=(2, 1), range=Range(1),
           flag=(1, "translations per line, best first")),
    Option("length_penalty", "float32", 1.0, generate=(3, 1.0),
           flag=(3, "hypotheses rank by log-probability / length ** this")),
    Option("repetition_penalty", "float32", 1.0, generate=(4, 1.0),
           range=Range(0, open_low=True),
           flag=(4, "above 1, tokens already written are made less likely")),
    Option("no_repeat_ngram_size", "int32", 0, generate=(5, 0), range=Range(0),
           flag=(5, "no n-gram of this size is written twice (0: no rule)")),
    Option("min_decoding_length", "int32", 1, generate=(8, 0), range=Range(0),
           flag=(6, "the fewest tokens a translation has"), generate_name="min_length"),
    Option("max_decoding_length", "int32", 256, generate=(7, 512),
           range=Range(1, served_high=MAX_DECODING_LENGTH),
           flag=(7, "the most tokens a translation has"), generate_name="max_length"),
    Option("disable_unk", "bool", False, generate=(6, False),
           flag=(8, "never write the unknown token")),
    Option("sampling_topk", "int32", 1, translator=False, generate=(9, 1), range=Range(0)),
    Option("sampling_topp", "float32", 1.0, translator=False, generate=(10, 1.0),
           range=Range(0, 1, open_low=True)),
    Option("sampling_temperature", "float32", 1.0, translator=False, generate=(11, 1.0),
           range=Range(0)),
    Option("return_attention", "bool", False, decoding=False),
    Option("replace_unknowns", "bool", False, decoding=False, flag=(
        9, "replace each <unk> of a translation by the source token it is aligned to")),
    Option("include_prompt_in_result", "bool", None, translator=False, generate=(12, True),
           decoding=False),
    Option("seed", "int32", None, translator=False, generate=(13, 0), decoding=False),
)
# fmt: on


def options_of(api):
    """The options of `api` (`TRANSLATOR` or `GENERATOR`) in the order of
    its signature's inputs."""
    if api == TRANSLATOR:
        return [option for option in OPTIONS if option.translator]
    if api == GENERATOR:
        return sorted(
            (option for option in OPTIONS if option.generate is not None),
            key=lambda option: option.generate[0],
        )
    raise ValueError(f"`api` must be {TRANSLATOR!r} or {GENERATOR!r}. Received: {api!r}")


def translator_options():
    """`translate_batch`'s options, in its inputs' order: `{name: (dtype,
    default)}`."""
    return {option.name: (option.dtype, option.default) for option in options_of(TRANSLATOR)}


def generator_options():
    """`generate_batch`'s options, in its inputs' order, by its names:
    `{name: (dtype, default)}`."""
    return {
        option.generator_name: (option.dtype, option.generate_default)
        for option in options_of(GENERATOR)
    }


def input_name(option, api):
    """`option`'s name in `api`."""
    return option.generator_name if api == GENERATOR else option.name


def decoding_options():
    """The rows that are `DecodingOptions` fields, in table order."""
    return [option for option in OPTIONS if option.decoding]


def generation_names():
    """`DecodingOptions` field -> its name in `generate_batch`, where they
    differ."""
    return {option.name: option.generate_name for option in OPTIONS if option.generate_name}


def flag_options():
    """The options `python -m keras_attention.translate` has flags for, in
    their order."""
    return sorted(
        (option for option in OPTIONS if option.flag is not None),
        key=lambda option: option.flag[0],
    )
