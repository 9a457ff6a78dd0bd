"""A byte-level BPE `tokenizer.json` (GPT-2, Qwen2, Llama 3) read into our
`ByteLevelBPETokenizer`.

What is read: the BPE model's vocabulary and merges, the added tokens
(special ones are left out of decoded text), the normalizer (none, NFC or
NFKC), the pre-tokenizer's regex (GPT-2's `ByteLevel` with `use_regex`
splits with that pre-tokenizer's own regex; Qwen2 and Llama 3 write theirs
in a `Split` before a `ByteLevel` without regex), and whether the
post-processor puts a start token before the text (Llama 3's
`TemplateProcessing`). Any other component, option or value is refused by
file, key and value: a tokenizer that is not reproduced exactly is not
converted.
"""

from keras_attention.convert.checkpoint import CheckpointError, read_json
from keras_attention.data.tokenizers.byte_level_bpe import split_pattern

# The regex of `tokenizers`' ByteLevel pre-tokenizer with `use_regex: true`
# (tokenizers/src/pre_tokenizers/byte_level.rs): part of that pre-tokenizer,
# as GPT-2's checkpoints name it without writing it out.
BYTE_LEVEL_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
NORMALIZERS = {None: None, "NFC": "NFC", "NFKC": "NFKC"}


class TokenizerFile:
    """`tokenizer.json`, read with every refusal naming the file and key."""

    def __init__(self, checkpoint):
        self.path = checkpoint.file("tokenizer.json")
        self.data = read_json(self.path)

    def refuse(self, key, value, why):
        raise CheckpointError(f"{self.path}: {key}={value!r} {why}")

    def component(self, key):
        value = self.data.get(key)
        if value is not None and not isinstance(value, dict):
            self.refuse(key, value, "is not an object")
        return value


def _check(file, key, value, allowed, why):
    if value not in allowed:
        file.refuse(key, value, why)


def _normalization(file):
    normalizer = file.component("normalizer")
    kind = None if normalizer is None else normalizer.get("type")
    _check(file, "normalizer.type", kind, NORMALIZERS, "is not supported (none, NFC, NFKC)")
    return NORMALIZERS[kind]


def _byte_level(file, key, component, use_regex):
    _check(
        file,
        f"{key}.add_prefix_space",
        component.get("add_prefix_space", False),
        (False,),
        "is not supported (false)",
    )
    _check(
        file,
        f"{key}.use_regex",
        component.get("use_regex", True),
        (use_regex,),
        f"is not supported here ({str(use_regex).lower()})",
    )


def _pattern(file):
    """The pre-tokenizer's regex (Oniguruma syntax, as `tokenizers` runs it)."""
    pre = file.component("pre_tokenizer")
    kind = None if pre is None else pre.get("type")
    if kind == "ByteLevel":
        _byte_level(file, "pre_tokenizer", pre, use_regex=True)
        pattern, key = BYTE_LEVEL_PATTERN, "pre_tokenizer"
    elif kind == "Sequence":
        steps = pre.get("pretokenizers") or []
        kinds = [step.get("type") for step in steps]
        if kinds != ["Split", "ByteLevel"]:
            file.refuse(
                "pre_tokenizer.pretokenizers", kinds, "is not supported ([Split, ByteLevel])"
            )
        split, key = steps[0], "pre_tokenizer.pretokenizers[0]"
        _check(
            file,
            f"{key}.behavior",
            split.get("behavior"),
            ("Isolated",),
            "is not supported (Isolated)",
        )
        _check(file, f"{key}.invert", split.get("invert", False), (False,), "is not supported")
        pattern = (split.get("pattern") or {}).get("Regex")
        if not isinstance(pattern, str):
            file.refuse(f"{key}.pattern", split.get("pattern"), "is not supported (a Regex)")
        _byte_level(file, "pre_tokenizer.pretokenizers[1]", steps[1], use_regex=False)
        key += ".pattern.Regex"
    else:
        file.refuse(
            "pre_tokenizer.type", kind, "is not supported (ByteLevel, or Split then ByteLevel)"
        )
    try:
        split_pattern(pattern)
    except ValueError as error:
        raise CheckpointError(f"{file.path}: {key}: {error}") from None
    return pattern


def _start_token(file, added):
    """The token the post-processor puts before the text, or None."""
    post = file.component("post_processor")
    steps = (
        []
        if post is None
        else post.get("processors", [post])
        if post.get("type") == "Sequence"
        else [post]
    )
    start = None
    for index, step in enumerate(steps):
        key = (
            "post_processor"
            if post.get("type") != "Sequence"
            else f"post_processor.processors[{index}]"
        )
        kind = step.get("type")
        if kind == "ByteLevel":
            continue  # offsets only
        if kind != "TemplateProcessing":
            file.refuse(f"{key}.type", kind, "is not supported (ByteLevel, TemplateProcessing)")
        single = step.get("single") or []
        pieces = [next(iter(item)) for item in single]
        if pieces not in (["Sequence"], ["SpecialToken", "Sequence"]):
            file.refuse(
                f"{key}.single", single, "is not supported (the text, or a token and the text)"
            )
        if pieces[0] == "SpecialToken":
            start = single[0]["SpecialToken"]["id"]
            if start not in added:
                file.refuse(f"{key}.single", single, "names a token that added_tokens lacks")
    return None if start is None else added[start]


def read_byte_level_bpe(checkpoint, vocabulary_size):
    """`tokenizer.json` of `checkpoint` -> a dict: `pieces` (the token of
    each of the model's `vocabulary_size` ids; `<|id N|>` for an id the
    tokenizer lacks), `merges`, `pattern`, `normalization`, `ignore_merges`,
    `start` (the id put before a text, or None) and `special` (the ids that
    decode to nothing: the special tokens' and the unnamed ones)."""
    file = TokenizerFile(checkpoint)
    # What makes it byte-level first, so that another kind is named as such.
    pattern, normalization = _pattern(file), _normalization(file)
    decoder = file.component("decoder")
    kind = None if decoder is None else decoder.get("type")
    _check(file, "decoder.type", kind, ("ByteLevel",), "is not supported (ByteLevel)")
    model = file.component("model") or {}
    _check(file, "model.type", model.get("type"), ("BPE",), "is not supported (byte-level BPE)")
    for key, allowed in (
        ("dropout", (None,)),
        ("unk_token", (None,)),
        ("continuing_subword_prefix", (None, "")),
        ("end_of_word_suffix", (None, "")),
        ("byte_fallback", (False, None)),
    ):
        _check(file, f"model.{key}", model.get(key), allowed, f"is not supported ({allowed[0]})")
    vocabulary = model.get("vocab")
    if not isinstance(vocabulary, dict):
        file.refuse("model.vocab", type(vocabulary).__name__, "is not an object")
    added = {token["content"]: token for token in file.data.get("added_tokens") or []}
    pieces = [None] * vocabulary_size
    for token, index in [*vocabulary.items(), *((t, a["id"]) for t, a in added.items())]:
        if not 0 <= index < vocabulary_size:
            file.refuse(
                f"model.vocab[{token!r}]",
                index,
                f"is outside the {vocabulary_size} ids of config.json's vocab_size",
            )
        pieces[index] = token
    # Ids the tokenizer has no token for (Qwen2's embedding rows past its
    # tokenizer's) get a name; like special tokens, they decode to nothing.
    unnamed = [i for i, piece in enumerate(pieces) if piece is None]
    for i in unnamed:
        pieces[i] = f"<|id {i}|>"
    merges = [m.split(" ") if isinstance(m, str) else list(m) for m in model.get("merges") or []]
    for merge in merges:
        if len(merge) != 2:
            file.refuse("model.merges", merge, "is not a pair")
    start = _start_token(file, added)
    return {
        "pieces": pieces,
        "merges": merges,
        "pattern": pattern,
        "normalization": normalization,
        "ignore_merges": bool(model.get("ignore_merges", False)),
        "start": None if start is None else start["id"],
        "special": sorted([*(a["id"] for a in added.values() if a.get("special")), *unnamed]),
    }


def make_tokenizer(read, id_map):
    """The `ByteLevelBPETokenizer` of `read` (`read_byte_level_bpe`'s) in our
    id order (`id_map`)."""
    from keras_attention.convert.ids import NO_ID, pieces
    from keras_attention.data.tokenizers.byte_level_bpe import ByteLevelBPETokenizer

    ours = {i: our for our, i in enumerate(id_map) if i != NO_ID}
    return ByteLevelBPETokenizer(
        pieces(read["pieces"], id_map),
        read["merges"],
        read["pattern"],
        normalization=read["normalization"],
        ignore_merges=read["ignore_merges"],
        add_start=read["start"] is not None,
        skipped_ids=[ours[i] for i in read["special"] if i in ours],
    )
