"""`python -m keras_attention.translate RUN_OR_EXPORT [INPUT] [-o OUTPUT]`:
translates a file (or stdin), one text a line, with a translator's export.

    python -m keras_attention.translate runs/translate input.txt -o output.txt --beam-size 4

RUN_OR_EXPORT is a run folder (its latest export), a TF Serving model folder
(its highest version) or an export version folder; the export's
`translate_batch` signature does the work (`keras_attention.Translator`).
An empty line gets an empty line. A line that is not UTF-8 is an error
naming it; lines longer than the model reads (the export's `max_input_length`
tokens) are counted in a warning. The output file is written whole or
not at all. With
`--num-hypotheses N` above 1, each text gets N lines `ID ||| TEXT |||
SCORE` (ID counting lines from 0, as OpenNMT's n-best lists).
"""

import argparse
import sys
from pathlib import Path

from keras_attention.files import write_atomically

# The truncated lines a warning names before it counts the rest.
TRUNCATED_LINES_SHOWN = 10


def flag_options():
    """The options with a flag (`option_table`), in their order."""
    from keras_attention.decoding import option_table

    return option_table.flag_options()


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_attention.translate",
        description="Translate a file, one text a line, with a translator's export.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("model", help="a run folder, a TF Serving model folder or an export")
    # (ArgumentDefaultsHelpFormatter adds each default, unless the help
    # names it: "%(default).0s" names it in no characters, where the help
    # says what None means.)
    parser.add_argument("input", nargs="?", help="the texts, one a line; none: stdin%(default).0s")
    parser.add_argument("-o", "--output", help="where to write; none: stdout%(default).0s")
    parser.add_argument("--target-prefix-file", help="a target prefix for each line")
    # CTranslate2's `translate_batch` options, with its defaults (`option_table`).
    for option in flag_options():
        flag, help = "--" + option.name.replace("_", "-"), option.flag[1]
        if option.dtype == "bool":
            parser.add_argument(flag, action="store_true", help=help)
        else:
            parser.add_argument(flag, type=option.python_type, default=option.default, help=help)
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=32,
        help="the most texts (or tokens, with --batch-type tokens) per call of the model",
    )
    parser.add_argument(
        "--batch-type",
        choices=["examples", "tokens"],
        default="examples",
        help="what --max-batch-size counts",
    )
    return parser.parse_args(argv)


def n_best_lines(index, result):
    return [
        f"{index} ||| {hypothesis} ||| {score:.4f}"
        for hypothesis, score in zip(result.hypotheses, result.scores, strict=True)
    ]


def main(argv=None):
    from keras_attention.translator import Translator, decode_lines, read_lines

    args = parse_arguments(argv)
    try:
        texts = read_lines(args.input) if args.input else decode_lines(sys.stdin.buffer, "stdin")
        prefixes = read_lines(args.target_prefix_file) if args.target_prefix_file else None
        if prefixes is not None and len(prefixes) != len(texts):
            raise ValueError(
                f"{args.target_prefix_file} has {len(prefixes)} lines and the input "
                f"{len(texts)}: a target prefix is needed for each line"
            )
        translator = Translator(args.model)
        truncated = translator.truncated(texts)
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: {error}") from None
    if truncated:
        limit = translator.max_input_length
        shown = ", ".join(str(index + 1) for index in truncated[:TRUNCATED_LINES_SHOWN])
        more = len(truncated) - TRUNCATED_LINES_SHOWN
        lines = f"line{'s' if len(truncated) > 1 else ''} {shown}" + (
            f" and {more:,} more" if more > 0 else ""
        )
        print(
            f"WARNING: {len(truncated):,} of {len(texts):,} lines have more than {limit} tokens "
            f"({lines}): the model reads the first {limit} of each (the export's max_input_length)",
            file=sys.stderr,
        )
    import tensorflow as tf
    from tqdm import tqdm

    names = [option.name for option in flag_options()]
    options = {name: getattr(args, name) for name in (*names, "batch_type")}
    nbest = args.num_hypotheses > 1
    results = translator.translate_iterable(
        texts, prefixes, args.max_batch_size, return_scores=nbest, **options
    )
    lines = []
    progress = tqdm(total=len(texts), unit=" sentences", file=sys.stderr, disable=None)
    try:
        for index, result in enumerate(results):
            lines.extend(n_best_lines(index, result) if nbest else result.hypotheses[:1])
            progress.update()
    except (TypeError, ValueError, tf.errors.InvalidArgumentError) as error:
        # Options out of range, refused here or by the export: say which.
        message = getattr(error, "message", None) or str(error)
        raise SystemExit(f"error: {message}") from None
    finally:
        progress.close()
    output = "".join(line + "\n" for line in lines)
    if args.output:
        write_atomically(Path(args.output), output)
    else:
        sys.stdout.write(output)


if __name__ == "__main__":
    main()
