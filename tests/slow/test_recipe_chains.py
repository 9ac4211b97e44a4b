"""End to end: every dataset's prepare -> train -> evaluate -> sweep chain at smoke size on
Multi30k (Elliott et al. 2016) in local mode, through the real scripts and fairseq CLIs.

WMT-17 shape: en-de; OPUS-100 shape: en<->{de,fr,cs}; IWSLT-14 shape: de-en. The WMT sweep
covers 2 depths x 2 methods plus a run forced to diverge (absurd learning rate); the OPUS
sweep 2 depths and the log fit over 6 directions; one test trains with 2 CPU processes (gloo)
through the recipe's own torchrun path, one as 2 torchrun "nodes" of one process sharing a
run directory, and one is stopped by SIGTERM (a scheduler's time limit) and resumed. Kept
small: the whole file is meant to take a few minutes on 2 cores.
"""

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from deepnet_fairseq.corpora import multi30k_dir
from deepnet_fairseq.recipes.base import machine
from deepnet_fairseq.recipes.reporting import curves
from support import (REPO, process_alive, process_cmdline, read_csv, tensorboard_scalars,
                     wait_for)


MULTI30K = multi30k_dir()  # shipped package data; raises (the tests fail, never skip) if missing
# SOURCE=multi30k: the corpus shipped in the package, found without any other setting
LOCAL = {"SIZE": "smoke", "DEVICE": "cpu", "SOURCE": "multi30k",
         "OMP_NUM_THREADS": "1"}  # one thread per process: CI machines are small and shared


def recipe_env(work, **env):
    return {**os.environ, **LOCAL, "DEEPNET_WORK": str(work), **env}


def script(dataset, step):
    return os.path.join(REPO, "scripts", dataset, f"{step}.sh")


def recipe(dataset, step, work, **env):
    proc = subprocess.run(["bash", script(dataset, step)], capture_output=True, text=True,
                          cwd=REPO, env=recipe_env(work, **env))
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
    # the third: a model left at its initialization (LR=1e-9) does not read its source, which
    # the source gain says at its first validation (update 10)
    blind = "deepnet:1:1:LR=1e-9:SOURCE_GAIN=1:STOP_SOURCE_BLIND=10"
    runs = f"deepnet:1:1 post_ln:1:1 post_ln:1:1:LR=1000 {blind} deepnet:2:2 post_ln:2:2"
    recipe("wmt17", "sweep", wmt17, RUNS=runs)
    rows, table = results(wmt17)
    blind_run = "deepnet-1L-1L+LR=1e-9+SOURCE_GAIN=1+STOP_SOURCE_BLIND=10"
    assert set(rows) == {"deepnet-1L-1L", "post_ln-1L-1L", "post_ln-1L-1L+LR=1000", blind_run,
                         "deepnet-2L-2L", "post_ln-2L-2L"}
    # the forced divergence and the stop are recorded, and the sweep went on to train and
    # score later runs
    assert rows["post_ln-1L-1L+LR=1000"]["status"] == "diverged"
    assert "| post_ln (LR=1000) | diverged |" in table
    assert rows[blind_run]["status"] == "source-blind"
    blind_status = json.load(open(wmt17 / "runs" / blind_run / "status.json"))
    assert blind_status["num_updates"] == 10 and blind_status["last_source_gain"] < 0.1
    assert not (wmt17 / "runs" / blind_run / "eval").exists()  # not evaluated
    for name in ("deepnet-1L-1L", "post_ln-1L-1L", "deepnet-2L-2L", "post_ln-2L-2L"):
        row = rows[name]
        assert row["status"] == "ok", row
        assert float(row["tok_bleu"]) >= 0 and float(row["sacrebleu"]) >= 0
        assert row["signature"].startswith("nrefs:1|case:mixed")
        evaluation = json.load(open(wmt17 / "runs" / name / "eval" / "eval.json"))
        assert evaluation["directions"]["en-de"]["sentences"] == 60  # every test sentence decoded
    assert "| method | 1L-1L | 2L-2L |" in table and "DeepNet 100L-100L: 28.9" in table
    # the sweep gives the report its data: each trained run is judged stalled or not
    assert {rows[name]["stalled"] for name in rows if rows[name]["status"] == "ok"} <= {"True", "False"}
    assert rows["post_ln-1L-1L+LR=1000"]["stalled"] in ("", "False")
    # a finished sweep is not redone: re-running only rewrites the table
    again = recipe("wmt17", "sweep", wmt17, RUNS=runs)
    assert again.stderr.count("already finished") == 6
    # the evaluation's scores are in the run's TensorBoard beside fairseq's curves, once (the
    # re-run kept the evaluation), at the update its newest checkpoint was saved at
    events = tensorboard_scalars(wmt17 / "runs" / "deepnet-2L-2L" / "tensorboard")
    trained = json.load(open(wmt17 / "runs" / "deepnet-2L-2L" / "status.json"))["num_updates"]
    scores = json.load(open(wmt17 / "runs" / "deepnet-2L-2L" / "eval" / "eval.json"))
    for metric in ("sacrebleu", "chrf"):
        assert events[("evaluate", f"{metric}/en-de")] == [
            (trained, pytest.approx(scores["directions"]["en-de"][metric], abs=1e-4))]
    assert ("valid", "loss") in events
    # the curves tool keeps a run's records: its last validation is the status's
    kept = wmt17 / "kept"
    kept.mkdir()  # an output's directory is the caller's to make (the tools create none)
    curves.main([str(wmt17 / "runs" / "deepnet-2L-2L"), "--export", str(kept),
                 "--plot", str(kept / "curves.png")])
    exported = kept / "deepnet-2L-2L"
    assert json.load(open(exported / "status.json")) == json.load(
        open(wmt17 / "runs" / "deepnet-2L-2L" / "status.json"))
    assert (exported / "eval.json").is_file() and (kept / "curves.png").stat().st_size > 0
    *_, last = (exported / "valid_loss.csv").read_text().split()
    assert float(last.split(",")[1]) == float(rows["deepnet-2L-2L"]["last_valid_loss"])
    assert curves.read_curve(str(exported)) == curves.read_curve(
        str(wmt17 / "runs" / "deepnet-2L-2L"))


def test_an_evaluation_stopped_while_decoding_resumes_and_records_what_it_evaluated(
        wmt17, monkeypatch, capsys):
    """(after the sweep above) A decode that fails half-way leaves eval.tmp with fairseq's
    partial output: the next evaluation redoes it instead of refusing a directory fairseq made.
    A result is kept only for the checkpoints and settings it was made with: another BEAM is
    evaluated again, not answered from the cache. No evaluation while the run is locked."""
    import fairseq_cli.generate

    from deepnet_fairseq.recipes.evaluation import evaluate
    from deepnet_fairseq.storage.directories import RunLock

    run = wmt17 / "runs" / "deepnet-1L-1L"
    argv = json.load(open(run / "evaluate.config.json"))["command"][3:]
    assert evaluate.up_to_date(str(run), argv)

    def dies_half_way(args):
        os.makedirs(args.results_path, exist_ok=True)
        open(os.path.join(args.results_path, "generate-test.txt"), "w").write("S-0\tpartial\n")
        raise RuntimeError("decoding stopped")

    import shutil
    shutil.rmtree(run / "eval")  # ours; as if it had never been evaluated
    monkeypatch.setattr(fairseq_cli.generate, "main", dies_half_way)
    with pytest.raises(RuntimeError, match="decoding stopped"):
        evaluate.main(argv)
    assert (run / "eval.tmp" / "en-de.tmp" / "generate-test.txt").is_file()
    # the real decodes in processes of their own, as the recipes run them (fairseq's data
    # loader workers, forked, would keep the run's lock in this one)
    def evaluate_in_a_process(arguments):
        subprocess.run([sys.executable, "-m", "deepnet_fairseq.recipes.evaluation.evaluate",
                        *arguments], check=True, capture_output=True, cwd=REPO)

    evaluate_in_a_process(argv)
    assert json.load(open(run / "eval" / "eval.json"))["directions"]["en-de"]["sentences"] == 60
    assert not (run / "eval.tmp").exists() and evaluate.up_to_date(str(run), argv)
    # another beam: not the cached result
    other = [*argv]
    beam = other.index("--beam") + 1
    other[beam] = str(int(other[beam]) + 1)
    assert not evaluate.up_to_date(str(run), other)
    evaluate_in_a_process(other)
    assert json.load(open(run / "eval" / "purpose.json"))["arguments"] == other
    # the run's lock (a trainer holds it) keeps evaluations out
    with RunLock(str(run)):
        with pytest.raises(SystemExit) as stopped:
            evaluate.main(argv)
    assert stopped.value.code == 1 and "is in use by" in capsys.readouterr().err


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
    # fairseq's TensorBoard events beside the log, from the master process alone: each
    # validation's loss as the log has it, once
    events = tensorboard_scalars(wmt17 / "runs" / "two-processes" / "tensorboard")
    logged = [(int(n), float(loss)) for loss, n in re.findall(
        r"valid on 'valid' subset \| loss ([0-9.]+) .*\| num_updates ([0-9]+)", log)]
    assert logged and [n for n, _ in events["valid", "loss"]] == [n for n, _ in logged]
    assert [v for _, v in events["valid", "loss"]] == pytest.approx([v for _, v in logged],
                                                                     abs=1e-3)
    assert ("train", "loss") in events  # the epoch's (4 updates log no train_inner)


def test_wmt17_sigterm_is_interrupted_and_the_next_launch_resumes(wmt17):
    run = wmt17 / "runs" / "preempted"
    env = recipe_env(wmt17, RUN_NAME="preempted", METHOD="deepnet", LAYERS="1",
                     MAX_UPDATE="24", SAVE_INTERVAL_UPDATES="3")
    proc = subprocess.Popen(["bash", script("wmt17", "train")], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = run / "train.log"
    # train.log is written while fairseq runs: the first checkpoint's line shows up in it live
    wait_for(lambda: log.exists() and "Saved checkpoint" in log.read_text(),
             "saved checkpoint in train.log", procs=[proc])
    proc.send_signal(signal.SIGTERM)  # what SLURM does at the time limit
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM, proc.stderr.read()[-3000:]
    status = json.load(open(run / "status.json"))
    assert status["status"] == "interrupted", status
    assert "SIGTERM" in status["reason"] and 3 <= status["num_updates"] < 24
    first = (run / "attempts" / "attempt-1.log").read_text()
    assert "signal SIGTERM" in first.splitlines()[-1]

    recipe("wmt17", "train", wmt17, RUN_NAME="preempted", METHOD="deepnet", LAYERS="1",
           MAX_UPDATE="24", SAVE_INTERVAL_UPDATES="3")
    status = json.load(open(run / "status.json"))
    assert (status["status"], status["num_updates"], status["attempt"]) == ("ok", 24, 2)
    second = (run / "attempts" / "attempt-2.log").read_text()
    assert "Loaded checkpoint" in second and "checkpoint_last.pt" in second  # resumed
    # every attempt's output is kept: both in train.log, each after its header
    whole = log.read_text()
    assert whole.count("==== attempt 1,") == 1 and whole.count("==== attempt 2,") == 1
    assert first in whole and second in whole


def _environ(pid: int) -> dict:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            pairs = handle.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return {}
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def test_wmt17_torchrun_killed_while_its_workers_import_leaves_nothing(wmt17):
    """torchrun SIGKILLed while its 2 workers still import (within a fraction of a second of
    their start, seconds before fairseq is loaded): no worker is left waiting in the rendezvous,
    the launcher ends with a clear status instead of waiting on them, and a re-run trains."""
    run = wmt17 / "runs" / "torchrun-killed"
    settings = dict(RUN_NAME="torchrun-killed", METHOD="deepnet", LAYERS="1", NPROC="2",
                    MAX_TOKENS="2048", MAX_UPDATE="4", SAVE_INTERVAL_UPDATES="2")
    launcher = subprocess.Popen(["bash", script("wmt17", "train")], cwd=REPO, text=True,
                                env=recipe_env(wmt17, **settings), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
    torchrun, workers = None, []
    try:
        deadline = time.time() + 300
        while len(workers) < 2:
            assert launcher.poll() is None and time.time() < deadline, "no 2 workers started"
            for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
                env = _environ(pid)
                if env.get("RUN_NAME") == "torchrun-killed" and "TORCHELASTIC_RUN_ID" in env:
                    torchrun = _ppid(pid)
                    workers = sorted({*workers, pid})
            time.sleep(0.02)
        os.kill(torchrun, signal.SIGKILL)  # the workers are importing: none has trained yet
        log_then = (run / "train.log").read_text()
        assert "distributed init" not in log_then  # the window was hit: before fairseq's init
        try:
            code = launcher.wait(timeout=120)
        except subprocess.TimeoutExpired:
            code = None
        assert code is not None, "the launcher waited on torchrun's orphaned workers"
        err = launcher.stderr.read()
        assert code == 1, err[-3000:]
        deadline = time.time() + 30
        while time.time() < deadline and any(map(process_alive, workers)):
            time.sleep(0.2)
        assert not any(map(process_alive, [torchrun, *workers])), "a worker outlived torchrun"
        status = json.load(open(run / "status.json"))
        assert status["status"] == "failed", status
        assert status["reason"].startswith("training was killed by SIGKILL"), status
        assert "FAILED: training was killed by SIGKILL" in err
    finally:  # whatever the outcome, nothing left behind by the test
        for pid in [launcher.pid, *filter(None, [torchrun]), *workers]:
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
    recipe("wmt17", "train", wmt17, **settings)  # a re-run ends right
    status = json.load(open(run / "status.json"))
    assert (status["status"], status["num_updates"], status["attempt"]) == ("ok", 4, 2), status


def test_wmt17_a_launcher_killed_reads_as_interrupted_and_the_next_launch_resumes(wmt17):
    """SIGKILL of the launcher (train.sh execs it), which can record nothing: its trainer dies
    with it, the run's lock is free, and every reader sees the status.json left "running" as
    interrupted; the next launch resumes."""
    from deepnet_fairseq.storage.records import read_status
    from deepnet_fairseq.recipes.reporting import report

    run = wmt17 / "runs" / "launcher-killed"
    # its own seed: the report leaves out a run that repeats another's training (same settings
    # and seed), and this module's earlier tests trained deepnet 1L-1L with the default seed
    settings = dict(RUN_NAME="launcher-killed", METHOD="deepnet", LAYERS="1", MAX_UPDATE="24",
                    SAVE_INTERVAL_UPDATES="3", SEED="11")
    launcher = subprocess.Popen(["bash", script("wmt17", "train")], cwd=REPO,
                                env=recipe_env(wmt17, **settings), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    log = run / "train.log"
    wait_for(lambda: log.exists() and "Saved checkpoint" in log.read_text(),
             "saved checkpoint in train.log", procs=[launcher])
    launcher.kill()
    launcher.wait()
    assert json.load(open(run / "status.json"))["status"] == "running"  # as the launcher left it
    deadline = time.time() + 60  # its trainer ends (parent-death signal), freeing the lock
    while time.time() < deadline and read_status(str(run))["status"] == "running":
        time.sleep(0.2)
    status = read_status(str(run))
    assert status["status"] == "interrupted", status
    assert "its launcher ended without recording its end" in status["reason"]
    row = next(r for r in report.collect("wmt17", str(wmt17 / "runs")) if r["run"] == run.name)
    assert row["status"] == "interrupted"
    recipe("wmt17", "train", wmt17, **settings)
    status = json.load(open(run / "status.json"))
    assert (status["status"], status["num_updates"], status["attempt"]) == ("ok", 24, 2)
    assert "Loaded checkpoint" in (run / "attempts" / "attempt-2.log").read_text()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_wmt17_two_nodes_write_one_status_and_their_own_logs(wmt17):
    # two "nodes" of one CPU process each on this machine: torchrun --nnodes 2, node ranks 0
    # and 1 started together, one shared run directory (as on a cluster's shared filesystem)
    run = wmt17 / "runs" / "two-nodes"
    common = dict(RUN_NAME="two-nodes", METHOD="deepnet", LAYERS="1", MAX_UPDATE="4",
                  SAVE_INTERVAL_UPDATES="2", MAX_TOKENS="2048", NNODES="2", NPROC="1",
                  MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    nodes = [subprocess.Popen(["bash", script("wmt17", "train")], cwd=REPO, text=True,
                              env=recipe_env(wmt17, NODE_RANK=str(rank), **common),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for rank in (0, 1)]
    errors = [node.communicate(timeout=600)[1] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n----\n".join(e[-3000:] for e in errors)
    status = json.load(open(run / "status.json"))
    assert status["status"] == "ok" and status["num_updates"] == 4, status
    assert (status["world_size"], status["nnodes"], status["launcher"]) == (2, 2, "torchrun")
    assert "rank 0 writes the status" in errors[1]
    # run-level files from global rank 0 only; node 1 keeps its own log
    assert "--node_rank 0" in (run / "command.sh").read_text()
    record = json.load(open(run / "config.json"))
    assert record["layout"]["node_rank"] == 0
    assert record["machine"] == machine.describe(recipe_env(wmt17, **common))  # what moves figures
    node0, node1 = (run / "train.log").read_text(), (run / "train.node1.log").read_text()
    assert "==== attempt 1," in node0 and "==== attempt 1 (node 1)," in node1
    assert "valid on 'valid' subset" in node0 and "--node_rank 1" in node1
    assert "--node_rank 1" not in node0
    assert sorted(os.listdir(run / "attempts")) == [".deepnet-recipes", "attempt-1.log",
                                                   "attempt-1.node1.log"]


def test_opus100_chain_and_log_fit(tmp_path):
    small = {"LANGS": "de fr cs", "VALID_LINES": "40", "TEST_LINES": "30"}
    recipe("opus100", "prepare", tmp_path, **small)
    pairs = open(tmp_path / "data" / "bin" / "lang_pairs.txt").read().strip().split(",")
    assert sorted(pairs) == ["cs-en", "de-en", "en-cs", "en-de", "en-fr", "fr-en"]
    # the learning rate moved from 1L by the depth rule: 2L trains at LR x (1/2)^(2/3)
    recipe("opus100", "sweep", tmp_path, METHODS="deepnet", DEPTHS="1 2", LR="1e-3",
           LR_BASE_LAYERS="1", LR_DEPTH_POWER="0.667", LOG_INTERVAL="2", **small)
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
    # the depth law's report over the same runs: size, cost and the fits beside the paper's
    subprocess.run([sys.executable, "-m", "deepnet_fairseq.recipes.reporting.depth_law",
                    str(tmp_path / "runs"), "--out", str(tmp_path / "law")], check=True)
    law = {r["run"]: r for r in read_csv(tmp_path / "law" / "depth_law.csv")}
    assert float(law["deepnet-2L-2L"]["peak_lr"]) == pytest.approx(1e-3 * 0.5 ** 0.667, rel=1e-4)
    assert float(law["deepnet-1L-1L"]["peak_lr"]) == pytest.approx(1e-3)
    assert all(float(r["train_hours"]) >= 0 and float(r["params_m"]) > 0 for r in law.values())
    assert "| paper: ds_init |" in (tmp_path / "law" / "depth_law.md").read_text()
    # the Python API on a multilingual checkpoint: a direction named, its language token gone
    import deepnet_fairseq
    from deepnet_fairseq.hub import LoadError

    checkpoint = str(tmp_path / "runs" / "deepnet-2L-2L" / "checkpoints" / "checkpoint_last.pt")
    with pytest.raises(LoadError, match="multilingual model: pass source_lang= and target_lang="):
        deepnet_fairseq.load(checkpoint)
    model = deepnet_fairseq.load(checkpoint, source_lang="en", target_lang="de")
    translation = model.translate("A man in an orange hat.", beam=2)
    assert isinstance(translation, str) and "__de__" not in translation


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


def test_a_killed_quickstart_leaves_no_orphan_and_resumes(tmp_path):
    """SIGKILL of the quickstart once its first checkpoint exists: fairseq-train dies with it
    (no orphan keeps training), and the next launch resumes from that checkpoint, finishes,
    and leaves no temporary behind."""
    out = tmp_path / "qs"
    env = dict(os.environ, SIZE="smoke", DEEPNET_WORK=str(out), MAX_UPDATE="60")
    script = os.path.join(REPO, "scripts", "quickstart.sh")
    output = open(tmp_path / "first.log", "wb")
    first = subprocess.Popen(["bash", script], env=env, stdout=output, stderr=output)
    run_dir = out / "runs" / "deepnet-6L-6L"
    last = run_dir / "checkpoints" / "checkpoint_last.pt"
    deadline = time.time() + 300
    while time.time() < deadline and not last.exists() and first.poll() is None:
        time.sleep(0.5)
    assert last.exists(), ("no checkpoint before the kill (exit status "
                           f"{first.poll()}):\n{(tmp_path / 'first.log').read_text()[-3000:]}")
    trainers = [pid for pid in _all_pids() if str(out) in process_cmdline(pid) and pid != first.pid]
    first.kill()
    first.wait()
    deadline = time.time() + 30
    while time.time() < deadline and any(process_alive(pid) for pid in trainers):
        time.sleep(0.2)
    assert trainers and not any(process_alive(pid) for pid in trainers), "fairseq-train outlived it"
    second = subprocess.run(["bash", script], env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-2000:]
    log = (run_dir / "train.log").read_text()
    assert re.search(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch \d+ @ [1-9]\d* updates\)",
                     log)
    assert "update 60/60" in second.stderr
    left = [str(p) for p in out.rglob("*") if p.name.startswith(".tmp-") or
            p.name.endswith(".pt.tmp")]
    assert not left, left


def _all_pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]

