"""MPNet: transformers' `MPNetModel` (all-mpnet-base-v2) into our
`TransformerEmbedder`.

What it is (transformers' `modeling_mpnet.py`; Song et al. 2020): token and
learned position embeddings, summed and layer normalised (no token types);
RoBERTa's positions, which start after the padding id 1 (our
`position_offset` of 2); post-norm blocks with biases everywhere, an exact
GELU and `layer_norm_eps` (all-mpnet-base-v2: 1e-5), whose self-attention adds a relative
position bias to its scores: T5's buckets (bidirectional, 32 of them, up
to a distance of 128), one table `encoder.relative_attention_bias` of
`[buckets, heads]` computed once and added in every layer (our
`relative_attention_num_buckets`). transformers computes the buckets with
32 whatever `relative_attention_num_buckets` says, so another number is
refused.

Tokenisation (transformers' `MPNetTokenizer`): BERT's (`BertNormalizer`,
`BertPreTokenizer`, WordPiece with `##`) over a vocabulary that starts
with `<s>`, `<pad>`, `</s>`, `<unk>` and ends with `<mask>`, BERT's own
vocabulary between them; a text is framed `<s> text </s>`, and a piece
the vocabulary lacks is `[UNK]` (its `unk_token`). transformers 5 builds
the normalizer from `tokenizer_config.json` (`do_lower_case`,
`strip_accents`, `tokenize_chinese_chars`); where `tokenizer.json` says
otherwise, the folder is refused.
"""

from keras_attention.convert import bert
from keras_attention.convert.checkpoint import CheckpointError, read_json
from keras_attention.convert.ids import make_id_map, reorder_rows
from keras_attention.data.tokenizers import WordPieceTokenizer
from keras_attention.models import build_transformer_embedder

MODEL_TYPES = ("mpnet",)
ARCHITECTURES = ("MPNetModel",)
TASK = "embedding"
BUILDER = build_transformer_embedder
ACTIVATIONS = bert.ACTIVATIONS
PAD_ID = 1  # `MPNetEmbeddings.padding_idx`, whatever the config says
BUCKETS, MAX_DISTANCE = 32, 128  # `MPNetEncoder.compute_position_bias`'s
# MPNetTokenizer's defaults (tokenizer_config.json may name others).
SPECIAL = {"pad_token": "<pad>", "cls_token": "<s>", "sep_token": "</s>", "unk_token": "[UNK]"}


def _refuse_file(path, key, value, why):
    raise CheckpointError(f"{path}: {key}={value!r} {why}")


def _special_tokens(checkpoint):
    """`(pad, start, end, unknown)`: the tokens `tokenizer_config.json` names."""
    settings = checkpoint.tokenizer_config
    tokens = []
    for key, default in SPECIAL.items():
        token = settings.get(key, default)
        if isinstance(token, dict):  # an AddedToken, as older versions wrote it
            token = token.get("content")
        if not isinstance(token, str) or not token:
            _refuse_file(checkpoint.folder / "tokenizer_config.json", key, token, "is not a token")
        tokens.append(token)
    return tokens


def _vocabulary(checkpoint, special):
    """The WordPiece vocabulary in id order: `vocab.txt`, or `tokenizer.json`'s
    `model.vocab` where there is no `vocab.txt`; checked against the config."""
    path = checkpoint.folder / "vocab.txt"
    if path.is_file():
        vocabulary = path.read_text("utf-8").splitlines()
        if len(set(vocabulary)) != len(vocabulary):
            raise CheckpointError(f"{path} repeats a token")
    else:
        path = checkpoint.folder / "tokenizer.json"
        if not path.is_file():
            raise CheckpointError(
                f"neither vocab.txt nor tokenizer.json found in {checkpoint.folder}: "
                "an MPNet checkpoint needs its WordPiece vocabulary"
            )
        vocabulary = bert._tokenizer_json_vocabulary(path, read_json(path))
    size = checkpoint.config.get("vocab_size")
    if size != len(vocabulary):
        checkpoint.refuse("vocab_size", size, f"but {path} has {len(vocabulary)} tokens")
    for token in special:
        if token not in vocabulary:
            raise CheckpointError(f"{path} has no {token}")
    if vocabulary.index(special[0]) != PAD_ID:
        _refuse_file(path, special[0], vocabulary.index(special[0]), f"is not id {PAD_ID}")
    return vocabulary


def _tokenizer_options(checkpoint, special):
    """`(lower_case, strip_accents, max_chars_per_word)`: what transformers 5's
    `MPNetTokenizer` runs, from `tokenizer_config.json`, checked against
    `tokenizer.json` where there is one."""
    settings = checkpoint.tokenizer_config
    config_path = checkpoint.folder / "tokenizer_config.json"
    lower_case = bool(settings.get("do_lower_case", True))
    strip_accents = settings.get("strip_accents")
    strip_accents = lower_case if strip_accents is None else bool(strip_accents)
    if not settings.get("tokenize_chinese_chars", True):
        _refuse_file(config_path, "tokenize_chinese_chars", False, "is not supported (true)")
    if strip_accents != lower_case:
        _refuse_file(
            config_path,
            "strip_accents",
            strip_accents,
            f"with do_lower_case {lower_case} is not supported (both or neither)",
        )
    max_chars = 100
    path = checkpoint.folder / "tokenizer.json"
    tokenizer = read_json(path, required=False)
    if tokenizer is not None:
        normalizer = tokenizer.get("normalizer") or {}
        if normalizer.get("type") != "BertNormalizer":
            _refuse_file(path, "normalizer", normalizer, "is not supported (BertNormalizer)")
        said = bool(normalizer.get("lowercase", True))
        said_strip = normalizer.get("strip_accents")
        said_strip = said if said_strip is None else bool(said_strip)
        if (said, said_strip) != (lower_case, strip_accents) or not normalizer.get(
            "handle_chinese_chars", True
        ):
            _refuse_file(
                path,
                "normalizer",
                normalizer,
                f"differs from {config_path.name} (lower-casing {lower_case}, accents stripped "
                f"{strip_accents}), which transformers follows",
            )
        pre_tokenizer = tokenizer.get("pre_tokenizer") or {}
        if pre_tokenizer.get("type") != "BertPreTokenizer":
            _refuse_file(
                path, "pre_tokenizer", pre_tokenizer, "is not supported (BertPreTokenizer)"
            )
        model = tokenizer.get("model") or {}
        if model.get("type") != "WordPiece":
            _refuse_file(path, "model.type", model.get("type"), "is not supported (WordPiece)")
        if model.get("continuing_subword_prefix", "##") != "##":
            _refuse_file(
                path,
                "model.continuing_subword_prefix",
                model["continuing_subword_prefix"],
                "is not supported (##)",
            )
        if model.get("unk_token", special[3]) != special[3]:
            _refuse_file(
                path, "model.unk_token", model["unk_token"], f"is not unk_token {special[3]!r}"
            )
        max_chars = int(model.get("max_input_chars_per_word", 100))
        # Added tokens are matched whole in the text before anything else:
        # only MPNet's own special tokens, which a text never holds here.
        known = (*special, "<s>", "</s>", "<pad>", "<unk>", "<mask>")
        added = [token.get("content") for token in tokenizer.get("added_tokens") or []]
        others = [token for token in added if token not in known]
        if others:
            _refuse_file(path, "added_tokens", others, "are not supported (MPNet's special ones)")
    return lower_case, strip_accents, max_chars


def read(checkpoint):
    """`(builder_arguments, sides)`, `sides` mapping "text" to
    `(vocabulary, id_map)`."""
    config = checkpoint.config
    special = _special_tokens(checkpoint)
    vocabulary = _vocabulary(checkpoint, special)
    activation = config.get("hidden_act", "gelu")
    if activation not in ACTIVATIONS:
        checkpoint.refuse("hidden_act", activation, f"is not one of {list(ACTIVATIONS)}")
    buckets = config.get("relative_attention_num_buckets", BUCKETS)
    if buckets != BUCKETS:
        checkpoint.refuse(
            "relative_attention_num_buckets",
            buckets,
            f"is not supported ({BUCKETS}: transformers computes the buckets with {BUCKETS})",
        )
    for key in ("is_decoder", "add_cross_attention"):
        if config.get(key, False):
            checkpoint.refuse(key, config[key], "is not supported: MPNet here is an encoder")
    width, heads = config["hidden_size"], config["num_attention_heads"]
    if width % heads:
        checkpoint.refuse("num_attention_heads", heads, f"does not divide hidden_size={width}")
    positions = config["max_position_embeddings"]
    if positions <= PAD_ID + 3:
        checkpoint.refuse("max_position_embeddings", positions, f"leaves no room after {PAD_ID}")
    id_map = make_id_map(len(vocabulary), *(vocabulary.index(token) for token in special))
    arguments = dict(
        num_layers=config["num_hidden_layers"],
        model_dim=width,
        num_heads=heads,
        intermediate_dim=config["intermediate_size"],
        dropout=float(config.get("hidden_dropout_prob", 0.1)),
        norm_first=False,
        activation=ACTIVATIONS[activation],
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-5)),
        positions="learned",
        max_position_embeddings=positions,
        position_offset=PAD_ID + 1,  # RoBERTa's positions start after the padding id
        relative_attention_num_buckets=BUCKETS,
        relative_attention_max_distance=MAX_DISTANCE,
        scale_embeddings=False,
        normalize_embeddings=True,
        pooling="mean",
    )
    return arguments, {"text": (vocabulary, id_map)}


def max_length(checkpoint):
    """The most ids a framed text has: the positions after the offset, or
    fewer where the tokenizer's `model_max_length` says so."""
    positions = int(checkpoint.config["max_position_embeddings"]) - (PAD_ID + 1)
    tokenizer_limit = checkpoint.tokenizer_config.get("model_max_length")
    if isinstance(tokenizer_limit, int | float) and tokenizer_limit < positions:
        return int(tokenizer_limit)
    return positions


def tokenizers(checkpoint, sides):
    vocabulary, id_map = sides["text"]
    lower_case, strip_accents, max_chars = _tokenizer_options(
        checkpoint, _special_tokens(checkpoint)
    )
    # Our ids 1 and 2 are <s> and </s>: WordPiece frames `<s> text </s>`.
    tokenizer = WordPieceTokenizer(
        [vocabulary[i] for i in id_map],
        lower_case=lower_case,
        strip_accents=strip_accents,
        max_length=max_length(checkpoint),
        max_chars_per_word=max_chars,
    )
    return {"text": tokenizer}


def _prefix(weights):
    """ "" for an `MPNetModel` ("mpnet." if its tensors were saved so)."""
    return "mpnet." if "mpnet.embeddings.word_embeddings.weight" in weights else ""


def load_encoder_weights(model, weights, sides):
    """Sets the embeddings, the relative position bias and the encoder
    stack of our `TransformerEmbedder` from the checkpoint's; returns the
    prefix of the names."""
    vocabulary, id_map = sides["text"]
    width, hidden = model.model_dim, model.intermediate_dim
    prefix = _prefix(weights)
    embeddings = f"{prefix}embeddings"
    words = weights.take(f"{embeddings}.word_embeddings.weight", (len(vocabulary), width))
    model.token_embedding.set_weights([reorder_rows(words, id_map)])
    positions = model.max_position_embeddings
    table = weights.take(f"{embeddings}.position_embeddings.weight", (positions, width))
    model.positional_encoding.set_weights([table])
    model.embedding_norm.set_weights(weights.norm(f"{embeddings}.LayerNorm", width))
    model.encoder.relative_position_bias.set_weights(
        [
            weights.take(
                f"{prefix}encoder.relative_attention_bias.weight", (BUCKETS, model.num_heads)
            )
        ]
    )
    for index, block in enumerate(model.encoder.blocks):
        layer = f"{prefix}encoder.layer.{index}"
        attention = f"{layer}.attention"
        qkv = [f"{attention}.attn.{name}" for name in ("q", "k", "v")]
        block.self_attention.qkv_projection.set_weights(weights.dense(qkv, width, width))
        block.self_attention.output_projection.set_weights(
            weights.dense(f"{attention}.attn.o", width, width)
        )
        block.self_attention_norm.set_weights(weights.norm(f"{attention}.LayerNorm", width))
        block.feed_forward_intermediate.set_weights(
            weights.dense(f"{layer}.intermediate.dense", width, hidden)
        )
        block.feed_forward_output.set_weights(weights.dense(f"{layer}.output.dense", hidden, width))
        block.feed_forward_norm.set_weights(weights.norm(f"{layer}.output.LayerNorm", width))
    if f"{embeddings}.position_ids" in weights:
        weights.skip(f"{embeddings}.position_ids")  # a buffer older versions saved: 0, 1, 2, ...
    return prefix


def run_settings(checkpoint):
    """The run's tokenizer kind and the most ids a text has."""
    return {"tokenizer": "wordpiece", "max_input_length": max_length(checkpoint)}
