"""Cached against uncached greedy decoding, as the output grows.

    python -m benchmarks.decoding            # 32, 64, 128, 256 output tokens
    python -m benchmarks.decoding --smoke    # a few seconds: checks it runs

With the KV cache each step runs the decoder on one new token; without it,
each step reruns the decoder over the whole buffer, so the total work grows
with the square of the length. Both run as compiled graphs (`tf.function`)
and decode to the full length (the end token is disabled). The table shows
the median time of each, their ratio, and how each grows when the length
doubles (about 2x for linear cost, 4x for quadratic).
"""

import argparse
import json

import numpy as np
import tensorflow as tf

from benchmarks.measure import median_seconds
from keras_attention import decoding
from keras_attention.models import build_transformer


def run(lengths, batch_size, repeats, preset):
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


def print_table(rows):
    print(
        f"{'tokens':>6} {'cached s':>10} {'uncached s':>11} {'uncached/cached':>16} "
        f"{'cached growth':>14} {'uncached growth':>16}"
    )
    for row in rows:
        growth = (
            f"{row['cached_growth']:>13.2f}x {row['uncached_growth']:>15.2f}x"
            if "cached_growth" in row
            else f"{'':>14} {'':>16}"
        )
        print(
            f"{row['output_tokens']:>6} {row['cached_s']:>10.3f} {row['uncached_s']:>11.3f} "
            f"{row['uncached_over_cached']:>15.2f}x {growth}"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if args.smoke:
        rows = run([4, 8], batch_size=2, repeats=1, preset="tiny")
    else:
        rows = run([32, 64, 128, 256], args.batch_size, args.repeats, args.preset)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
