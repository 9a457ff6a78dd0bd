"""Byte-level BPE (GPT-2, Qwen2, Llama 3) in the TensorFlow graph, with
TensorFlow core string ops and TF Text's `regex_split` only, so that an
export runs in TF Serving as it is (TF Text has no BPE op).

The steps are Hugging Face `tokenizers`' for a byte-level BPE
`tokenizer.json`:

1. normalise (Qwen2: NFC);
2. split the text into pre-tokens with the pre-tokenizer's regex, each
   match one pre-token ("isolated");
3. write each pre-token's UTF-8 bytes as printable characters (GPT-2's
   byte-to-unicode table: a space is "Ġ");
4. merge adjacent symbols, the pair of lowest rank first (leftmost on a
   tie), until no pair has a rank; each symbol is then a vocabulary entry.

Decoding joins the tokens and maps each character back to its byte.

The regexes are Oniguruma's (what `tokenizers` runs); TensorFlow's is RE2,
which differs in two ways that matter here. Oniguruma's `\\s` is Unicode
white space, RE2's only ASCII: `\\s` is written out (`WHITE_SPACE`). RE2
has no lookahead, and all three patterns end with `\\s+(?!\\S)|\\s+` ("a
run of white space, less its last character when something follows").
That ending is matched as `\\s+`, which differs from it only where a run
of two or more white-space characters that the alternatives before it do
not match is followed by more text: there the true match stops one
character short, and the next one starts at that last character. So the
text is cut there, before that last character, a boundary the true
matches also have, and the pieces are matched alone. Up to the first such
run, the matches with the ending read as `\\s+` are the true ones; after
a cut, once a true match ends where one of those did, they are in step
again up to the next such run, which is then a cut too. A piece whose matches do not come back
in step is looked at again, in a loop. (Texts without two white-space
characters before another, as most prose, need no cut.)
"""

import json
from pathlib import Path

import tensorflow as tf

from keras_attention.data.tokenizers._common import RESERVED, _before_end
from keras_attention.utils import UNKNOWN_ID

# Unicode's White_Space characters: Oniguruma's `\s` (RE2's `\s` is ASCII).
WHITE_SPACE = (
    r"\t\n\x{0b}\f\r \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}"
    r"\x{202f}\x{205f}\x{3000}"
)
# The lookahead RE2 lacks, and the alternative after it that makes the
# loop above exact (see the module docstring).
LOOKAHEAD_ENDING = (r"\s+(?!\S)", r"\s+")
NORMALIZATIONS = (None, "NFC", "NFKC")
NO_RANK = 2**31 - 1


def bytes_to_unicode():
    """GPT-2's table: each byte -> a printable character (bytes that are
    printable stand for themselves; the others take code points from 256
    on, in byte order)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    characters = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in characters:
            characters[byte] = chr(256 + extra)
            extra += 1
    return characters


def top_level_alternatives(pattern):
    """`pattern` split at its `|` outside groups and character classes."""
    alternatives, start, depth, in_class, index = [], 0, 0, False, 0
    while index < len(pattern):
        character = pattern[index]
        if character == "\\":
            index += 2
            continue
        if in_class:
            in_class = character != "]"
        elif character == "[":
            in_class = True
            if pattern[index + 1 : index + 2] == "]":  # "[]...]": "]" is a member
                index += 1
        elif character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
        elif character == "|" and depth == 0:
            alternatives.append(pattern[start:index])
            start = index + 1
        index += 1
    return [*alternatives, pattern[start:]]


def to_re2(pattern):
    """An Oniguruma regex as RE2 reads it: `\\s` and `\\S` written out as
    Unicode white space. A ValueError names a construct RE2 cannot run."""
    out, in_class, index = [], False, 0
    while index < len(pattern):
        character = pattern[index]
        if character == "\\" and index + 1 < len(pattern):
            escape = pattern[index + 1]
            if escape == "s":
                out.append(WHITE_SPACE if in_class else f"[{WHITE_SPACE}]")
            elif escape == "S" and not in_class:
                out.append(f"[^{WHITE_SPACE}]")
            elif escape in "SdDwWhHRXKGAzZb" or escape.isdigit():
                # Their Oniguruma meaning differs from RE2's or RE2 lacks them.
                raise ValueError(f"the regex {pattern!r} uses \\{escape}, which is not supported")
            else:
                out.append(pattern[index : index + 2])
            index += 2
            continue
        if in_class:
            in_class = character != "]" or pattern[index - 1] == "["
        elif character == "[":
            in_class = True
        elif pattern.startswith(("(?=", "(?!", "(?<", "(?>"), index):
            raise ValueError(
                f"the regex {pattern!r} has a lookaround or atomic group "
                f"({pattern[index : index + 3]}...), which RE2 cannot run; only an ending "
                f"{'|'.join(LOOKAHEAD_ENDING)} is supported"
            )
        out.append(character)
        index += 1
    return "".join(out)


def split_pattern(pattern):
    """`(pattern, before, has_lookahead)` in RE2: the whole pattern with the
    lookahead ending matched as `\\s+`, and the alternatives before that
    ending (None without one). A ValueError names a regex RE2 cannot run."""
    alternatives = top_level_alternatives(pattern)
    if tuple(alternatives[-2:]) == LOOKAHEAD_ENDING:
        before = alternatives[:-2]
        whole = to_re2("|".join([*before, LOOKAHEAD_ENDING[1]]))
        parts = whole, to_re2("|".join(before)) if before else None, True
    else:
        parts = to_re2(pattern), None, False
    for regex in parts[:2]:
        if regex is not None:
            try:
                tf.strings.regex_full_match("", regex)
            except tf.errors.InvalidArgumentError as error:
                raise ValueError(f"RE2 cannot read the regex {regex!r}: {error.message}") from None
    return parts


def pre_tokenize(texts, pattern, before, lookahead):
    """`tf.string [B]` -> the pre-tokens, `RaggedTensor [B, None]`: the
    matches of `pattern` (and the text between them, if any).

    With `lookahead` (the pattern ended with `\\s+(?!\\S)|\\s+`, which
    `pattern` matches as `\\s+`), each text is first cut into pieces at the
    boundaries the lookahead makes (see the module docstring); `before` is
    the pattern's alternatives before that ending.
    """
    import tensorflow_text

    if not lookahead:
        return tensorflow_text.regex_split(texts, pattern, pattern)

    def cut_open_pieces(pieces, owner, is_open):
        open_index = tf.where(is_open)[:, 0]
        cuts, cut_rows, still_open = _cuts(tf.gather(pieces, open_index), pattern, before)
        count = tf.size(pieces, tf.int64)
        # Each piece's bounds: 0, its cuts, its end; each part is a piece.
        length = tf.strings.length(pieces)
        cuts = tf.RaggedTensor.from_value_rowids(
            cuts, tf.gather(open_index, cut_rows), nrows=count
        )  # [N, None]
        ends = tf.concat([cuts, length[:, None]], axis=1)
        begins = tf.concat([tf.zeros([count, 1], tf.int32), cuts], axis=1)
        part_of = ends.value_rowids()  # the piece each part is of
        parts = tf.strings.substr(
            tf.gather(pieces, part_of), begins.flat_values, ends.flat_values - begins.flat_values
        )
        # A piece's last part stays open where its cuts stopped short of the end.
        last = tf.concat([part_of[1:] != part_of[:-1], [True]], axis=0)
        piece_open = tf.scatter_nd(open_index[:, None], still_open, tf.shape(is_open, tf.int64))
        return parts, tf.gather(owner, part_of), last & tf.gather(piece_open, part_of)

    count = tf.size(texts)
    # Only a text with two white-space characters before another can need a cut.
    is_open = tf.strings.regex_full_match(texts, f"(?s).*[{WHITE_SPACE}]{{2}}[^{WHITE_SPACE}].*")
    pieces, owner, _ = tf.while_loop(
        lambda pieces, owner, is_open: tf.reduce_any(is_open),
        cut_open_pieces,
        (texts, tf.range(count), is_open),
        shape_invariants=(tf.TensorShape([None]),) * 3,
    )
    words = tensorflow_text.regex_split(pieces, pattern, pattern)  # [P, None]
    # A text's pieces are consecutive and in order.
    return tf.RaggedTensor.from_value_rowids(
        words, tf.cast(owner, tf.int64), nrows=tf.cast(count, tf.int64)
    ).merge_dims(1, 2)


def _cuts(pieces, pattern, before):
    """The cuts of `pieces` (`tf.string [N]`): before the last character of
    each run of white space that the lookahead ending matches one character
    short. `(cuts, rows, open)`: the byte offsets (int32 `[C]`) and their
    pieces (`[C]`, in order), and for each piece (`[N]`) whether it needs
    another look after its last cut.

    `pattern` finds the first such run of a piece: up to it, its matches are
    the true ones. After the cut, the true matches start one character
    early; where the first of them ends where one of `pattern`'s did, they
    are in step again, and the next run `pattern` found is a cut too.
    Where they are not, the rest of the piece is looked at again."""
    import tensorflow_text

    tokens, starts, ends = tensorflow_text.regex_split_with_offsets(pieces, pattern, pattern)
    row = tokens.value_rowids()
    values = tokens.flat_values
    starts, ends = tf.cast(starts.flat_values, tf.int32), tf.cast(ends.flat_values, tf.int32)
    length = tf.strings.length(pieces)
    run = tf.strings.regex_full_match(values, f"[{WHITE_SPACE}]{{2,}}")
    run &= ends < tf.gather(length, row)  # followed by more text
    if before is not None:
        # `pattern` prefers the alternatives before the ending: a run is
        # theirs exactly when they match it whole.
        run &= ~tf.strings.regex_full_match(values, f"(?:{before})")
    at = tf.where(run)[:, 0]  # the runs, piece by piece, in order
    rows = tf.gather(row, at)
    last = tf.strings.length(tf.strings.substr(tf.gather(values, at), -1, 1, unit="UTF8_CHAR"))
    cuts = tf.gather(ends, at) - last
    # The true match that starts at each cut, and where it ends.
    rest = tf.strings.substr(tf.gather(pieces, rows), cuts, tf.gather(length, rows) - cuts)
    first = tf.strings.regex_replace(rest, f"^({pattern})(?s:.*)$", r"\1")
    first_end = cuts + tf.strings.length(first)
    # In step again: that end is where one of `pattern`'s matches starts (or
    # the piece ends), no later than the next run.
    boundaries = tf.cast(row, tf.int64) * 2**32 + tf.cast(starts, tf.int64)
    wanted = tf.cast(rows, tf.int64) * 2**32 + tf.cast(first_end, tf.int64)
    place = tf.searchsorted(boundaries, wanted, out_type=tf.int64)
    found = tf.gather(boundaries, tf.minimum(place, tf.size(boundaries, tf.int64) - 1))
    next_run = tf.where(
        tf.concat([rows, [-1]], axis=0)[1:] == rows,
        tf.concat([tf.gather(starts, at), [0]], axis=0)[1:],
        NO_RANK,
    )
    in_step = ((found == wanted) | (first_end == tf.gather(length, rows))) & (first_end <= next_run)
    # A cut counts if every cut before it in its piece is in step.
    out_of_step = tf.cast(~in_step, tf.int32)
    before_count = tf.math.cumsum(out_of_step, exclusive=True)
    index = tf.range(tf.size(rows, tf.int64))
    row_first = tf.gather(
        tf.math.unsorted_segment_min(index, rows, tf.size(pieces, tf.int64)), rows
    )
    counts = before_count - tf.gather(before_count, row_first) == 0
    still_open = (
        tf.math.unsorted_segment_max(
            tf.cast(counts & ~in_step, tf.int32), rows, tf.size(pieces, tf.int64)
        )
        > 0
    )
    return tf.boolean_mask(cuts, counts), tf.boolean_mask(rows, counts), still_open


def _whole_where_known(symbols, ids):
    """`symbols [W, None]` with each word that the vocabulary `ids` holds
    whole as one symbol, so that no merge applies to it."""
    whole = tf.strings.reduce_join(symbols, axis=1)  # [W]
    known = ids.lookup(whole) != UNKNOWN_ID
    row = symbols.value_rowids()
    first = tf.range(tf.size(row, tf.int64)) == tf.gather(symbols.row_splits, row)
    known_symbol = tf.gather(known, row)
    values = tf.where(known_symbol, tf.gather(whole, row), symbols.flat_values)
    keep = ~known_symbol | first
    return tf.RaggedTensor.from_value_rowids(
        tf.boolean_mask(values, keep), tf.boolean_mask(row, keep), nrows=symbols.nrows()
    )


def _merge(symbols, ranks):
    """BPE on each row of `symbols` (`RaggedTensor [W, None]` of str): while
    a pair of adjacent symbols has a rank in `ranks`, the pair of lowest
    rank (the leftmost on a tie) becomes one symbol. A row with no pair
    left is set aside, so that each step works on the rows still merging."""
    nrows = symbols.nrows()

    def merge_one(step, values, row, done_values, done_rows):
        index = tf.range(tf.size(values, tf.int64))
        following = tf.concat([values, [""]], axis=0)[1:]
        same_word = tf.concat([row, [-1]], axis=0)[1:] == row
        rank = tf.where(same_word, ranks.lookup(values + " " + following), NO_RANK)
        best = tf.gather(tf.math.unsorted_segment_min(rank, row, nrows), row)  # its row's
        finished = best == NO_RANK
        done_values = done_values.write(step, tf.boolean_mask(values, finished))
        done_rows = done_rows.write(step, tf.boolean_mask(row, finished))
        at = tf.where((rank == best) & ~finished, index, tf.size(index, tf.int64))
        merge = index == tf.gather(tf.math.unsorted_segment_min(at, row, nrows), row)
        values = tf.where(merge, values + following, values)
        # The right half of a merged pair goes, and the finished rows.
        keep = ~tf.concat([[False], merge], axis=0)[:-1] & ~finished
        return (
            step + 1,
            tf.boolean_mask(values, keep),
            tf.boolean_mask(row, keep),
            done_values,
            done_rows,
        )

    def parts(dtype):
        # An empty part first, so that a batch of empty texts (no step)
        # still has one to concatenate.
        parts = tf.TensorArray(dtype, size=0, dynamic_size=True, infer_shape=False)
        return parts.write(0, tf.zeros([0], dtype))

    vector = tf.TensorShape([None])
    _, _, _, done_values, done_rows = tf.while_loop(
        lambda step, values, *_: tf.size(values) > 0,
        merge_one,
        (
            tf.constant(1),
            symbols.flat_values,
            symbols.value_rowids(),
            parts(tf.string),
            parts(tf.int64),
        ),
        shape_invariants=(tf.TensorShape([]), vector, vector, None, None),
    )
    # Rows were set aside whole, each in order: a stable sort by row restores them.
    rows = done_rows.concat()
    order = tf.argsort(rows, stable=True)
    return tf.RaggedTensor.from_value_rowids(
        tf.gather(done_values.concat(), order), tf.gather(rows, order), nrows=nrows
    )


def _static_table(keys, values, default):
    """A `StaticHashTable` from str `keys` to `values` of `default`'s dtype.
    (A table may not be empty: no keys become "" -> `default`, the same.)"""
    default = tf.convert_to_tensor(default)
    keys, values = (keys, values) if keys else ([""], [default.numpy()])
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(keys, tf.string), tf.constant(values, default.dtype)
        ),
        default,
    )


class ByteLevelBPETokenizer(tf.Module):
    """Byte-level BPE in the graph: a converted GPT-2, Qwen2 or Llama 3
    tokenizer, applied as Hugging Face's `tokenizers` applies its
    `tokenizer.json` (`keras_attention.convert` reads that file).

    The vocabulary is in this package's id order: ids 0-3 are padding,
    start, end and unknown, and the checkpoint's other tokens follow.

    Args:
        pieces: list of str, the token of each id (byte-level characters).
        merges: list of `[left, right]` pairs, in rank order.
        pattern: str, the pre-tokenizer's regex (Oniguruma syntax, as in
            `tokenizer.json`): every match is a pre-token.
        normalization: None, `"NFC"` or `"NFKC"`, applied before splitting.
        ignore_merges: bool, a pre-token that is a vocabulary entry as a
            whole is that entry, before any merge (Llama 3). Default False.
        add_start: bool, a prompt starts with the start id (Llama 3's
            `<|begin_of_text|>`); GPT-2 and Qwen2 add none. Default True.
        skipped_ids: list of int, ids that decoding leaves out (the
            checkpoint's special tokens), besides ids 0-3.

    Example:

    >>> tokenizer = ByteLevelBPETokenizer(
    ...     [*RESERVED, "a", "b", "Ġ", "ab", "Ġab"], [["a", "b"], ["Ġ", "ab"]], r" ?\\p{L}+|\\s+"
    ... )
    >>> tokenizer.tokenize(tf.constant(["ab ab"])).to_list()
    [[7, 8]]
    """

    def __init__(
        self,
        pieces,
        merges,
        pattern,
        normalization=None,
        ignore_merges=False,
        add_start=True,
        skipped_ids=(),
        name=None,
    ):
        super().__init__(name=name)
        self.vocabulary = list(pieces)
        self.merges = [list(pair) for pair in merges]
        self.pattern = str(pattern)
        self.normalization = normalization
        self.ignore_merges = bool(ignore_merges)
        self.add_start = bool(add_start)
        self.skipped_ids = sorted(int(i) for i in skipped_ids)
        if tuple(self.vocabulary[: len(RESERVED)]) != RESERVED:
            raise ValueError(
                f"A byte-level BPE vocabulary starts with {', '.join(RESERVED)}. "
                f"Received: {self.vocabulary[: len(RESERVED)]}"
            )
        if normalization not in NORMALIZATIONS:
            raise ValueError(
                f"`normalization` must be one of {NORMALIZATIONS}. Received: {normalization!r}"
            )
        self._pattern, self._before, self._lookahead = split_pattern(self.pattern)
        byte_to_character = bytes_to_unicode()
        self._characters = _static_table(
            [bytes([b]) for b in range(256)], [byte_to_character[b] for b in range(256)], ""
        )
        self._bytes = _static_table(
            [byte_to_character[b] for b in range(256)], [bytes([b]) for b in range(256)], ""
        )
        # Text never maps to ids 0-3 (ours) nor to the skipped ids (the
        # checkpoint's special tokens: Hugging Face finds those in a text
        # before pre-tokenizing, which this tokeniser does not do).
        skipped = set(self.skipped_ids)
        known = [
            (token, i)
            for i, token in enumerate(self.vocabulary)
            if i >= len(RESERVED) and i not in skipped
        ]
        self._ids = _static_table([t for t, _ in known], [i for _, i in known], UNKNOWN_ID)
        self._ranks = _static_table(
            [f"{left} {right}" for left, right in self.merges],
            list(range(len(self.merges))),
            NO_RANK,
        )
        self._tokens = tf.constant(["" for _ in RESERVED] + self.vocabulary[len(RESERVED) :])
        self._skipped = tf.constant([*range(len(RESERVED)), *self.skipped_ids], tf.int32)

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    # --- Encoding ---

    def tokenize(self, texts):
        """`tf.string [B]` -> int32 `RaggedTensor [B, None]`, no start or end
        id. (A scalar string -> its ids `[None]`.)"""
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank == 0:
            return self.tokenize(texts[None])[0]
        if self.normalization is not None:
            import tensorflow_text

            texts = tensorflow_text.normalize_utf8(texts, self.normalization)
        words = pre_tokenize(texts, self._pattern, self._before, self._lookahead)  # [B, None]
        # Each distinct pre-token is merged once.
        unique, index = tf.unique(words.flat_values)
        symbols = tf.ragged.map_flat_values(
            self._characters.lookup, tf.strings.bytes_split(unique)
        )  # [U, None]
        if self.ignore_merges:
            symbols = _whole_where_known(symbols, self._ids)
        ids = tf.ragged.map_flat_values(self._ids.lookup, _merge(symbols, self._ranks))
        return words.with_flat_values(tf.gather(ids, index)).merge_dims(1, 2)

    # --- Decoding ---

    def detokenize(self, ids):
        """int `[B, T]` -> `tf.string [B]`, up to the first end id, without
        ids 0-3 and the special tokens (Hugging Face's
        `skip_special_tokens=True`); bytes that are not UTF-8 become U+FFFD."""
        ids = tf.cast(ids, tf.int32)
        skipped = tf.reduce_any(ids[..., None] == self._skipped, axis=-1)
        kept = tf.ragged.boolean_mask(ids, _before_end(ids) & ~skipped)
        text = tf.strings.reduce_join(tf.gather(self._tokens, kept), axis=-1)
        characters = tf.strings.unicode_split(text, "UTF-8")
        data = tf.strings.reduce_join(
            tf.ragged.map_flat_values(self._bytes.lookup, characters), axis=-1
        )
        return tf.strings.unicode_transcode(
            data, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )

    # --- Files ---

    def save(self, path):
        """Writes the vocabulary, merges and options as JSON to `path`."""
        options = {
            "pieces": self.vocabulary,
            "merges": self.merges,
            "pattern": self.pattern,
            "normalization": self.normalization,
            "ignore_merges": self.ignore_merges,
            "add_start": self.add_start,
            "skipped_ids": self.skipped_ids,
        }
        Path(path).write_text(json.dumps(options, ensure_ascii=False) + "\n", "utf-8")

    @classmethod
    def load(cls, path):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"No byte-level BPE vocabulary at {path}")
        try:
            return cls(**json.loads(path.read_text("utf-8")))
        except (ValueError, TypeError) as error:
            raise ValueError(f"{path} is not a byte-level BPE vocabulary: {error}") from None
