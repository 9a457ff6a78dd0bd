"""XLM-RoBERTa: transformers' `XLMRobertaModel` (paraphrase-multilingual-MiniLM-L12-v2,
multilingual E5) into our `TransformerEmbedder`.

What it is (transformers' `modeling_xlm_roberta.py`): BERT's blocks and
names (post-norm, biases everywhere, an exact GELU, `layer_norm_eps`
1e-5) over token, learned position and token type embeddings, summed and
layer normalised. RoBERTa's positions start after the padding id
(`create_position_ids_from_input_ids`: a real token's position is the
number of real tokens up to it plus `pad_token_id`), so a right-padded text
reads rows 2, 3, ... of the position table: our `position_offset`. There is
one token type (`type_vocab_size` 1).

Tokenisation: a SentencePiece Unigram model (`sentencepiece.bpe.model`)
with fairseq's ids: `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3, the model's
own pieces shifted by one, `<mask>` last; a text is framed `<s> text </s>`.
transformers 5 runs the model's normalizer (its precompiled charsmap), then
splits on white space (`WhitespaceSplit`, Unicode's White_Space) and puts
"▁" before each word (`Metaspace`): SentencePiece itself collapses only the
spaces its normalizer leaves, so the white space that normalizer keeps
(U+0085 for `nmt_nfkc`) is made a space first (`as_spaces`). A folder with
`tokenizer.json` alone gets its SentencePiece model made from that file's
Unigram pieces, scores and charsmap, which is all transformers 5 reads of
it. Neither torch nor transformers is needed.
"""

import base64

import numpy as np

from keras_attention.convert import bert
from keras_attention.convert.checkpoint import CheckpointError, read_json
from keras_attention.convert.ids import make_id_map
from keras_attention.data.tokenizers import END_ID, MappedSubwordTokenizer
from keras_attention.models import build_transformer_embedder

MODEL_TYPES = ("xlm-roberta",)
ARCHITECTURES = ("XLMRobertaModel",)
TASK = "embedding"
BUILDER = build_transformer_embedder
ACTIVATIONS = bert.ACTIVATIONS
# fairseq's first ids (transformers' `XLMRobertaTokenizer`), and the last.
FAIRSEQ = ("<s>", "<pad>", "</s>", "<unk>")
MASK = "<mask>"
# SentencePiece's own first ids in these models.
SENTENCEPIECE_SPECIAL = ("<unk>", "<s>", "</s>")
# The characters of Unicode's White_Space property, on which transformers'
# `WhitespaceSplit` (Rust's `char::is_whitespace`) splits.
WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
# SentencePiece's piece types (sentencepiece_model.proto).
NORMAL, UNKNOWN, CONTROL = 1, 2, 3


def _refuse_file(path, key, value, why):
    raise CheckpointError(f"{path}: {key}={value!r} {why}")


def _model_proto(model, path):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(model)
    except Exception as error:  # protobuf's DecodeError
        raise CheckpointError(f"{path} is not a SentencePiece model: {error}") from None
    return proto


def _from_sentencepiece(path):
    """`(model, pieces, scores)` of `sentencepiece.bpe.model`: the model's
    bytes, and its pieces and scores in transformers' id order (fairseq's
    four, the model's other pieces, `<mask>`), checked."""
    model = path.read_bytes()
    proto = _model_proto(model, path)
    if proto.trainer_spec.model_type != proto.trainer_spec.UNIGRAM:
        _refuse_file(
            path, "trainer_spec.model_type", proto.trainer_spec.model_type, "is not Unigram"
        )
    if proto.trainer_spec.byte_fallback:
        _refuse_file(path, "trainer_spec.byte_fallback", True, "is not supported (false)")
    first = tuple(piece.piece for piece in proto.pieces[:3])
    if first != SENTENCEPIECE_SPECIAL:
        _refuse_file(path, "pieces[:3]", list(first), f"are not {list(SENTENCEPIECE_SPECIAL)}")
    others = [piece for piece in proto.pieces[3:] if piece.type != NORMAL]
    if others:
        _refuse_file(
            path,
            "pieces",
            f"{others[0].piece!r} of type {others[0].type}",
            "is not supported (normal pieces after <unk>, <s>, </s>)",
        )
    pieces = [*FAIRSEQ, *(piece.piece for piece in proto.pieces[3:]), MASK]
    scores = [0.0] * 4 + [piece.score for piece in proto.pieces[3:]] + [0.0]
    return model, pieces, scores


def _tokenizer_json(path):
    """`(pieces, scores, charsmap)` of `tokenizer.json`'s Unigram model, in
    its id order, and its normalizer's precompiled charsmap (b"": none)."""
    tokenizer = read_json(path)
    model = tokenizer.get("model") or {}
    if model.get("type") != "Unigram":
        _refuse_file(path, "model.type", model.get("type"), "is not supported (Unigram)")
    if model.get("byte_fallback"):
        _refuse_file(path, "model.byte_fallback", True, "is not supported (false)")
    vocabulary = model.get("vocab")
    if not isinstance(vocabulary, list) or not all(
        isinstance(entry, list) and len(entry) == 2 for entry in vocabulary
    ):
        _refuse_file(
            path, "model.vocab", type(vocabulary).__name__, "is not a list of [piece, score]"
        )
    pieces = [str(piece) for piece, _ in vocabulary]
    scores = [float(score) for _, score in vocabulary]
    if tuple(pieces[:4]) != FAIRSEQ or pieces[-1] != MASK or model.get("unk_id") != 3:
        _refuse_file(
            path,
            "model.vocab",
            pieces[:4] + ["...", pieces[-1]],
            "is not XLM-RoBERTa's layout (<s> <pad> </s> <unk> ... <mask>, unk_id 3)",
        )
    normalizers = tokenizer.get("normalizer") or {}
    normalizers = normalizers.get("normalizers", [normalizers]) if normalizers else []
    charsmaps = [
        entry.get("precompiled_charsmap") or ""
        for entry in normalizers
        if entry.get("type") == "Precompiled"
    ]
    charsmap = base64.b64decode(charsmaps[0]) if charsmaps else b""
    added = [token.get("content") for token in tokenizer.get("added_tokens") or []]
    extra = [token for token in added if token not in (*FAIRSEQ, MASK)]
    if extra:
        _refuse_file(path, "added_tokens", extra, "are not supported (XLM-RoBERTa's special ones)")
    return pieces, scores, charsmap


def _build_model(pieces, scores, charsmap):
    """A SentencePiece Unigram model (bytes) of transformers' pieces and
    scores (fairseq's order) and the charsmap: `<unk>`, `<s>`, `</s>`, then
    every piece between `<unk>` and `<mask>`."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    trainer = proto.trainer_spec
    trainer.model_type = trainer.UNIGRAM
    trainer.vocab_size = len(pieces) - 2
    trainer.unk_id, trainer.bos_id, trainer.eos_id, trainer.pad_id = 0, 1, 2, -1
    normalizer = proto.normalizer_spec
    normalizer.name = "user_defined" if charsmap else "identity"
    normalizer.precompiled_charsmap = charsmap
    normalizer.add_dummy_prefix = True
    normalizer.remove_extra_whitespaces = True
    normalizer.escape_whitespaces = True
    for piece, kind in zip(SENTENCEPIECE_SPECIAL, (UNKNOWN, CONTROL, CONTROL), strict=True):
        proto.pieces.add(piece=piece, score=0.0, type=kind)
    for piece, score in zip(pieces[4:-1], scores[4:-1], strict=True):
        proto.pieces.add(piece=piece, score=score, type=NORMAL)
    return proto.SerializeToString()


def _kept_white_space(model, path):
    """The White_Space characters the model's normalizer keeps as they are
    (transformers splits on them after normalizing; SentencePiece would
    not), to be made spaces first. A normalizer that turns one into other
    white space is refused."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    kept = []
    for character in WHITE_SPACE:
        normalized = processor.normalize(f"a{character}b")
        if normalized == f"\u2581a{character}b":
            kept.append(character)
        elif any(c in WHITE_SPACE for c in normalized):
            _refuse_file(
                path,
                "normalizer",
                f"U+{ord(character):04X} -> {normalized!r}",
                "turns white space into other white space: not supported",
            )
    return "".join(kept)


def _sentencepiece(checkpoint):
    """`(model, pieces, source)`: the SentencePiece model (bytes), the
    checkpoint's pieces in its id order, and the file they come from."""
    folder = checkpoint.folder
    model_path, json_path = folder / "sentencepiece.bpe.model", folder / "tokenizer.json"
    if model_path.is_file():
        model, pieces, scores = _from_sentencepiece(model_path)
        if json_path.is_file():
            # transformers 5 reads tokenizer.json where there is one: it
            # must hold the same pieces, scores and charsmap.
            json_pieces, json_scores, charsmap = _tokenizer_json(json_path)
            proto = _model_proto(model, model_path)
            same = (
                json_pieces == pieces
                and np.array_equal(np.float32(json_scores), np.float32(scores))
                and charsmap == proto.normalizer_spec.precompiled_charsmap
            )
            if not same:
                raise CheckpointError(
                    f"{json_path} and {model_path} hold different vocabularies or normalizers"
                )
        return model, pieces, model_path
    if json_path.is_file():
        pieces, scores, charsmap = _tokenizer_json(json_path)
        return _build_model(pieces, scores, charsmap), pieces, json_path
    raise CheckpointError(
        f"neither sentencepiece.bpe.model nor tokenizer.json found in {folder}: "
        "an XLM-RoBERTa checkpoint needs its SentencePiece vocabulary"
    )


def _check_tokenizer_config(checkpoint):
    settings = checkpoint.tokenizer_config
    path = checkpoint.folder / "tokenizer_config.json"
    if not settings.get("add_prefix_space", True):
        _refuse_file(path, "add_prefix_space", False, "is not supported (true)")
    for key in ("do_lower_case", "legacy"):
        if settings.get(key):
            _refuse_file(path, key, settings[key], "is not supported")


def read(checkpoint):
    """`(builder_arguments, sides)`, `sides` mapping "text" to
    `(vocabulary, id_map)` and "sentencepiece" to `(model, as_spaces)`."""
    config = checkpoint.config
    model, vocabulary, source = _sentencepiece(checkpoint)
    _check_tokenizer_config(checkpoint)
    size = config.get("vocab_size")
    if size != len(vocabulary):
        checkpoint.refuse("vocab_size", size, f"but {source.name} has {len(vocabulary)} tokens")
    activation = config.get("hidden_act", "gelu")
    if activation not in ACTIVATIONS:
        checkpoint.refuse("hidden_act", activation, f"is not one of {list(ACTIVATIONS)}")
    position_kind = config.get("position_embedding_type", "absolute")
    if position_kind != "absolute":
        checkpoint.refuse("position_embedding_type", position_kind, "is not supported (absolute)")
    for key in ("is_decoder", "add_cross_attention"):
        if config.get(key, False):
            checkpoint.refuse(key, config[key], "is not supported: XLM-RoBERTa here is an encoder")
    pad = config.get("pad_token_id", 1)
    if pad != FAIRSEQ.index("<pad>"):
        checkpoint.refuse("pad_token_id", pad, "is not the id of <pad> (1)")
    if config.get("type_vocab_size", 1) != 1:
        checkpoint.refuse("type_vocab_size", config["type_vocab_size"], "is not supported (1)")
    width, heads = config["hidden_size"], config["num_attention_heads"]
    if width % heads:
        checkpoint.refuse("num_attention_heads", heads, f"does not divide hidden_size={width}")
    positions = config["max_position_embeddings"]
    if positions <= pad + 3:
        checkpoint.refuse("max_position_embeddings", positions, f"leaves no room after {pad + 1}")
    special = ("<pad>", "<s>", "</s>", "<unk>")  # our padding, start, end, unknown
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
        position_offset=pad + 1,  # RoBERTa's positions start after the padding id
        scale_embeddings=False,
        num_segments=1,
        separator_id=END_ID,
        normalize_embeddings=True,
        pooling="mean",
    )
    as_spaces = _kept_white_space(model, source)
    sides = {"text": (vocabulary, id_map), "sentencepiece": (model, as_spaces)}
    return arguments, sides


def max_length(checkpoint):
    """The most ids a framed text has: the positions after the offset, or
    fewer where the tokenizer's `model_max_length` says so."""
    positions = int(checkpoint.config["max_position_embeddings"]) - 2
    tokenizer_limit = checkpoint.tokenizer_config.get("model_max_length")
    if isinstance(tokenizer_limit, int | float) and tokenizer_limit < positions:
        return int(tokenizer_limit)
    return positions


def tokenizers(checkpoint, sides):
    vocabulary, id_map = sides["text"]
    model, as_spaces = sides["sentencepiece"]
    tokenizer = MappedSubwordTokenizer(
        model,
        [vocabulary[i] for i in id_map],
        append_end=True,
        prepend_start=True,
        max_length=max_length(checkpoint),
        as_spaces=as_spaces,
    )
    return {"text": tokenizer}


def load_encoder_weights(model, weights, sides):
    """BERT's names and layout (`bert.load_encoder_weights`); returns the
    prefix of the names ("")."""
    return bert.load_encoder_weights(model, weights, sides)


def run_settings(checkpoint):
    """The run's tokenizer kind and the most ids a text has."""
    return {"tokenizer": "mapped_subword", "max_input_length": max_length(checkpoint)}
