"""`WordPieceTokenizer`: BERT's tokenizer."""

import json
from pathlib import Path

import tensorflow as tf

from keras_attention.data.tokenizers._common import RESERVED
from keras_attention.utils import END_ID, START_ID, UNKNOWN_ID

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
