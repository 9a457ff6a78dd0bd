"""BERT: transformers' `BertForSequenceClassification` (and `BertModel`,
which gets a new classifier to fine-tune) into our `TransformerClassifier`.

What BERT is (transformers' `modeling_bert.py`): token, learned position
and token type (segment) embeddings, summed, then a layer norm; post-norm
blocks with biases everywhere and an exact (erf) GELU feed-forward network;
layer norm epsilon `layer_norm_eps` (1e-12); the pooler, a dense layer with
tanh over `[CLS]`'s output, then the classifier. Tokenisation: WordPiece
over `vocab.txt`, normalised as `tokenizer.json`'s `BertNormalizer` (or
`tokenizer_config.json`) says, framed as `[CLS] a [SEP]` and `[CLS] a [SEP]
b [SEP]` (token types 0 up to the first `[SEP]`, then 1), at most
`model_max_length` ids.
"""

import warnings

from keras_attention.convert.checkpoint import CheckpointError, read_json
from keras_attention.convert.ids import make_id_map, reorder_rows
from keras_attention.data.tokenizers import END_ID, WordPieceTokenizer
from keras_attention.models import build_transformer_classifier

MODEL_TYPES = ("bert",)
ARCHITECTURES = ("BertForSequenceClassification", "BertModel")
TASK = "classification"
OTHER_TASKS = ("embedding",)  # see `sentence_transformers`
BUILDER = build_transformer_classifier
ACTIVATIONS = {"gelu": "gelu", "relu": "relu"}  # transformers' "gelu" is the exact one
SPECIAL = {"pad": "[PAD]", "start": "[CLS]", "end": "[SEP]", "unknown": "[UNK]"}


def _is_classifier(checkpoint):
    return "BertForSequenceClassification" in (checkpoint.config.get("architectures") or [])


def _vocabulary(checkpoint):
    """The WordPiece vocabulary as a list in id order: `vocab.txt`, one
    token a line, or, where a folder ships only `tokenizer.json` (as many
    sentence-transformers folders do), its `model.vocab`; checked against
    the config."""
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
                "a BERT checkpoint needs its WordPiece vocabulary"
            )
        vocabulary = _tokenizer_json_vocabulary(path, read_json(path))
    size = checkpoint.config.get("vocab_size")
    if size != len(vocabulary):
        checkpoint.refuse("vocab_size", size, f"but {path} has {len(vocabulary)} tokens")
    for token in SPECIAL.values():
        if token not in vocabulary:
            raise CheckpointError(f"{path} has no {token}")
    return vocabulary


def _tokenizer_json_vocabulary(path, tokenizer):
    """`tokenizer.json`'s WordPiece `model.vocab` (token -> id) as a list in
    id order; its ids must be 0 to N - 1, each once."""
    model = tokenizer.get("model") or {}
    if model.get("type") != "WordPiece":
        _refuse_setting(path, "model.type", model.get("type"), "is not supported (WordPiece)")
    by_token = model.get("vocab")
    if not isinstance(by_token, dict) or not by_token:
        _refuse_setting(path, "model.vocab", by_token, "is not a mapping of tokens to ids")
    by_id = {index: token for token, index in by_token.items()}
    if sorted(by_id) != list(range(len(by_token))):
        _refuse_setting(
            path, "model.vocab", f"{len(by_token)} tokens", "do not have the ids 0 to N - 1"
        )
    return [by_id[index] for index in range(len(by_id))]


def _refuse_setting(path, key, value, why):
    raise CheckpointError(f"{path}: {key}={value!r} {why}")


def _tokenizer_options(checkpoint):
    """`(lower_case, strip_accents, max_chars_per_word)`, from `tokenizer.json`
    where there is one (what transformers' tokenizer runs), else from
    `tokenizer_config.json`'s slow-tokenizer keys. What our tokenizer does
    not do exactly is refused by name."""
    path = checkpoint.folder / "tokenizer.json"
    tokenizer = read_json(path, required=False)
    if tokenizer is None:
        path = checkpoint.folder / "tokenizer_config.json"
        settings = checkpoint.tokenizer_config
        lower_case = bool(settings.get("do_lower_case", True))
        strip_accents = settings.get("strip_accents")
        if not settings.get("tokenize_chinese_chars", True):
            _refuse_setting(path, "tokenize_chinese_chars", False, "is not supported (true)")
        max_chars = 100
    else:
        normalizer = tokenizer.get("normalizer") or {}
        if normalizer.get("type") != "BertNormalizer":
            _refuse_setting(path, "normalizer", normalizer, "is not supported (BertNormalizer)")
        for key in ("clean_text", "handle_chinese_chars"):
            if not normalizer.get(key, True):
                _refuse_setting(path, f"normalizer.{key}", normalizer[key], "is not supported")
        lower_case = bool(normalizer.get("lowercase", True))
        strip_accents = normalizer.get("strip_accents")
        pre_tokenizer = tokenizer.get("pre_tokenizer") or {}
        if pre_tokenizer.get("type") != "BertPreTokenizer":
            _refuse_setting(
                path, "pre_tokenizer", pre_tokenizer, "is not supported (BertPreTokenizer)"
            )
        model = tokenizer.get("model") or {}
        if model.get("type") != "WordPiece":
            _refuse_setting(path, "model.type", model.get("type"), "is not supported (WordPiece)")
        if model.get("continuing_subword_prefix", "##") != "##":
            _refuse_setting(
                path,
                "model.continuing_subword_prefix",
                model["continuing_subword_prefix"],
                "is not supported (##)",
            )
        if model.get("unk_token", "[UNK]") != "[UNK]":
            _refuse_setting(path, "model.unk_token", model["unk_token"], "is not supported")
        max_chars = int(model.get("max_input_chars_per_word", 100))
        _check_template(path, tokenizer.get("post_processor"))
        # Added tokens are matched whole in the text before anything else:
        # only BERT's own special tokens, which a text never holds here.
        added = [token.get("content") for token in tokenizer.get("added_tokens") or []]
        others = [token for token in added if token not in (*SPECIAL.values(), "[MASK]")]
        if others:
            _refuse_setting(path, "added_tokens", others, "are not supported (BERT's special ones)")
    strip_accents = lower_case if strip_accents is None else bool(strip_accents)
    if strip_accents != lower_case:
        _refuse_setting(
            path,
            "strip_accents",
            strip_accents,
            f"with lower-casing {lower_case} is not supported (both or neither)",
        )
    return lower_case, strip_accents, max_chars


# BERT's framing, as `tokenizer.json`'s `TemplateProcessing` writes it.
SINGLE = [("[CLS]", 0), ("A", 0), ("[SEP]", 0)]
PAIR = [("[CLS]", 0), ("A", 0), ("[SEP]", 0), ("B", 1), ("[SEP]", 1)]


def _check_template(path, processor):
    def items(template):
        made = []
        for item in template or []:
            (value,) = item.values()  # {"SpecialToken": {...}} or {"Sequence": {...}}
            made.append((value.get("id"), value.get("type_id")))
        return made

    processor = processor or {}
    if processor.get("type") == "BertProcessing":
        return
    if processor.get("type") != "TemplateProcessing" or (
        items(processor.get("single")),
        items(processor.get("pair")),
    ) != (SINGLE, PAIR):
        _refuse_setting(
            path, "post_processor", processor, "is not BERT's [CLS] A [SEP] (B [SEP]) template"
        )


def read(checkpoint):
    """`(builder_arguments, sides)`, `sides` mapping "text" to
    `(vocabulary, id_map)`."""
    config = checkpoint.config
    vocabulary = _vocabulary(checkpoint)
    activation = config.get("hidden_act", "gelu")
    if activation not in ACTIVATIONS:
        checkpoint.refuse("hidden_act", activation, f"is not one of {list(ACTIVATIONS)}")
    position_kind = config.get("position_embedding_type", "absolute")
    if position_kind != "absolute":
        checkpoint.refuse("position_embedding_type", position_kind, "is not supported (absolute)")
    for key in ("is_decoder", "add_cross_attention"):
        if config.get(key, False):
            checkpoint.refuse(key, config[key], "is not supported: BERT here is an encoder")
    problem = config.get("problem_type")
    if problem not in (None, "single_label_classification"):
        checkpoint.refuse("problem_type", problem, "is not supported (single_label_classification)")
    if _is_classifier(checkpoint) and len(label_names(checkpoint)) < 2:
        checkpoint.refuse("num_labels", 1, "is a regression: a classifier has 2 labels or more")
    pad = config.get("pad_token_id", 0)
    if pad not in range(len(vocabulary)) or vocabulary[pad] != SPECIAL["pad"]:
        checkpoint.refuse("pad_token_id", pad, "is not the id of [PAD] in vocab.txt")
    width, heads = config["hidden_size"], config["num_attention_heads"]
    if width % heads:
        checkpoint.refuse("num_attention_heads", heads, f"does not divide hidden_size={width}")
    id_map = make_id_map(len(vocabulary), *(vocabulary.index(t) for t in SPECIAL.values()))
    arguments = dict(
        num_classes=len(label_names(checkpoint)),
        num_layers=config["num_hidden_layers"],
        model_dim=width,
        num_heads=heads,
        intermediate_dim=config["intermediate_size"],
        dropout=float(config.get("hidden_dropout_prob", 0.1)),
        norm_first=False,
        activation=ACTIVATIONS[activation],
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
        positions="learned",
        max_position_embeddings=config["max_position_embeddings"],
        scale_embeddings=False,
        num_segments=config.get("type_vocab_size", 2),
        separator_id=END_ID,  # [SEP]: our end id
        normalize_embeddings=True,
        pooling="pooler",
    )
    return arguments, {"text": (vocabulary, id_map)}


def label_names(checkpoint):
    """The class names, in id order: `id2label`'s (a `BertModel` has none
    that mean anything: its classifier is new)."""
    labels = checkpoint.config.get("id2label") or {"0": "LABEL_0", "1": "LABEL_1"}
    try:
        by_id = {int(i): str(name) for i, name in labels.items()}
    except (AttributeError, ValueError):
        checkpoint.refuse("id2label", labels, "is not a mapping of ids to names")
    if sorted(by_id) != list(range(len(by_id))):
        checkpoint.refuse("id2label", labels, f"does not name ids 0 to {len(by_id) - 1}")
    return [by_id[i] for i in range(len(by_id))]


def max_length(checkpoint):
    """The most ids a framed text has: the positions, or fewer where the
    tokenizer's `model_max_length` says so."""
    positions = int(checkpoint.config["max_position_embeddings"])
    tokenizer_limit = checkpoint.tokenizer_config.get("model_max_length")
    if isinstance(tokenizer_limit, int | float) and tokenizer_limit < positions:
        return int(tokenizer_limit)
    return positions


def tokenizers(checkpoint, sides):
    vocabulary, id_map = sides["text"]
    lower_case, strip_accents, max_chars = _tokenizer_options(checkpoint)
    tokenizer = WordPieceTokenizer(
        [vocabulary[i] for i in id_map],
        lower_case=lower_case,
        strip_accents=strip_accents,
        max_length=max_length(checkpoint),
        max_chars_per_word=max_chars,
    )
    return {"text": tokenizer}


def _prefix(weights):
    """`"bert."` for a `BertForSequenceClassification`, "" for a `BertModel`."""
    return "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""


def load_weights(model, weights, sides):
    """Sets every weight of our `TransformerClassifier` from the checkpoint's;
    a `BertModel`'s classifier, which it lacks, starts from zero."""
    prefix = load_encoder_weights(model, weights, sides)
    width = model.model_dim
    model.pooler.set_weights(weights.dense(f"{prefix}pooler.dense", width, width))
    if prefix:
        model.classifier.set_weights(weights.dense("classifier", width, model.num_classes))
    else:
        # A new head, from zero: every class equally likely until fine-tuned.
        model.classifier.set_weights([weight * 0 for weight in model.classifier.get_weights()])
        warnings.warn(
            f"{weights.source} holds a BertModel: its classifier is new (all zeros); "
            "fine-tune it with python -m keras_attention.recipes.classify --init-from RUN, "
            "or convert it with --task embedding for its pooled vectors",
            stacklevel=2,
        )
    weights.check_all_taken()


def load_encoder_weights(model, weights, sides):
    """Sets the embeddings and the encoder stack of our model (a
    `TransformerClassifier` or `TransformerEmbedder`) from the checkpoint's;
    returns the prefix of BERT's names ("bert." or "")."""
    vocabulary, id_map = sides["text"]
    width, hidden = model.model_dim, model.intermediate_dim
    prefix = _prefix(weights)
    embeddings = f"{prefix}embeddings"
    words = weights.take(f"{embeddings}.word_embeddings.weight", (len(vocabulary), width))
    model.token_embedding.set_weights([reorder_rows(words, id_map)])
    positions = model.max_position_embeddings
    table = weights.take(f"{embeddings}.position_embeddings.weight", (positions, width))
    model.positional_encoding.set_weights([table])
    model.segment_embedding.set_weights(
        [weights.take(f"{embeddings}.token_type_embeddings.weight", (model.num_segments, width))]
    )
    model.embedding_norm.set_weights(weights.norm(f"{embeddings}.LayerNorm", width))
    for index, block in enumerate(model.encoder.blocks):
        layer = f"{prefix}encoder.layer.{index}"
        attention = f"{layer}.attention"
        qkv = [f"{attention}.self.{name}" for name in ("query", "key", "value")]
        block.self_attention.qkv_projection.set_weights(weights.dense(qkv, width, width))
        block.self_attention.output_projection.set_weights(
            weights.dense(f"{attention}.output.dense", width, width)
        )
        block.self_attention_norm.set_weights(weights.norm(f"{attention}.output.LayerNorm", width))
        block.feed_forward_intermediate.set_weights(
            weights.dense(f"{layer}.intermediate.dense", width, hidden)
        )
        block.feed_forward_output.set_weights(weights.dense(f"{layer}.output.dense", hidden, width))
        block.feed_forward_norm.set_weights(weights.norm(f"{layer}.output.LayerNorm", width))
    for name in (f"{embeddings}.position_ids", f"{embeddings}.token_type_ids"):
        if name in weights:
            weights.skip(name)  # buffers older versions saved: 0, 1, 2, ... and zeros
    return prefix


def run_settings(checkpoint):
    """The run's tokenizer kind and the most ids a text has."""
    return {"tokenizer": "wordpiece", "max_input_length": max_length(checkpoint)}
