"""Silent choices on input (issue 43): the user's text files, each resolved once by the one
lookup every dataset's local text goes through (``rawtext.find_local``, ``local_files``,
``copy_local``), so that no input is taken in place of another without a word:

- a name with and without ``.gz`` (``train.en`` and ``train.en.gz``): refused, naming both;
- one file in two places (the same inode as train and test, or as source and target; through
  a hard link, a symbolic link or the same name twice): refused, naming both roles;
- an empty side, or sides of different line counts: refused naming the user's files, not the
  temporary copies prepare makes of them (gone when the message is read);
- a FIFO as text: refused at once, not a prepare that blocks.

The cases are generated from the roles (split x language) of the declarations' text, for a
dataset of one pair (``parallel``; wmt17 and iwslt14 read SOURCE=local through the same
function) and for the multilingual one (``opus100``), and run the real prepare step."""

import itertools
import os
import re

import pytest

from deepnet_fairseq.recipes.base import rawtext
from deepnet_fairseq.recipes.data import prepare
from deepnet_fairseq.recipes.base.rawtext import PrepareError
from deepnet_fairseq.recipes.spec import settings
from support import REPO, settings_read

SPLITS = rawtext.SPLITS
LANGS = ("de", "en")
ROLES = [(split, lang) for split in SPLITS for lang in LANGS]
LINES = {"train": 20, "valid": 4, "test": 4}


def _write_corpus(directory, langs=LANGS, pair=None):
    directory.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        for lang in langs:
            (directory / f"{split}.{lang}").write_text(
                "".join(f"{split} {lang} {pair or ''} {i}\n" for i in range(LINES[split])))
    return directory


def _cfg(tmp_path, dataset="parallel", **env):
    base = {"DEEPNET_WORK": str(tmp_path / "work"), "DEVICE": "cpu", "SIZE": "smoke"}
    if dataset == "parallel":
        base.update(SRC="de", TGT="en", **{f"{split.upper()}_TEXT": str(tmp_path / "in" / split)
                                           for split in SPLITS})
    return settings.resolve(dataset, {**base, **env}, REPO, lambda: 0)


def _refused_before_anything(cfg, tmp_path, message):
    """prepare refuses with MESSAGE (a regular expression) and creates nothing."""
    with pytest.raises(PrepareError, match=message) as refused:
        prepare.prepare(cfg)
    assert not (tmp_path / "work").exists(), "prepare wrote before refusing its input"
    return str(refused.value)


LINKS = ("hard link", "symbolic link")
COLLISIONS = [(a, b, link) for a, b in itertools.combinations(ROLES, 2) for link in LINKS]


@pytest.mark.parametrize("first,second,link", COLLISIONS,
                         ids=[f"{a[0]}.{a[1]}={b[0]}.{b[1]}-{k.split()[0]}"
                              for a, b, k in COLLISIONS])
def test_one_file_in_two_roles_is_refused(tmp_path, first, second, link):
    """The same file (by device and inode) as two splits, or as both languages of a split: the
    model would be scored on its training text, or trained to copy. Every pair of roles,
    through a hard and a symbolic link."""
    corpus = _write_corpus(tmp_path / "in")
    target, alias = (corpus / f"{first[0]}.{first[1]}", corpus / f"{second[0]}.{second[1]}")
    alias.unlink()
    (os.link if link == "hard link" else os.symlink)(target, alias)
    message = _refused_before_anything(
        _cfg(tmp_path), tmp_path,
        f"{re.escape(str(alias))} is the same file as {re.escape(str(target))}, read as both "
        f"the {first[0]} text of {first[1]} \\(de-en\\) and the {second[0]} text of "
        f"{second[1]}")
    assert "give each split and language its own file" in message


@pytest.mark.parametrize("split", SPLITS)
def test_the_same_prefix_for_two_splits_is_refused(tmp_path, split):
    """VALID_TEXT=TEST_TEXT=TRAIN_TEXT: the same names twice are one file twice."""
    _write_corpus(tmp_path / "in")
    others = {f"{other.upper()}_TEXT": str(tmp_path / "in" / split) for other in SPLITS}
    _refused_before_anything(_cfg(tmp_path, **others), tmp_path,
                             f"{re.escape(str(tmp_path / 'in' / split))}\\.de is the same file, "
                             "read as both")


@pytest.mark.parametrize("split,lang", ROLES, ids=[f"{s}.{l}" for s, l in ROLES])
@pytest.mark.parametrize("compressed_too", ["plain and .gz", "link and .gz"])
def test_a_name_with_and_without_gz_is_refused(tmp_path, split, lang, compressed_too):
    """train.en and train.en.gz: one was read, the other silently left. Refused, naming both,
    for every split and language."""
    import gzip

    corpus = _write_corpus(tmp_path / "in")
    plain = corpus / f"{split}.{lang}"
    (corpus / f"{split}.{lang}.gz").write_bytes(gzip.compress(plain.read_bytes()))
    if compressed_too == "link and .gz":
        (corpus / "elsewhere").write_bytes(plain.read_bytes())
        plain.unlink()
        plain.symlink_to(corpus / "elsewhere")
    _refused_before_anything(_cfg(tmp_path), tmp_path,
                             f"both {re.escape(str(plain))} and {re.escape(str(plain))}\\.gz "
                             "exist")


SHAPES = [("empty", "de"), ("empty", "en"), ("one line short", "en"),
          ("one line longer", "de")]


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("shape,lang", SHAPES, ids=[f"{s}-{l}" for s, l in SHAPES])
def test_an_empty_or_misaligned_split_names_the_users_files(tmp_path, split, shape, lang):
    """The parallel dataset's line-count and empty-file errors named prepare's temporary
    copies (data/raw.tmp/...), gone by the time the user read them: each names the user's
    own file, and no raw text is published."""
    corpus = _write_corpus(tmp_path / "in")
    path = corpus / f"{split}.{lang}"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text({"empty": "", "one line short": "".join(lines[:-1]),
                     "one line longer": "".join(lines) + "extra\n"}[shape])
    cfg = _cfg(tmp_path)
    with pytest.raises(PrepareError) as refused:
        prepare.prepare(cfg)
    message = str(refused.value)
    assert str(path) in message, message
    assert ".tmp" not in message and "/work/" not in message, message
    if shape == "empty":
        assert f"{path} is empty" in message
    else:
        assert "differ in length" in message and str(corpus / f"{split}.de") in message
    assert not (tmp_path / "work" / "data" / "raw").exists()


@pytest.mark.parametrize("split,lang", ROLES, ids=[f"{s}.{l}" for s, l in ROLES])
def test_a_fifo_as_text_is_refused_without_blocking(tmp_path, split, lang):
    corpus = _write_corpus(tmp_path / "in")
    (corpus / f"{split}.{lang}").unlink()
    os.mkfifo(corpus / f"{split}.{lang}")
    with pytest.raises(PrepareError, match=f"{split}.{lang} is a FIFO, not a regular file"):
        prepare.prepare(_cfg(tmp_path))


# ---- the multilingual dataset's local text: one directory per pair -------------------------

def _opus_cfg(tmp_path):
    root = tmp_path / "in"
    for x in ("de", "fr"):
        _write_corpus(root / f"{x}-en", (x, "en"), pair=x)
    return _cfg(tmp_path, "opus100", SOURCE="local", LOCAL_DIR=str(root), LANGS="de fr"), root


def test_opus100_local_text_is_read_through_the_same_rule(tmp_path):
    """OPUS-100's local text (LOCAL_DIR/X-en/SPLIT.LANG): a file shared by two pairs in two
    roles, both names of one file, and a short side are each refused naming the user's files;
    one file in one role for two pairs (a multi-way corpus's English side) is no collision."""
    import gzip

    cfg, root = _opus_cfg(tmp_path)
    (root / "fr-en" / "valid.en").unlink()
    os.link(root / "de-en" / "train.en", root / "fr-en" / "valid.en")
    with pytest.raises(PrepareError, match="is the same file as .*de-en/train.en, read as both "
                                           "the train text of en \\(de-en\\) and the valid"):
        prepare.prepare(cfg)
    cfg, root = _opus_cfg(tmp_path / "1")
    (root / "fr-en" / "train.en").unlink()
    os.link(root / "de-en" / "train.en", root / "fr-en" / "train.en")
    with pytest.raises(PrepareError, match="vocabulary size"):  # past the rule, to sentencepiece
        prepare.prepare(cfg)
    cfg, root = _opus_cfg(tmp_path / "2")
    (root / "fr-en" / "test.fr.gz").write_bytes(gzip.compress(b"x\n"))
    with pytest.raises(PrepareError, match="both .*fr-en/test.fr and .*test.fr.gz exist"):
        prepare.prepare(cfg)
    cfg, root = _opus_cfg(tmp_path / "3")
    (root / "fr-en" / "valid.en").write_text("one line\n")
    with pytest.raises(PrepareError, match=f"{root / 'fr-en' / 'valid.fr'} and "
                                           f"{root / 'fr-en' / 'valid.en'} differ in length"):
        prepare.prepare(cfg)


def test_distinct_aligned_text_is_prepared_as_before(tmp_path):
    """The rule refuses collisions only: distinct files, plain and gzipped, are copied as they
    are (TRAIN_LINES keeps the first lines of both sides)."""
    import gzip

    corpus = _write_corpus(tmp_path / "in")
    (corpus / "test.en.gz").write_bytes(gzip.compress((corpus / "test.en").read_bytes()))
    (corpus / "test.en").unlink()
    out = tmp_path / "out"
    out.mkdir()
    cfg = _cfg(tmp_path, TRAIN_LINES="7")
    assert prepare.raw_text(cfg, str(out), print) == ["de-en"]
    assert (out / "train.de-en.de").read_text() == "".join(
        f"train de  {i}\n" for i in range(7))
    assert (out / "test.de-en.en").read_text().splitlines()[-1] == "test en  3"


# ---- settings a config file gives that its dataset does not read ---------------------------

from deepnet_fairseq.recipes.datasets import DATASETS  # noqa: E402
from deepnet_fairseq.recipes.spec.settings import READ_WHEN, SETTINGS, SettingError  # noqa: E402

CONDITIONAL = sorted(name for name, s in SETTINGS.items() if s.read_when)
# a value each conditional setting accepts, so that only whether it is read decides
VALUES = {"LANGS": "de fr", "TEMPERATURE": "2", "OPUS_URL": "http://x/o.tgz",
          "IWSLT_URL": "http://x/i.tgz"}
READ_CASES = [(dataset, source, name) for dataset in sorted(DATASETS)
              for source in DATASETS[dataset].sources for name in CONDITIONAL]


@pytest.mark.parametrize("dataset,source,name", READ_CASES,
                         ids=[f"{d}-{s}-{n}" for d, s, n in READ_CASES])
def test_a_config_file_sets_only_what_its_dataset_reads(tmp_path, dataset, source, name):
    """LANGS in a wmt17 file, TRAIN_TEXT with SOURCE=download, LOCAL_DIR beside the shipped
    corpus: each was dropped without a word. Generated from the declarations (every dataset,
    every SOURCE it reads, every setting declared with read_when): refused naming the file
    (or the sweep's RUNS entry, for a setting a run may set) exactly where its condition does
    not hold; where it holds, accepted; the same value from
    the environment is a note, not a refusal."""
    value = VALUES.get(name, str(tmp_path / "text"))
    env = {"DEEPNET_WORK": str(tmp_path / "work"), "DEVICE": "cpu"}
    given = {"SOURCE": (source, "config exp.toml"), name: (value, "config exp.toml")}
    cfg = settings.resolve(dataset, {**env, "SOURCE": source}, REPO, lambda: 0)
    read, why = READ_WHEN[SETTINGS[name].read_when]
    if read(cfg, name):
        settings.resolve(dataset, env, REPO, lambda: 0, given=given)
        return
    with pytest.raises(SettingError, match=f"{name}={re.escape(value)} \\(from config "
                                           f"exp.toml\\) is not read by dataset {dataset} "
                                           f"with SOURCE={source}: {re.escape(why)}"):
        settings.resolve(dataset, env, REPO, lambda: 0, given=given)
    if SETTINGS[name].scope == "run":  # a sweep's RUNS entry may set it: the same rule
        entry = "sweep RUNS entry deepnet:6:6:" + f"{name}={value}"
        with pytest.raises(SettingError, match=f"{name}={re.escape(value)} \\(from "
                                               f"{re.escape(entry)}\\) is not read"):
            settings.resolve(dataset, {**env, "SOURCE": source}, REPO, lambda: 0,
                             run={name: (value, entry)})
    noted = settings.resolve(dataset, {**env, "SOURCE": source, name: value}, REPO, lambda: 0)
    assert any(note.startswith(f"{name} (environment {name}) is not read") for note in
               noted.notes), noted.notes


def test_each_dataset_declares_the_settings_only_it_reads():
    """The settings read by one dataset alone (its archive's address) are the ones its module
    names: found in the declarations' sources, so that a new one cannot go undeclared."""
    import ast
    import inspect

    own = {n for n, s in SETTINGS.items() if s.read_when == "its dataset's download"}
    for dataset in DATASETS.values():
        module = __import__(f"deepnet_fairseq.recipes.datasets.{dataset.name}",
                            fromlist=["x"])
        named = own & settings_read(ast.parse(inspect.getsource(module)))
        assert named == set(dataset.settings), (dataset.name, named, dataset.settings)


# ---- limits only sentencepiece or fairseq knew ------------------------------------------

def test_the_sentencepiece_sample_bound_is_sentencepieces_own(tmp_path):
    """SPM_SENTENCES=1 ended in sentencepiece's internal check, after the raw text and the
    cleaning: the declared bound (settings.RANGES, whose edges test_settings_properties
    generates) is exactly where real sentencepiece starts to train."""
    from deepnet_fairseq import spm

    lowest = settings.RANGES["SPM_SENTENCES"][0]
    text = tmp_path / "t.txt"
    text.write_text("".join(f"the house number {i} is red\n" for i in range(200)))
    with pytest.raises(spm.TrainingError, match="input_sentence_size"):
        spm.train([str(text)], str(tmp_path / "below"), 24, max_sentences=lowest - 1)
    spm.train([str(text)], str(tmp_path / "at"), 24, max_sentences=lowest)
    with pytest.raises(SettingError, match=f"SPM_SENTENCES={lowest - 1} .*must be >= {lowest}"):
        settings.resolve("wmt17", {"DEVICE": "cpu", "SPM_SENTENCES": str(lowest - 1),
                                   "DEEPNET_WORK": str(tmp_path / "w")}, REPO, lambda: 0)
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("lines", [1, 2, 3, 5])
def test_the_quickstart_shows_the_test_sentences_there_are(tmp_path, lines, monkeypatch):
    """With TEST_LINES=2 the quickstart ended in a StopIteration after the whole run, showing
    three test sentences of two: it shows at most three, as many as the test set has."""
    from deepnet_fairseq.recipes import quickstart
    from deepnet_fairseq.storage.records import write_record
    from deepnet_fairseq.recipes.spec.paths import paths

    cfg = settings.resolve("wmt17", {"DEVICE": "cpu", "SIZE": "smoke", "TEST_LINES": str(lines),
                                     "DEEPNET_WORK": str(tmp_path)}, REPO, lambda: 0)
    where, pair = paths(cfg), f"{cfg['SRC']}-{cfg['TGT']}"
    os.makedirs(os.path.join(where.run_dir, "eval", pair))
    os.makedirs(where.raw)
    for lang in (cfg["SRC"], cfg["TGT"]):
        with open(os.path.join(where.raw, f"test.{pair}.{lang}"), "w") as f:
            f.write("".join(f"{lang} {i}\n" for i in range(lines)))
    with open(os.path.join(where.run_dir, "eval", pair, "generate-test.txt"), "w") as f:
        f.write("".join(f"D-{i}\t-0.1\thyp {i}\n" for i in range(lines)))
    write_record(os.path.join(where.run_dir, "eval", "eval.json"), "eval", {"directions": {
        pair: {"sacrebleu": 1.0, "tok_bleu": 1.0, "distinct_share": 1.0}}})
    shown = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: shown.append(" ".join(map(str, a))))
    assert quickstart.show_result(cfg)["sacrebleu"] == 1.0
    assert sum(line.count("OURS hyp") for line in shown) == min(lines, 3)
