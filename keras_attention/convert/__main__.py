"""Converts a Hugging Face checkpoint folder into a run folder and exports it.

    python -m keras_attention.convert opus-mt-en-fr --output-dir runs/opus-mt-en-fr
    python -m keras_attention.convert Llama-2-7b-hf --output-dir runs/llama --no-export

The folder is what `huggingface-cli download` or `save_pretrained` writes:
config.json, model.safetensors (or its shards), the tokenizer files and
generation_config.json. Nothing is downloaded.
"""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_attention.convert", description=__doc__.splitlines()[0]
    )
    parser.add_argument("checkpoint", help="a local Hugging Face checkpoint folder")
    parser.add_argument("--output-dir", required=True, help="the run folder to write")
    parser.add_argument(
        "--no-export", action="store_true", help="write the run only, not its TF Serving export"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace --output-dir if it exists"
    )
    parser.add_argument(
        "--task",
        choices=("classification", "embedding"),
        help="what a BERT folder becomes: a classifier (the default for a plain BERT folder; "
        "a BertModel gets a new head to fine-tune) or a sentence embedder (the default for a "
        "sentence-transformers folder; a plain BERT folder gets mean pooling)",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    from keras_attention.convert import CheckpointError, convert

    try:
        written = convert(
            args.checkpoint,
            args.output_dir,
            export=not args.no_export,
            overwrite=args.overwrite,
            task=args.task,
        )
    except (CheckpointError, FileExistsError) as error:
        raise SystemExit(f"error: {error}") from None
    print(f"converted {args.checkpoint} to {written}")
    return written


if __name__ == "__main__":
    main()
