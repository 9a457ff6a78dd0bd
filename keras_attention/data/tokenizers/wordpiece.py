"""Tokenisers that run inside the TensorFlow graph, so they can go into a
SavedModel and run in TF Serving unchanged.

Ids 0-3 are reserved in every vocabulary: 0 padding, 1 start, 2 end,
3 unknown. Both tokenisers offer `train`, `tokenize` (strings -> ragged
ids, no start or end id), `detokenize` (ids -> strings, up to the first end
id), `vocabulary`, `vocabulary_size`, `save` and `load`.
"""

import hashlib
import io
import json
from pathlib import Path

import tensorflow as tf

from keras_attention.utils import END_ID, PAD_ID, START_ID, UNKNOWN_ID  # noqa: F401

PAD, START, END, UNKNOWN = "<pad>", "<s>", "</s>", "<unk>"
RESERVED = (PAD, START, END, UNKNOWN)
TOKENIZERS = ("character", "subword")
WORD_BOUNDARY = "\u2581"  # SentencePiece's "▁", a space before a word


def _without_reserved(tokens):
    """String tokens with the reserved ones made ""."""
    reserved = tf.reduce_any(tokens[..., None] == tf.constant(RESERVED), axis=-1)
    return tf.where(reserved, "", tokens)


def _join_pieces(tokens):
    """SentencePiece pieces `[B, T]` ("" padding, reserved left out) ->
    text `[B]`: joined, each "▁" a space, the ends stripped."""
    text = tf.strings.reduce_join(_without_reserved(tokens), axis=-1)
    return tf.strings.strip(tf.strings.regex_replace(text, WORD_BOUNDARY, " "))


def _before_end(ids):
    """True at the ids before the first end id of each row."""
    return tf.math.cumsum(tf.cast(ids == END_ID, tf.int32), axis=-1, exclusive=True) == 0


class CharacterTokenizer(tf.Module):
    """One id per Unicode character, with TensorFlow ops only. A vocabulary
    file has one token per line; line i is id i.

    Args:
        vocabulary: the characters, in id order (after the reserved tokens),
            or a full vocabulary list that starts with the reserved tokens.

    Example:

    >>> tokenizer = CharacterTokenizer.train(["2026-11-29"])
    >>> ids = tokenizer.tokenize(tf.constant(["2026"]))
    >>> tokenizer.detokenize(ids.to_tensor()).numpy()
    array([b'2026'], dtype=object)
    """

    def __init__(self, vocabulary, name=None):
        super().__init__(name=name)
        vocabulary = list(vocabulary)
        if tuple(vocabulary[: len(RESERVED)]) != RESERVED:
            vocabulary = list(RESERVED) + vocabulary
        for token in vocabulary[len(RESERVED) :]:
            if len(token) != 1:
                raise ValueError(
                    f"A character vocabulary holds single characters. Received: {token!r}"
                )
        if len(set(vocabulary)) != len(vocabulary):
            raise ValueError("The vocabulary repeats a token.")
        self.vocabulary = vocabulary
        self._tokens = tf.constant(vocabulary)
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                self._tokens, tf.range(len(vocabulary), dtype=tf.int32)
            ),
            default_value=UNKNOWN_ID,
        )

    @classmethod
    def train(cls, texts):
        """The characters of `texts`, most frequent first (ties by code point)."""
        counts = {}
        for text in texts:
            for character in text:
                counts[character] = counts.get(character, 0) + 1
        return cls(sorted(counts, key=lambda c: (-counts[c], c)))

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    def tokenize(self, texts):
        """`tf.string [B]` -> int32 `RaggedTensor [B, None]`, no start or end id.

        Bytes that are not UTF-8 become U+FFFD (unknown, unless it is in the
        vocabulary) instead of an error.
        """
        return tf.ragged.map_flat_values(self._table.lookup, self.tokenize_as_strings(texts))

    def tokenize_as_strings(self, texts):
        """`tf.string [B]` -> `RaggedTensor [B, None]` of strings: the token
        behind each id of `tokenize`, as the text has it (a character the
        vocabulary lacks too)."""
        return tf.strings.unicode_split(texts, "UTF-8", errors="replace")

    def detokenize(self, ids):
        """int `[B, T]` -> `tf.string [B]`: the tokens before the first end id,
        without padding, start or unknown ids."""
        ids = tf.cast(ids, tf.int32)
        ids = tf.where(_before_end(ids) & (ids >= len(RESERVED)), ids, PAD_ID)
        tokens = tf.gather(self._tokens, ids)
        tokens = tf.where(ids == PAD_ID, "", tokens)
        return tf.strings.reduce_join(tokens, axis=-1)

    def detokenize_strings(self, tokens):
        """`tf.string [B, T]` tokens ("" padding) -> `tf.string [B]`, as
        `detokenize` makes text of their ids (reserved tokens left out);
        for tokens that need not be in the vocabulary."""
        return tf.strings.reduce_join(_without_reserved(tokens), axis=-1)

    def save(self, path):
        """Writes the vocabulary, one token per line."""
        Path(path).write_text("\n".join(self.vocabulary) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"No vocabulary file at {path}")
        lines = path.read_text(encoding="utf-8").split("\n")
        if lines[-1] != "" or tuple(lines[: len(RESERVED)]) != RESERVED:
            raise ValueError(
                f"{path} is not a vocabulary file: it must start with the lines "
                f"{', '.join(RESERVED)} and end with a newline"
            )
        return cls(lines[:-1])


def _named_model_resource(model):
    """TF Text's SentencePiece model resource, named after the model's hash."""
    from tensorflow_text.python.ops import sentencepiece_tokenizer as ops

    class NamedModelResource(ops._SentencepieceModelResource):
        def _create_resource(self):
            return ops.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model,
                shared_name="sentencepiece_" + hashlib.sha256(self._model).hexdigest()[:24],
            )

    return NamedModelResource(model, name=None)


class SentencePieceOps(tf.Module):
    """TF Text's SentencePiece tokenizer over a serialized `model`, giving
    `out_type` (tf.int32 ids or tf.string pieces) from `tokenize`."""

    def __init__(self, model, out_type, name=None):
        super().__init__(name=name)
        self.model, self.out_type = model, out_type
        self._tokenizer = self._make_tokenizer()

    def _make_tokenizer(self):
        import tensorflow_text

        tokenizer = tensorflow_text.SentencepieceTokenizer(model=self.model, out_type=self.out_type)
        # TF Text's SentencePiece resource has no name of its own: in a
        # reloaded SavedModel with two of them (a translation model's source
        # and target vocabularies), both ops used one model, the last made
        # (seen with tensorflow-text 2.20). Named by a hash of the model,
        # each resource is its own, and equal models may share one.
        tokenizer._model_resource = _named_model_resource(self.model)
        return tokenizer

    def __call__(self, method, argument):
        """`self._tokenizer.method(argument)`. `tf.random.set_seed` (which
        `keras.utils.set_random_seed` calls) clears TensorFlow's eager caches
        and with them the SentencePiece resource made when this tokeniser
        was: eagerly, it is made again once."""
        try:
            return getattr(self._tokenizer, method)(argument)
        except tf.errors.NotFoundError:
            if not tf.executing_eagerly():
                raise
            self._tokenizer = self._make_tokenizer()
            return getattr(self._tokenizer, method)(argument)


class SubwordTokenizer(tf.Module):
    """A SentencePiece (unigram) subword vocabulary, trained with
    `sentencepiece` and applied in the graph by `tensorflow_text`, whose ops
    the TF Serving model server links in.

    Args:
        model: the serialized SentencePiece model (bytes), as written by
            `save` or `train`.
    """

    def __init__(self, model, name=None):
        super().__init__(name=name)
        import sentencepiece

        self.model = bytes(model)
        processor = sentencepiece.SentencePieceProcessor(model_proto=self.model)
        self.vocabulary = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
        self._sentencepiece = SentencePieceOps(self.model, tf.int32)
        self._pieces = SentencePieceOps(self.model, tf.string)

    @classmethod
    def train(cls, texts, vocabulary_size, symbols=()):
        """Trains a unigram model on `texts` (an iterable of str).

        `vocabulary_size` counts the 4 reserved ids; a corpus too small for
        it gets a smaller vocabulary rather than an error. `symbols` (str
        without spaces, such as placeholders like `%s`) are kept as one
        piece each wherever they occur (SentencePiece's user-defined symbols).
        """
        import sentencepiece

        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=model,
            vocab_size=vocabulary_size,
            model_type="unigram",
            pad_id=PAD_ID,
            bos_id=START_ID,
            eos_id=END_ID,
            unk_id=UNKNOWN_ID,
            pad_piece=PAD,
            bos_piece=START,
            eos_piece=END,
            unk_piece=UNKNOWN,
            hard_vocab_limit=False,
            character_coverage=1.0,
            user_defined_symbols=[s for s in symbols if s not in RESERVED],  # <s>: a tag too
            minloglevel=2,
        )
        return cls(model.getvalue())

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    def tokenize(self, texts):
        """`tf.string [B]` -> int32 `RaggedTensor [B, None]`, no start or end id."""
        return self._sentencepiece("tokenize", texts)

    def tokenize_as_strings(self, texts):
        """`tf.string [B]` -> `RaggedTensor [B, None]` of strings: the piece
        behind each id of `tokenize` (a piece the vocabulary lacks too)."""
        return self._pieces("tokenize", texts)

    def detokenize(self, ids):
        """int `[B, T]` -> `tf.string [B]`, up to the first end id."""
        ids = tf.cast(ids, tf.int32)
        keep = _before_end(ids) & (ids >= len(RESERVED))
        return self._sentencepiece("detokenize", tf.ragged.boolean_mask(ids, keep))

    def detokenize_strings(self, tokens):
        """`tf.string [B, T]` pieces ("" padding) -> `tf.string [B]`, as
        SentencePiece decodes the pieces of a unigram model (joined, "▁" a
        space, the ends stripped; reserved pieces left out); for pieces
        that need not be in the vocabulary."""
        return _join_pieces(tokens)

    def save(self, path):
        Path(path).write_bytes(self.model)

    @classmethod
    def load(cls, path):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"No SentencePiece model at {path}")
        try:
            return cls(path.read_bytes())
        except RuntimeError as error:
            raise ValueError(f"{path} is not a SentencePiece model: {error}") from None


class MappedSubwordTokenizer(tf.Module):
    """A SentencePiece model whose pieces are looked up in a vocabulary of
    their own: the tokenisers of converted checkpoints (OPUS-MT's
    `source.spm` with its `vocab.json`, Llama's `tokenizer.model`), applied
    in the graph by `tensorflow_text`.

    The vocabulary is in this package's id order: ids 0-3 are padding,
    start, end and unknown, and the checkpoint's other ids follow
    (`keras_attention.convert` makes the order).

    Args:
        model: the serialized SentencePiece model (bytes).
        pieces: list of str, the token of each id.
        append_end: bool, end every tokenised text with the end id (Marian's
            sources end with `</s>`). Default False.
        language_codes: bool, a text that starts with `>>code<<` keeps that
            code whole, as one token, before its pieces (multi-target
            OPUS-MT models). Default False.
        byte_fallback: bool, detokenise through the SentencePiece model,
            which turns byte pieces (`<0xE2>`) back into bytes (Llama);
            otherwise the pieces are joined, "▁" becomes a space and the
            ends are stripped, as `MarianTokenizer` does. Default False.
        space_as_prefix: bool, a text that starts with a space takes that
            space as SentencePiece's word-boundary prefix instead of getting
            a second one (transformers' Llama tokenizer, `legacy=False`).
            Default False.
    """

    def __init__(
        self,
        model,
        pieces,
        append_end=False,
        language_codes=False,
        byte_fallback=False,
        space_as_prefix=False,
        name=None,
    ):
        super().__init__(name=name)
        import sentencepiece

        self.model = bytes(model)
        self.vocabulary = list(pieces)
        self.append_end = bool(append_end)
        self.language_codes = bool(language_codes)
        self.byte_fallback = bool(byte_fallback)
        self.space_as_prefix = bool(space_as_prefix)
        if tuple(self.vocabulary[: len(RESERVED)]) != RESERVED:
            raise ValueError(
                f"A mapped vocabulary starts with {', '.join(RESERVED)}. "
                f"Received: {self.vocabulary[: len(RESERVED)]}"
            )
        ids = tf.range(len(self.vocabulary), dtype=tf.int32)
        self._tokens = tf.constant(self.vocabulary)
        self._ids = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(self._tokens, ids), default_value=UNKNOWN_ID
        )
        if self.byte_fallback:
            processor = sentencepiece.SentencePieceProcessor(model_proto=self.model)
            model_ids = [processor.piece_to_id(piece) for piece in self.vocabulary]
            self._model_ids = tf.constant(model_ids, tf.int32)  # ours -> the model's
        self._sentencepiece = SentencePieceOps(self.model, tf.string)

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    def tokenize(self, texts):
        """`tf.string [B]` -> int32 `RaggedTensor [B, None]`: no start id; the
        end id only with `append_end`. (A scalar string -> its ids `[None]`.)"""
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank == 0:
            return self.tokenize(texts[None])[0]
        return tf.ragged.map_flat_values(self._ids.lookup, self.tokenize_as_strings(texts))

    def tokenize_as_strings(self, texts):
        """`tf.string [B]` -> `RaggedTensor [B, None]` of strings: the piece
        behind each id of `tokenize` (a piece the vocabulary lacks too)."""
        codes = tf.zeros([tf.shape(texts)[0], 0], tf.string)
        if self.language_codes:
            # `MarianTokenizer.remove_language_code`: ">>" up to the first "<<".
            has_code = tf.strings.regex_full_match(texts, "(?s)>>.*?<<.*")
            code = tf.strings.regex_replace(texts, "(?s)^(>>.*?<<).*$", "\\1")
            codes = tf.ragged.boolean_mask(code[:, None], has_code[:, None])
            texts = tf.where(has_code, tf.strings.regex_replace(texts, "(?s)^>>.*?<<", ""), texts)
        if self.space_as_prefix:
            texts = tf.strings.regex_replace(texts, "^ ", "")
        pieces = tf.concat([codes, self._sentencepiece("tokenize", texts)], axis=1)
        if self.append_end:
            ends = tf.fill([pieces.nrows(), 1], END)
            pieces = tf.concat([pieces, tf.RaggedTensor.from_tensor(ends)], axis=1)
        return pieces

    def detokenize(self, ids):
        """int `[B, T]` -> `tf.string [B]`, up to the first end id, without
        the reserved ids (Hugging Face's `skip_special_tokens=True`)."""
        ids = tf.cast(ids, tf.int32)
        kept = tf.ragged.boolean_mask(ids, _before_end(ids) & (ids >= len(RESERVED)))
        if self.byte_fallback:
            model_ids = tf.ragged.map_flat_values(tf.gather, self._model_ids, kept)
            return self._sentencepiece("detokenize", model_ids)
        text = tf.strings.reduce_join(tf.gather(self._tokens, kept), axis=-1)
        return tf.strings.strip(tf.strings.regex_replace(text, WORD_BOUNDARY, " "))

    def detokenize_strings(self, tokens):
        """`tf.string [B, T]` pieces ("" padding) -> `tf.string [B]`, as
        `detokenize` joins the pieces of ids (without byte fallback); for
        pieces that need not be in the vocabulary."""
        return _join_pieces(tokens)

    def save(self, path):
        """Writes the vocabulary and options as JSON to `path` and the
        SentencePiece model beside it (`path` with the suffix `.model`)."""
        path = Path(path)
        path.with_suffix(".model").write_bytes(self.model)
        options = {
            "pieces": self.vocabulary,
            "append_end": self.append_end,
            "language_codes": self.language_codes,
            "byte_fallback": self.byte_fallback,
            "space_as_prefix": self.space_as_prefix,
        }
        path.write_text(json.dumps(options, ensure_ascii=False, indent=0) + "\n", "utf-8")

    @classmethod
    def load(cls, path):
        path = Path(path)
        model = path.with_suffix(".model")
        for file in (path, model):
            if not file.is_file():
                raise FileNotFoundError(f"No mapped vocabulary file at {file}")
        try:
            options = json.loads(path.read_text("utf-8"))
            return cls(model.read_bytes(), **options)
        except (ValueError, TypeError, RuntimeError) as error:
            raise ValueError(f"{path} is not a mapped vocabulary: {error}") from None


# Hugging Face's `BertNormalizer(clean_text=True)` drops NUL, U+FFFD and
# every character of Unicode's "other" categories but tab, newline and
# carriage return: control (Cc), format (Cf), private use (Co) and
# unassigned (Cn, for which RE2 has no class: those are kept here). Then it
# turns every whitespace character into a space.
BERT_DROPPED = r"[\x{0}\x{FFFD}\p{Cf}\p{Co}\x{1}-\x{8}\x{B}\x{C}\x{E}-\x{1F}\x{7F}-\x{9F}]"
BERT_WHITESPACE = r"[\s\p{Z}]"


class WordPieceTokenizer(tf.Module):
    """BERT's tokenizer in the graph: Hugging Face's `BertNormalizer`
    (control characters dropped, whitespace made spaces, accents stripped
    and text lower-cased as the checkpoint says) with TensorFlow's string
    ops, then TF Text's `BertTokenizer` (split on whitespace, punctuation
    and CJK characters; WordPiece with `##` continuations), ops that the
    TF Serving model server links in. Every text is framed as BERT reads
    it: `[CLS] text [SEP]`, and a pair `[CLS] a [SEP] b [SEP]`.

    The vocabulary is in this package's id order: ids 0-3 are the
    checkpoint's padding, `[CLS]`, `[SEP]` and unknown tokens (our padding,
    start, end and unknown ids; `keras_attention.convert` makes the order).

    Args:
        vocabulary: list of str, the token of each id.
        lower_case: bool, lower-case the text. Default True.
        strip_accents: bool, decompose the text (NFD) and drop its
            non-spacing marks. Default True.
        max_length: int, the most ids a framed text or pair has (the
            model's positions): longer texts are truncated as Hugging Face's
            tokenizer truncates them (`longest_first` for pairs). Default 512.
        max_chars_per_word: int, a longer word is one unknown token.
            Default 100.
    """

    def __init__(
        self,
        vocabulary,
        lower_case=True,
        strip_accents=True,
        max_length=512,
        max_chars_per_word=100,
        name=None,
    ):
        super().__init__(name=name)
        import tensorflow_text

        self.vocabulary = list(vocabulary)
        self.lower_case = bool(lower_case)
        self.strip_accents = bool(strip_accents)
        self.max_length = int(max_length)
        self.max_chars_per_word = int(max_chars_per_word)
        if self.max_length < 3:
            raise ValueError(
                f"`max_length` must leave room for [CLS], [SEP] and a token. Received: {max_length}"
            )
        if len(set(self.vocabulary)) != len(self.vocabulary):
            raise ValueError("The vocabulary repeats a token.")
        self._tokens = tf.constant(self.vocabulary)
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                self._tokens, tf.range(len(self.vocabulary), dtype=tf.int64)
            ),
            default_value=-1,
        )
        self._tokenizer = tensorflow_text.BertTokenizer(
            table,
            token_out_type=tf.int64,
            unknown_token=self.vocabulary[UNKNOWN_ID],
            max_chars_per_token=self.max_chars_per_word,
        )

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    def normalize(self, texts):
        """`BertNormalizer`'s steps, in its order."""
        import tensorflow_text

        texts = tf.strings.regex_replace(texts, BERT_DROPPED, "")
        texts = tf.strings.regex_replace(texts, BERT_WHITESPACE, " ")
        if self.strip_accents:
            texts = tensorflow_text.normalize_utf8(texts, "NFD")
            texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
        if self.lower_case:
            # Character by character, as Hugging Face lower-cases: ICU's
            # lower-casing would make a final capital sigma a final sigma.
            texts = tf.strings.regex_replace(texts, "\u03a3", "\u03c3")
            texts = tf.strings.lower(texts, encoding="utf-8")
        return texts

    def pieces(self, texts):
        """`tf.string [B]` -> int32 `RaggedTensor [B, None]`: the WordPiece
        ids, not framed, not truncated."""
        words = self._tokenizer.tokenize(self.normalize(texts))  # [B, words, pieces]
        return tf.cast(words.merge_dims(1, 2), tf.int32)

    def tokenize(self, texts):
        """`tf.string [B]` -> int32 `RaggedTensor [B, None]`: `[CLS]`, the
        text's first `max_length - 2` pieces, `[SEP]`. (A scalar string ->
        its ids `[None]`.)"""
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank == 0:
            return self.tokenize(texts[None])[0]
        pieces = self.pieces(texts)[:, : self.max_length - 2]
        return self._frame([pieces])

    def tokenize_pairs(self, texts, text_pairs):
        """Two `tf.string [B]` -> int32 `RaggedTensor [B, None]`: `[CLS] a
        [SEP] b [SEP]`, at most `max_length` ids, truncated as Hugging
        Face's `longest_first` does (the `tokenizers` library's rule: the
        shorter side keeps all its pieces if the longer keeps at least as
        many, otherwise each keeps half, the second half the longer side's).
        A row whose `text_pairs` is empty is a single text, `[CLS] a [SEP]`,
        as transformers' tokenizer reads an empty second text."""
        texts = tf.convert_to_tensor(texts, tf.string)
        text_pairs = tf.convert_to_tensor(text_pairs, tf.string)
        first, second = self.pieces(texts), self.pieces(text_pairs)
        budget = tf.constant(self.max_length - 3, tf.int64)
        length_a, length_b = first.row_lengths(), second.row_lengths()  # [B] each
        shorter, longer = tf.minimum(length_a, length_b), tf.maximum(length_a, length_b)
        kept_longer = tf.where(shorter > budget, shorter, tf.maximum(shorter, budget - shorter))
        kept_shorter = shorter
        halves = kept_shorter + kept_longer > budget
        kept_shorter = tf.where(halves, budget // 2, kept_shorter)
        kept_longer = tf.minimum(tf.where(halves, budget // 2 + budget % 2, kept_longer), longer)
        a_is_shorter = length_a <= length_b
        keep_a = tf.where(a_is_shorter, kept_shorter, kept_longer)
        keep_b = tf.where(a_is_shorter, kept_longer, kept_shorter)
        pairs = self._frame([_first(first, keep_a), _first(second, keep_b)])
        singles = self.tokenize(texts)
        # Each row from `pairs` or from `singles`: both side by side, one kept.
        single = tf.expand_dims(text_pairs == "", 1)  # [B, 1]
        both = tf.concat([singles, pairs], axis=1)
        from_singles = tf.ragged.range(both.row_lengths()) < tf.expand_dims(
            singles.row_lengths(), 1
        )
        return tf.ragged.boolean_mask(both, tf.equal(from_singles, single))

    def _frame(self, segments):
        """`[CLS] segment [SEP] (segment [SEP])`, row by row."""
        rows = segments[0].nrows()
        start, end = (
            tf.RaggedTensor.from_tensor(tf.fill([rows, 1], token)) for token in (START_ID, END_ID)
        )
        parts = [start]
        for segment in segments:
            parts += [segment, end]
        return tf.concat(parts, axis=1)

    def detokenize(self, ids):
        """int `[B, T]` -> `tf.string [B]`: the pieces without the reserved
        ids, `##` continuations joined to the piece before them."""
        ids = tf.cast(ids, tf.int32)
        kept = tf.ragged.boolean_mask(ids, ids >= len(RESERVED))
        tokens = tf.ragged.map_flat_values(tf.gather, self._tokens, kept)
        text = tf.strings.reduce_join(" " + tokens, axis=-1)
        return tf.strings.strip(tf.strings.regex_replace(text, " ##", ""))

    def options(self):
        """The constructor's arguments, as `save` writes them."""
        return {
            "vocabulary": self.vocabulary,
            "lower_case": self.lower_case,
            "strip_accents": self.strip_accents,
            "max_length": self.max_length,
            "max_chars_per_word": self.max_chars_per_word,
        }

    def with_max_length(self, max_length):
        """The same tokenizer, framing texts and pairs in `max_length` ids."""
        return WordPieceTokenizer(**{**self.options(), "max_length": max_length})

    def save(self, path):
        """Writes the vocabulary and options as JSON to `path`."""
        text = json.dumps(self.options(), ensure_ascii=False, indent=0)
        Path(path).write_text(text + "\n", "utf-8")

    @classmethod
    def load(cls, path):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"No WordPiece vocabulary file at {path}")
        try:
            return cls(**json.loads(path.read_text("utf-8")))
        except (ValueError, TypeError) as error:
            raise ValueError(f"{path} is not a WordPiece vocabulary: {error}") from None


def _first(ragged, counts):
    """The first `counts[i]` values of each row `i` of `ragged`."""
    positions = tf.ragged.range(ragged.row_lengths())
    return tf.ragged.boolean_mask(ragged, positions < tf.expand_dims(counts, 1))


def token_ids(tokenizer, texts, max_length):
    """Strings `[B]` -> ids `[B, S]`, 1 <= S <= max_length, padded with 0.

    Bytes that are not UTF-8 become U+FFFD first, so no tokeniser sees them;
    an all-empty batch still gets one (padding) column, so the model always
    has a position to attend to.
    """
    ids = tokenizer.tokenize(repair_utf8(texts))[:, :max_length]
    return padded(ids)


def pair_token_ids(tokenizer, texts, text_pairs):
    """Two strings `[B]` -> ids `[B, S]` of each pair as the tokenizer
    frames and truncates pairs (a `WordPieceTokenizer`'s `tokenize_pairs`),
    padded with 0; bytes that are not UTF-8 become U+FFFD first."""
    return padded(tokenizer.tokenize_pairs(repair_utf8(texts), repair_utf8(text_pairs)))


def repair_utf8(texts):
    """Strings with every byte that is not UTF-8 made U+FFFD."""
    return tf.strings.unicode_transcode(
        texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )


def padded(ids):
    """Ragged ids `[B, None]` -> `[B, S]`, padded with 0, at least one column."""
    width = tf.maximum(ids.bounding_shape(axis=1), 1)
    return ids.to_tensor(default_value=PAD_ID, shape=[ids.nrows(), width])


def prompt_starts(tokenizer):
    """Whether a language model's prompt starts with the start id: it does
    for every tokeniser but a byte-level BPE one whose checkpoint puts no
    token first (GPT-2, Qwen2)."""
    return getattr(tokenizer, "add_start", True)


def tokenizer_kinds():
    """`{kind: class}` of the tokenisers a run folder may name (its
    config.json's "tokenizer")."""
    from keras_attention.data.tokenizers.byte_level_bpe import ByteLevelBPETokenizer

    return {
        "character": CharacterTokenizer,
        "subword": SubwordTokenizer,
        "mapped_subword": MappedSubwordTokenizer,
        "wordpiece": WordPieceTokenizer,
        "byte_level_bpe": ByteLevelBPETokenizer,
    }


def tokenizer_kind(tokenizer):
    """The kind a run folder records for `tokenizer`."""
    return next(kind for kind, cls in tokenizer_kinds().items() if type(tokenizer) is cls)


def load_run_tokenizer(files, config, side):
    """The tokeniser a recipe saved for `side` ("source", "target", or
    "text" for a model with one vocabulary) in a run's folder: `files` its
    `RunFiles`, `config` its `config.json` as a dict, whose "tokenizer"
    names the kind. A ValueError that names the file when the kind or the
    vocabulary file is missing."""
    kinds = tokenizer_kinds()
    kind = config.get("tokenizer")
    if kind not in kinds:
        raise ValueError(
            f"{files.config} names no tokenizer ({', '.join(kinds)}): tokenizer={kind!r}"
        )
    file = files.vocabulary(side, kind)
    if not file.is_file():
        raise ValueError(f"{files.folder} has no {side} vocabulary: {file} not found")
    return kinds[kind].load(file)
