"""Cached against uncached greedy decoding, as the output grows.

    python -m benchmarks decoding            # 32, 64, 128, 256 output tokens
    python -m benchmarks decoding --smoke    # a few seconds: checks it runs

With the KV cache each step runs the decoder on one new token; without it,
each step reruns the decoder over the whole buffer, so the total work grows
with the square of the length. Both run as compiled graphs (`tf.function`)
and decode to the full length (the end token is disabled). The table shows
the median time of each, their ratio, and how each grows when the length
doubles (about 2x for linear cost, 4x for quadratic).
"""

import numpy as np
import tensorflow as tf

from benchmarks.measure import median_seconds
from keras_attention import decoding
from keras_attention.models import build_transformer

REPEATS = 5
LENGTHS, BATCH_SIZE = (32, 64, 128, 256), 8
SMOKE_LENGTHS, SMOKE_BATCH_SIZE = (4, 8), 2
PRESET = "tiny"


def run(smoke, repeats):
    lengths, batch_size = (SMOKE_LENGTHS, SMOKE_BATCH_SIZE) if smoke else (LENGTHS, BATCH_SIZE)
    return {"rows": race(lengths, batch_size, repeats)}


def race(lengths, batch_size, repeats, preset=PRESET):
    model = build_transformer(1000, preset=preset)
    source = np.random.default_rng(0).integers(3, 1000, size=(batch_size, 32)).astype("int32")
    rows = []
    for length in lengths:
        timings = {}
        for use_cache in (True, False):
            greedy = tf.function(
                lambda x, use_cache=use_cache, length=length: decoding.greedy_search(
                    model, x, length, end_id=-1, use_cache=use_cache
                )
            )
            timings[use_cache] = median_seconds(
                lambda greedy=greedy: greedy(source).numpy(), repeats, warmup=1
            )
        rows.append(
            {
                "output_tokens": length,
                "cached_s": timings[True],
                "uncached_s": timings[False],
                "uncached_over_cached": timings[False] / timings[True],
            }
        )
    for previous, row in zip(rows, rows[1:], strict=False):
        row["cached_growth"] = row["cached_s"] / previous["cached_s"]
        row["uncached_growth"] = row["uncached_s"] / previous["uncached_s"]
    return rows


COLUMNS = [
    ("output_tokens", "tokens", "d"),
    ("cached_s", "cached s", ".3f"),
    ("uncached_s", "uncached s", ".3f"),
    ("uncached_over_cached", "uncached/cached", ".2f"),
    ("cached_growth", "cached growth", ".2f"),
    ("uncached_growth", "uncached growth", ".2f"),
]
TABLES = [("greedy decoding, cached against uncached", "rows", COLUMNS)]


if __name__ == "__main__":
    from benchmarks import section

    section.main("decoding")
