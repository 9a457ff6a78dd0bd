"""What the recipe tests share: tiny runs' flags and free ports for clusters."""

import socket


def tiny_flags(data_dir, output_dir, *extra, test_examples=24):
    """A recipe run small enough for a test: 256 training examples, one
    epoch of batches of 32 (flags given in `extra` come later and win).
    `data_dir` None leaves the TFDS data folder to TFDS (TFDS_DATA_DIR)."""
    return [
        *(["--data-dir", str(data_dir)] if data_dir is not None else []),
        "--output-dir",
        str(output_dir),
        "--train-examples",
        "256",
        "--test-examples",
        str(test_examples),
        "--epochs",
        "1",
        "--batch-size",
        "32",
        *extra,
    ]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports
