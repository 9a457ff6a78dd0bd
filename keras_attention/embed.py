"""`python -m keras_attention.embed RUN_OR_EXPORT [INPUT] -o OUTPUT.npy`:
embeds a file (or stdin), one text a line, with an embedder's export.

    python -m keras_attention.embed runs/minilm queries.txt -o queries.npy --prompt-name query

RUN_OR_EXPORT is a run folder (its latest export), a TF Serving model folder
(its highest version) or an export version folder; its `embed` signatures do
the work (`keras_attention.Encoder`). The output is a float32 `.npy` array
`[lines, D]`, row i the vector of line i, written whole or not at all. A
line that is not UTF-8 is an error naming it.
"""

import argparse
import io
import sys

import numpy as np

from keras_attention.files import write_atomically


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_attention.embed",
        description="Embed a file, one text a line, with an embedder's export.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("model", help="a run folder, a TF Serving model folder or an export")
    parser.add_argument("input", nargs="?", help="the texts, one a line (default: stdin)")
    parser.add_argument("-o", "--output", required=True, help="the .npy file to write")
    parser.add_argument("--prompt-name", help="one of the export's prompts, put before each text")
    parser.add_argument("--prompt", help="a text put before each text (instead of a named one)")
    parser.add_argument("--batch-size", type=int, default=32, help="texts per call")
    parser.add_argument("--normalize", action="store_true", help="scale each vector to unit length")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    return parser.parse_args(sys.argv[1:] if argv is None else argv)


def main(argv=None):
    args = parse_arguments(argv)
    from keras_attention.encoder import Encoder
    from keras_attention.translator import decode_lines, read_lines

    if args.input is None:
        texts = decode_lines(sys.stdin.buffer, "stdin")
    else:
        texts = read_lines(args.input)
    encoder = Encoder(args.model)
    vectors = encoder.encode(
        texts,
        prompt_name=args.prompt_name,
        prompt=args.prompt,
        batch_size=args.batch_size,
        show_progress_bar=not args.quiet,
        normalize_embeddings=args.normalize,
    )
    buffer = io.BytesIO()
    np.save(buffer, vectors.astype("float32"))
    write_atomically(args.output, buffer.getvalue())
    print(f"embedded {len(texts)} texts to {args.output} {vectors.shape}", file=sys.stderr)
    return vectors


if __name__ == "__main__":
    main()
