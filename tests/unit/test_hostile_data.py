"""Hostile input to the recipes' data preparation: every row runs the real
``python -m deepnet_fairseq.recipes.data.corpus`` (clean.py, then real sentencepiece, then encoding)
on a small en-de corpus in which one thing is wrong, and checks either the one-line refusal or
that the cleaned pairs are still aligned, and what is (and is not) on disk afterwards.

Line ends and counts are those of ``wc -l`` (the shell's ``check_aligned``): lines end at \\n
only. Byte offsets in messages count from 0, line numbers from 1.
"""

import os
import re
import subprocess
from typing import Dict, NamedTuple, Optional, Sequence

import pytest

from deepnet_fairseq import spm
from deepnet_fairseq.recipes.data import clean, corpus


N = 40         # training pairs of the base corpus
VOCAB = 32     # the base corpus supports at most 36 pieces, its characters need 27
EN, DE = "train.en-de.en", "train.en-de.de"


def en(i: int) -> str:
    return f"the house number {i} is red"


def de(i: int) -> str:
    return f"das haus nummer {i} ist {'grün' if i % 4 == 3 else 'rot'}"


def text(lines: Sequence[str], encoding: str = "utf-8", end: str = "\n") -> bytes:
    return "".join(line + end for line in lines).encode(encoding)


EN_LINES = [en(i) for i in range(N)]
DE_LINES = [de(i) for i in range(N)]


def with_line(lines, index: int, line: str):
    return lines[:index] + [line] + lines[index + 1:]


def base_corpus() -> Dict[str, bytes]:
    files = {EN: text(EN_LINES), DE: text(DE_LINES)}
    for split, n in (("valid", 5), ("test", 5)):
        files[f"{split}.en-de.en"] = text([en(i) for i in range(n)])
        files[f"{split}.en-de.de"] = text([de(i) for i in range(n)])
    return files


PUBLISHED = ["clean", "raw", "spm", "spm.model", "spm.vocab"]
NOTHING = ["raw"]  # refused while cleaning: only the input is there


class Row(NamedTuple):
    name: str
    files: Dict[str, bytes]        # replaces these files of the base corpus
    error: Optional[str]           # a substring of the refusal, or None: accepted
    leaves: Sequence[str]          # exactly what DATA holds afterwards
    args: Sequence[str] = ()       # more options of corpus.py


ROWS = [
    Row("lone CR inside a line, source side",
        {EN: text(with_line(EN_LINES, 10, "the house \rnumber 10 is red"))},
        None, PUBLISHED),
    Row("lone CRs inside different lines of both sides",
        {EN: text(with_line(EN_LINES, 10, "the house \rnumber 10 is red")),
         DE: text(with_line(DE_LINES, 30, "das haus\r nummer 30 ist rot"))},
        None, PUBLISHED),
    Row("CRLF line ends, both sides",
        {EN: text(EN_LINES, end="\r\n"), DE: text(DE_LINES, end="\r\n")}, None, PUBLISHED),
    Row("CRLF line ends, target side only", {DE: text(DE_LINES, end="\r\n")}, None, PUBLISHED),
    Row("UTF-8 byte order mark", {DE: b"\xef\xbb\xbf" + text(DE_LINES)}, None, PUBLISHED),
    # line 4 holds the first non-ASCII character: 3 lines of 26 bytes, then "das haus
    # nummer 3 ist gr" (24 bytes) before the Latin-1 u-umlaut 0xfc
    Row("Latin-1 bytes refused",
        {DE: text(DE_LINES, "latin-1")},
        "train.en-de.de line 4, byte 102 (byte 24 of the line): not UTF-8 (0xfc); "
        "convert the file to UTF-8 or set ENCODING=latin-1", NOTHING),
    Row("Latin-1 read with --encoding latin-1",
        {DE: text(DE_LINES, "latin-1")}, None, PUBLISHED, args=("--encoding", "latin-1")),
    Row("encoding that is not ASCII-compatible",
        {}, "encoding utf-16 is not ASCII-compatible", NOTHING, args=("--encoding", "utf-16")),
    Row("unknown encoding", {}, "unknown encoding 'latin-9000'", NOTHING,
        args=("--encoding", "latin-9000")),
    Row("sides of different line counts",
        {DE: text(DE_LINES[:-1])},
        f"train.en-de.en has {N} lines but", NOTHING),
    Row("missing final newline on one side",
        {EN: text(EN_LINES)[:-1]}, None, PUBLISHED),
    # wc -l counts 40 on both sides, so the shell's check_aligned would pass this one
    Row("extra last line without a final newline",
        {EN: text(EN_LINES) + b"one more line"},
        f"train.en-de.en has {N + 1} lines (the last without a final newline: wc -l counts "
        f"{N}) but", NOTHING),
    Row("empty source file", {EN: b""}, "train.en-de.en has 0 lines but", NOTHING),
    Row("both sides empty", {EN: b"", DE: b""}, "train.en-de.de are empty", NOTHING),
    Row("corpus too small for the vocabulary", {},
        "vocabulary size 4000 is too large for the training text", ["clean", "raw"],
        args=("--vocab", "4000")),
    Row("vocabulary smaller than the corpus's characters", {},
        "its characters alone need 27; set the vocabulary to at least 27", ["clean", "raw"],
        args=("--vocab", "20")),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name.replace(" ", "-") for row in ROWS])
def test_hostile_input(row, tmp_path, capsys):
    data, files = tmp_path / "data", {**base_corpus(), **row.files}
    (data / "raw").mkdir(parents=True)
    for name, content in files.items():
        (data / "raw" / name).write_bytes(content)
    argv = ["--data", str(data), "--pairs", "en-de", "--vocab", str(VOCAB), *row.args]

    if row.error:
        with pytest.raises(SystemExit) as stopped:
            corpus.main(argv)
        assert stopped.value.code == 2
        message = capsys.readouterr().err.strip().splitlines()[-1]
        assert row.error in message
    else:
        corpus.main(argv)
        # every pair, aligned, as the base corpus has it: CRs, BOM gone, umlauts kept
        assert (data / "clean" / EN).read_bytes() == text(EN_LINES)
        assert (data / "clean" / DE).read_bytes() == text(DE_LINES)
    assert sorted(os.listdir(data)) == sorted(row.leaves)
    for name, content in files.items():
        assert (data / "raw" / name).read_bytes() == content, f"{name} changed"
    leftovers = [os.path.join(d, f) for d, dirs, names in os.walk(data) for f in dirs + names
                 if "tmp" in f]
    assert not leftovers


def test_the_largest_vocabulary_reported_is_exact(tmp_path):
    """The bound in the refusal is one a model can be trained with, and one more is refused."""
    path = tmp_path / "train.txt"
    path.write_bytes(text(EN_LINES + DE_LINES))
    prefix = str(tmp_path / "spm")
    with pytest.raises(spm.TrainingError, match=r"at most \d+;") as refused:
        spm.train([str(path)], prefix, 4000)
    assert os.listdir(tmp_path) == ["train.txt"]  # no model, vocabulary or temporary
    most = int(re.search(r"at most (\d+);", str(refused.value)).group(1))
    with pytest.raises(spm.TrainingError, match=f"at most {most};"):
        spm.train([str(path)], prefix, most + 1)
    spm.train([str(path)], prefix, most)
    assert sorted(os.listdir(tmp_path)) == ["spm.model", "spm.vocab", "train.txt"]


def test_clean_cli_writes_nothing_on_refusal_and_reads_latin1_when_told(tmp_path, capsys):
    (tmp_path / "train.en").write_bytes(text(EN_LINES))
    (tmp_path / "train.de").write_bytes(text(DE_LINES, "latin-1"))
    out = tmp_path / "clean"
    out.mkdir()
    argv = ["--src", str(tmp_path / "train.en"), "--tgt", str(tmp_path / "train.de"),
            "--src-lang", "en", "--tgt-lang", "de", "--out-prefix", str(out / "train")]
    with pytest.raises(SystemExit):
        clean.main(argv)
    assert "line 4, byte 102 (byte 24 of the line): not UTF-8" in capsys.readouterr().err
    assert os.listdir(out) == []  # neither output nor temporary
    clean.main(argv + ["--encoding", "latin-1"])
    assert (out / "train.de").read_text(encoding="utf-8").split("\n")[3] == de(3)


@pytest.mark.parametrize("content", [b"", b"a\n", b"a", b"a\nb", b"a\r\nb\r\n", b"a\rb\n"],
                         ids=repr)
def test_line_count_is_wc_l_plus_an_unterminated_last_line(content, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(content)
    lines, terminated = clean.count_lines(str(path))
    with open(path, "rb") as stdin:
        wc = int(subprocess.run(["wc", "-l"], stdin=stdin, capture_output=True,
                                check=True).stdout)
    assert lines == wc + (not terminated)
    assert lines == len(list(clean.read_lines(str(path))))


@pytest.mark.parametrize("content", [b"plain text, not gzip\n", "truncated", "corrupt"])
def test_a_bad_gz_file_is_one_prepare_error_naming_it(tmp_path, content):
    """A truncated .gz, a file named .gz that is not gzip, and one whose data is corrupt: one
    PrepareError naming the file (no traceback from gzip or zlib)."""
    import gzip

    from deepnet_fairseq.recipes.base import rawtext

    whole = gzip.compress(b"ein Satz\n" * 2000)
    path = tmp_path / "train.de.gz"
    path.write_bytes({"truncated": whole[:len(whole) // 2],
                      "corrupt": whole[:20] + bytes(64) + whole[84:]}.get(content, content))
    with pytest.raises(rawtext.PrepareError, match=f"{path} is not a complete gzip file"):
        list(rawtext.read_lines(str(path)))
