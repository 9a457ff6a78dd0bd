"""What a recipe chooses when a flag is left unset: here, the line that
says why it trains in float32 (`benchmarks/bfloat16.py` measured why), and
whether two languages share a vocabulary."""

from keras_attention.recipes.choices import (
    bfloat16_flags,
    precision_note,
    share_vocabulary_for,
    writing_script,
)


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


def test_the_script_most_letters_are_written_in():
    assert writing_script(["Open the file", "Ouvrir le fichier é"]) == "LATIN"
    assert writing_script(["Открыть файл", "a"]) == "CYRILLIC"
    assert writing_script(["打开文件"]) == "CJK"
    assert writing_script(["ファイルを開く"]) == "KATAKANA"  # 4 of its 7 letters (を, く: HIRAGANA)
    assert writing_script(["2026-11-29", "%d"]) == "LATIN"  # the d of %d
    assert writing_script(["2026-11-29", "-"]) is None


def test_two_languages_share_a_vocabulary_when_written_in_one_script():
    english, french = ["Open %s", "Close the file"], ["Ouvrir %s", "Fermer le fichier"]
    assert share_vocabulary_for(english, french)
    assert not share_vocabulary_for(english, ["Открыть %s", "Закрыть файл"])
    assert not share_vocabulary_for(["29 November 2026"], ["2026-11-29"])  # no letter
