"""End to end: the generic dataset (``parallel``) on a corpus of the user's own, through the
real scripts: prepare -> train -> evaluate -> sweep at smoke size on CPU. The corpus is written
here from the shipped Multi30k (de->en, the reverse of the WMT shape), under names no other
dataset uses, one side gzipped and the other plain, so that nothing of WMT-17 is involved."""

import csv
import gzip
import itertools
import json
import os
import subprocess

from deepnet_fairseq.corpora import multi30k_dir
from support import REPO

LINES = {"train": 1500, "valid": 40, "test": 30}
SHIPPED = {"train": "train", "valid": "val", "test": "test_2016_flickr"}


def write_corpus(directory):
    """DIRECTORY/mine-SPLIT.de.gz and DIRECTORY/mine-SPLIT.en (plain): the first lines of the
    shipped Multi30k."""
    directory.mkdir()
    for split, count in LINES.items():
        for lang, opener in (("de", gzip.open), ("en", open)):
            with gzip.open(os.path.join(multi30k_dir(), f"{SHIPPED[split]}.{lang}.gz"), "rb") as f:
                lines = list(itertools.islice(f, count))
            name = f"mine-{split}.{lang}" + (".gz" if opener is gzip.open else "")
            with opener(directory / name, "wb") as out:
                out.writelines(lines)
    return {f"{split.upper()}_TEXT": str(directory / f"mine-{split}") for split in LINES}


def recipe(step, work, **env):
    proc = subprocess.run(
        ["bash", os.path.join(REPO, "scripts", "parallel", f"{step}.sh")], capture_output=True,
        text=True, cwd=REPO, env={**os.environ, "SIZE": "smoke", "DEVICE": "cpu", "SRC": "de",
                                  "TGT": "en", "OMP_NUM_THREADS": "1", "DEEPNET_WORK": str(work),
                                  **env})
    assert proc.returncode == 0, f"parallel/{step}.sh exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc


def test_own_corpus_prepare_train_evaluate_sweep(tmp_path):
    text = write_corpus(tmp_path / "corpus")
    work = tmp_path / "work"
    recipe("prepare", work, **text)
    raw = work / "data" / "raw"
    assert sorted(os.listdir(raw)) == [".deepnet-recipes", ".done"] + sorted(
        f"{split}.de-en.{lang}" for split in LINES for lang in ("de", "en"))
    assert len((raw / "test.de-en.en").read_bytes().splitlines()) == LINES["test"]
    config = json.load(open(work / "data" / "config.json"))
    assert config["dataset"] == "parallel"
    assert config["settings"]["TRAIN_TEXT"]["value"] == text["TRAIN_TEXT"]

    recipe("train", work, METHOD="deepnet", LAYERS="1")
    recipe("evaluate", work, METHOD="deepnet", LAYERS="1")
    evaluation = json.load(open(work / "runs" / "deepnet-1L-1L" / "eval" / "eval.json"))
    assert list(evaluation["directions"]) == ["de-en"]
    assert evaluation["directions"]["de-en"]["sentences"] == LINES["test"]

    sweep = recipe("sweep", work, METHODS="deepnet", DEPTHS="1")
    assert "already finished" in sweep.stderr and "already evaluated" in sweep.stderr
    with open(work / "results" / "results.csv") as handle:
        (row,) = csv.DictReader(handle)
    assert (row["dataset"], row["status"], row["paper_bleu"]) == ("parallel", "ok", "")
    table = open(work / "results" / "table.md").read()
    assert "# parallel: BLEU by depth" in table and "detokenised sacreBLEU" in table
    assert "The paper's numbers" not in table
