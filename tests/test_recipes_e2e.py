"""End to end: every dataset's prepare -> train -> evaluate -> sweep chain at smoke size on
Multi30k (Elliott et al. 2016) in local mode, through the real scripts and fairseq CLIs.

WMT-17 shape: en-de; OPUS-100 shape: en<->{de,fr,cs}; IWSLT-14 shape: de-en. The WMT sweep
covers 2 depths x 2 methods plus a run forced to diverge (absurd learning rate); the OPUS
sweep 2 depths and the log fit over 6 directions; one test trains with 2 CPU processes (gloo)
through the recipe's own torchrun path. Kept small: the whole file is meant to take a few
minutes on 2 cores.
"""

import csv
import json
import os
import subprocess

import pytest

from conftest import REPO

from deepnet_fairseq.corpora import multi30k_dir

MULTI30K = multi30k_dir()  # shipped package data; raises (the tests fail, never skip) if missing
pytestmark = pytest.mark.slow
# SOURCE=multi30k: the corpus shipped in the package, found without any other setting
LOCAL = {"SIZE": "smoke", "DEVICE": "cpu", "SOURCE": "multi30k",
         "OMP_NUM_THREADS": "1"}  # one thread per process: CI machines are small and shared


def recipe(dataset, step, work, **env):
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", dataset, f"{step}.sh")],
                          capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **LOCAL, "DEEPNET_WORK": str(work), **env})
    assert proc.returncode == 0, f"{dataset}/{step}.sh exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc


def results(work):
    with open(os.path.join(work, "results", "results.csv")) as handle:
        rows = {row["run"]: row for row in csv.DictReader(handle)}
    table = open(os.path.join(work, "results", "table.md")).read()
    png = open(os.path.join(work, "results", "bleu_vs_depth.png"), "rb").read()
    assert png[:4] == b"\x89PNG"
    return rows, table


@pytest.fixture(scope="module")
def wmt17(tmp_path_factory):
    work = tmp_path_factory.mktemp("wmt17")
    recipe("wmt17", "prepare", work)
    return work


def test_wmt17_sweep_with_forced_divergence(wmt17):
    runs = "deepnet:1:1 post_ln:1:1 post_ln:1:1:LR=1000 deepnet:2:2 post_ln:2:2"
    recipe("wmt17", "sweep", wmt17, RUNS=runs)
    rows, table = results(wmt17)
    assert set(rows) == {"deepnet-1L-1L", "post_ln-1L-1L", "post_ln-1L-1L+LR=1000",
                         "deepnet-2L-2L", "post_ln-2L-2L"}
    # the forced divergence is recorded, and the sweep went on to train and score later runs
    assert rows["post_ln-1L-1L+LR=1000"]["status"] == "diverged"
    assert "| post_ln (LR=1000) | diverged |" in table
    for name in ("deepnet-1L-1L", "post_ln-1L-1L", "deepnet-2L-2L", "post_ln-2L-2L"):
        row = rows[name]
        assert row["status"] == "ok", row
        assert float(row["tok_bleu"]) >= 0 and float(row["sacrebleu"]) >= 0
        assert row["signature"].startswith("nrefs:1|case:mixed")
        evaluation = json.load(open(wmt17 / "runs" / name / "eval" / "eval.json"))
        assert evaluation["directions"]["en-de"]["sentences"] == 60  # every test sentence decoded
    assert "| method | 1L-1L | 2L-2L |" in table and "DeepNet 100L-100L: 28.9" in table
    # a finished sweep is not redone: re-running only rewrites the table
    again = recipe("wmt17", "sweep", wmt17, RUNS=runs)
    assert again.stderr.count("already finished") == 5


def test_wmt17_two_cpu_processes_keep_the_effective_batch(wmt17):
    # 2 gloo processes x 2048 tokens: update-freq 1 gives the same 4096-token update as one
    # process x 4096 tokens (the sweep's runs) or one process x 2048 x update-freq 2.
    # In bf16, which fairseq's CLI alone cannot do off a TPU (deepnet_fairseq/fairseq_train_compat.py)
    recipe("wmt17", "train", wmt17, RUN_NAME="two-processes", NPROC="2", METHOD="deepnet",
           LAYERS="1", MAX_TOKENS="2048", MAX_UPDATE="4", SAVE_INTERVAL_UPDATES="2",
           PRECISION="bf16")
    two = json.load(open(wmt17 / "runs" / "two-processes" / "status.json"))
    assert (two["world_size"], two["update_freq"], two["launcher"]) == (2, 1, "torchrun")
    assert two["status"] == "ok" and two["num_updates"] == 4
    log = open(wmt17 / "runs" / "two-processes" / "train.log").read()
    assert "distributed init (rank 1)" in log and "'distributed_world_size': 2" in log
    assert "'bf16': True" in log and "'tpu': False" in log


def test_opus100_chain_and_log_fit(tmp_path):
    small = {"LANGS": "de fr cs", "VALID_LINES": "40", "TEST_LINES": "30"}
    recipe("opus100", "prepare", tmp_path, **small)
    pairs = open(tmp_path / "data" / "bin" / "lang_pairs.txt").read().strip().split(",")
    assert sorted(pairs) == ["cs-en", "de-en", "en-cs", "en-de", "en-fr", "fr-en"]
    recipe("opus100", "sweep", tmp_path, METHODS="deepnet", DEPTHS="1 2", **small)
    rows, table = results(tmp_path)
    assert set(rows) == {"deepnet-1L-1L", "deepnet-2L-2L"}
    for row in rows.values():
        assert row["status"] == "ok", row
        evaluation = json.load(open(tmp_path / "runs" / row["run"] / "eval" / "eval.json"))
        assert sorted(evaluation["directions"]) == sorted(pairs)
        assert all(d["sentences"] == 30 for d in evaluation["directions"].values())
        assert float(row["x_en"]) >= 0 and float(row["en_x"]) >= 0
    assert "| model | layers | X->En | En->X | Avg |" in table
    assert "deepnet: BLEU(d) =" in table and "DeepNet 1000L 500L-500L: 32.1" in table


def test_iwslt14_chain(tmp_path):
    recipe("iwslt14", "prepare", tmp_path, SRC="de", TGT="en")
    recipe("iwslt14", "train", tmp_path, METHOD="pre_ln", LAYERS="1")
    recipe("iwslt14", "evaluate", tmp_path, METHOD="pre_ln", LAYERS="1")
    evaluation = json.load(open(tmp_path / "runs" / "pre_ln-1L-1L" / "eval" / "eval.json"))
    assert list(evaluation["directions"]) == ["de-en"]
    # the sweep finds the run trained and evaluated above, and only writes the results
    sweep = recipe("iwslt14", "sweep", tmp_path, METHODS="pre_ln", DEPTHS="1")
    assert "already finished" in sweep.stderr and "already evaluated" in sweep.stderr
    rows, table = results(tmp_path)
    assert rows["pre_ln-1L-1L"]["status"] == "ok"
    assert "| method | 1L-1L |" in table and "| pre_ln |" in table
