"""Reading a user's own text files: what is read, and what is refused with
the file and line named."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_attention.data.text_files import DataFileError, hold_out, read_columns, read_lines


def write(tmp_path, data, name="pairs.tsv"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_pairs_with_bom_crlf_and_an_attribution_column(tmp_path):
    data = (
        b"\xef\xbb\xbfGo.\tVe.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272\r\n"
        b"Hi.\tHola.\r\n"
        b"\r\n"
    ) + "Run!\t¡Corre!\n".encode()
    pairs, skipped = read_columns(write(tmp_path, data))
    assert pairs == [("Go.", "Ve."), ("Hi.", "Hola."), ("Run!", "¡Corre!")]
    assert skipped == 0


def test_lines_leave_out_empty_ones(tmp_path):
    path = write(tmp_path, b"\xef\xbb\xbfone text\r\n\r\ntwo texts\n", "corpus.txt")
    assert read_lines(path) == ["one text", "two texts"]


@pytest.mark.parametrize(
    "data,message",
    [
        (b"", "is empty"),
        (b"\xef\xbb\xbf\n\n", "is empty"),
        (b"Go.\tVe.\nHi. Hola.\n", "line 2 has no tab"),
        (b"Go.\tVe.\n\tHola.\n", "line 2 has an empty column"),
        (b"Go.\tVe.\nCaf\xe9\tCaf\xc3\xa9\n", "line 2 is not UTF-8 (byte 0xe9 at column 4)"),
    ],
)
def test_bad_files_name_the_file_and_line(tmp_path, data, message):
    path = write(tmp_path, data)
    with pytest.raises(DataFileError, match=re.escape(message)) as error:
        read_columns(path)
    assert str(path) in str(error.value)


def test_a_missing_file_or_a_folder_is_named(tmp_path):
    with pytest.raises(DataFileError, match="no such file"):
        read_columns(tmp_path / "missing.tsv")
    with pytest.raises(DataFileError, match="is a folder"):
        read_lines(tmp_path)


def test_bad_lines_can_be_skipped_and_counted(tmp_path):
    path = write(tmp_path, b"Go.\tVe.\nno tab here\nHi.\tHola.\n\tno source\n")
    pairs, skipped = read_columns(path, skip_bad_lines=True)
    assert pairs == [("Go.", "Ve."), ("Hi.", "Hola.")] and skipped == 2
    with pytest.raises(DataFileError, match="no usable line"):
        read_columns(write(tmp_path, b"no tab\n"), skip_bad_lines=True)


@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=60))
def test_hold_out_keeps_every_pair_once_and_each_source_in_one_split(sources):
    pairs = [(source, f"target {i}") for i, source in enumerate(sources)]
    splits = hold_out(pairs, 0.2)
    assert sorted(p for split in splits for p in split) == sorted(pairs)
    owners = {}
    for index, split in enumerate(splits):
        for source, _ in split:
            assert owners.setdefault(source, index) == index
    # The order of the file does not matter.
    assert [sorted(s) for s in hold_out(pairs[::-1], 0.2)] == [sorted(s) for s in splits]


def test_hold_out_shares_are_close_to_asked():
    pairs = [(f"source {i}", "t") for i in range(20000)]
    train, validation, test = hold_out(pairs, 0.05)
    assert 900 < len(validation) < 1100 and 900 < len(test) < 1100
    assert len(train) == 20000 - len(validation) - len(test)
    with pytest.raises(ValueError, match="share"):
        hold_out(pairs, 0.5)


def test_hold_out_of_plain_texts_hashes_the_whole_text():
    texts = [f"text {i}" for i in range(2000)]
    splits = hold_out(texts, 0.1)
    assert sorted(t for split in splits for t in split) == sorted(texts)
    # Not by its first character (which every text here shares).
    assert all(len(split) > 100 for split in splits)


def test_a_label_the_training_file_does_not_have_names_the_line(tmp_path):
    path = write(tmp_path, b"good film\tpositive\nbad film\tnegativ\n")
    with pytest.raises(DataFileError, match=r"line 2 has the label 'negativ'.*negative, positive"):
        read_columns(path, labels={"positive", "negative"})
    pairs, _ = read_columns(path, labels={"positive", "negativ"})
    assert pairs[1] == ("bad film", "negativ")
