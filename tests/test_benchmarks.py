"""The benchmarks still run (smoke mode: seconds). Nothing about speed is asserted."""

import json
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]


def test_decoding_benchmark_runs(tmp_path):
    output = tmp_path / "decoding.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.decoding", "--smoke", "--json", str(output)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(output.read_text())
    assert [row["output_tokens"] for row in rows] == [4, 8]
    assert all(row["cached_s"] > 0 and row["uncached_s"] > 0 for row in rows)
    assert "uncached/cached" in result.stdout
