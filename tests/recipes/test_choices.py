"""What a recipe chooses when a flag is left unset: here, the line that
says why it trains in float32 (`benchmarks/bfloat16.py` measured why)."""

from keras_attention.recipes.choices import bfloat16_flags, precision_note


def test_the_cpu_s_bfloat16_instructions_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: Xeon\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert bfloat16_flags(cpuinfo) == ["amx_bf16", "avx512_bf16"]
    cpuinfo.write_text("model name\t: EPYC\nflags\t\t: fpu avx2 avx512f\n")
    assert bfloat16_flags(cpuinfo) == []
    assert bfloat16_flags(tmp_path / "missing") == []


def test_one_line_says_why_float32_is_kept():
    with_amx = precision_note("float32", ["amx_bf16", "avx512_bf16"])
    assert with_amx.startswith("precision float32: this CPU has amx_bf16, avx512_bf16, but ")
    assert "--precision mixed_bfloat16" in with_amx and "\n" not in with_amx
    without = precision_note("float32", [])
    assert "no bfloat16 instructions" in without and "\n" not in without
    assert precision_note("mixed_bfloat16", ["amx_bf16"]) is None
    assert precision_note("mixed_float16", []) is None
