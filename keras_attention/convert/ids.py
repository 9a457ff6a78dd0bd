"""A checkpoint's token ids in this package's order.

Our models, decoding and exports reserve ids 0-3: padding (never a real
token, masked out), start, end and unknown. A checkpoint has its own:
OPUS-MT has `</s>` 0, `<unk>` 1 and `<pad>` last, and starts decoding from
`<pad>`; Llama has `<unk>` 0, `<s>` 1, `</s>` 2 and no padding. Rather than
teaching every part of the package other ids, a conversion reorders the
vocabulary's rows: our id `i` is the checkpoint's id `id_map[i]`. Ids 0-3
take the checkpoint's padding, start, end and unknown ids (a missing one is
`NO_ID`: a row of zeros), and the checkpoint's other ids follow in their
order. Every embedding and output row is moved the same way, so every
answer is the checkpoint's, token for token.
"""

import numpy as np

from keras_attention.convert.checkpoint import CheckpointError
from keras_attention.data.tokenizers import RESERVED
from keras_attention.utils import NEG_INF

NO_ID = -1


def make_id_map(vocabulary_size, pad, start, end, unknown):
    """`id_map` (a list of checkpoint ids, in our id order) for a vocabulary
    of `vocabulary_size` ids whose special ids are given (None: none)."""
    special = [NO_ID if i is None else int(i) for i in (pad, start, end, unknown)]
    for name, value in zip(("pad", "start", "end", "unknown"), special, strict=True):
        if not NO_ID <= value < vocabulary_size:
            raise CheckpointError(
                f"the {name} id {value} is outside the vocabulary of {vocabulary_size} ids"
            )
    used = set(special)
    return special + [i for i in range(vocabulary_size) if i not in used]


def reorder_rows(matrix, id_map):
    """`matrix [V_checkpoint, ...]` -> `[len(id_map), ...]` in our order, a
    row of zeros where `id_map` has `NO_ID`."""
    matrix = np.asarray(matrix)
    rows = np.zeros((len(id_map), *matrix.shape[1:]), matrix.dtype)
    present = np.array([i != NO_ID for i in id_map])
    rows[present] = matrix[np.array(id_map)[present]]
    return rows


def never_generated(logits_bias, ids):
    """`logits_bias [V]` with `ids` (ours) at NEG_INF: tokens the checkpoint
    never generates (Marian's `<pad>`, and our padding row, which is only a
    copy), so that no decoder, ours or CTranslate2's, picks them."""
    logits_bias = np.array(logits_bias, np.float32)
    logits_bias[list(ids)] = NEG_INF
    return logits_bias


def pieces(id_to_piece, id_map):
    """Our vocabulary's tokens: the reserved names for ids 0-3, then each
    checkpoint id's piece."""
    return list(RESERVED) + [id_to_piece[i] for i in id_map[len(RESERVED) :]]
