"""Running the recipes' steps: attempts, live logs, signals, statuses, sweeps.

A training run lives in ``$WORK/runs/<run>/``. Each launch is one *attempt*:

* its output goes, line by line while it runs, to ``attempts/attempt-<N>.log`` and to
  ``train.log`` (all attempts, each after a header line); on node k > 0 of a multi-node
  torchrun run to ``attempts/attempt-<N>.node<k>.log`` and ``train.node<k>.log`` instead;
* global rank 0 alone writes ``config.json`` (settings, layout, command), ``command.sh`` and
  ``status.json``: ``running`` while it trains, then ``ok`` / ``diverged`` / ``failed`` from
  its own log (``fairseq_log.classify``), or ``interrupted`` when the launch received SIGTERM,
  SIGINT or SIGHUP (a scheduler's time limit, Ctrl-C), which it passes on to the processes;
* exit status: 0 ok, 3 diverged, 1 failed, 128 + signal number when interrupted.

The next launch of a run that is not ok or diverged resumes from ``checkpoint_last.pt``
(fairseq's default ``--restore-file``; an unreadable one -- a copy truncated by the
interruption, a corrupt file -- is first replaced by the newest readable update checkpoint); ``RETRY=1`` trains a finished run again.
"""

import datetime
import os
import re
import shlex
import signal
import socket
import sys
import threading
from dataclasses import asdict
from typing import List, Mapping, Optional, Tuple

from ...fairseq_log import HEADER, classify, one_line, vocab_size
from ...processes import run_forwarding
from ..data.workers import cores
from . import runlog
from .lengths import refuse_too_long, refuse_too_long_to_evaluate
from .. import write_atomically
from ...storage.records import read_record, read_status, record_text, write_record
from .launch import (PER_TENSOR_OPTIONS, evaluate_command, machine_memory_gb, machine_problem,
                     method_args, paths, peak_lr, plan_layout, prepare_first, task_args,
                     train_command, train_environment)
from ..spec.settings import (DATA, TRAINED, SettingError, Settings, affecting, changed,
                             check_run_entry, resolve, run_label, run_name)
from ...storage.fileio import (RecordError, copy_file, describe_os_error, move, open_no_follow,
                               overwrite_in_place, refuse_links_within, remove_file)
from ...storage.directories import LOCK, MARKER, Busy, NotOurs, RunLock, is_ours, make_dirs

EXIT = {"ok": 0, "failed": 1, "diverged": 3}
PROGRESS_EVERY_S = runlog.PROGRESS_EVERY_S  # a training's progress line this often


def log(cfg: Settings, step: str, message: str) -> None:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
    print(f"[{cfg.dataset}/{step} {now}] {message}", file=sys.stderr, flush=True)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _append(path: str, text: str) -> None:
    with open_no_follow(path, "a") as out:
        out.write(text)


def _status(run_dir: str) -> Optional[dict]:
    """The run's status record (``read_status``: a killed launcher's ``running`` is
    ``interrupted``); None if it has none or it cannot be read (it is rewritten)."""
    try:
        return read_status(run_dir)
    except (OSError, RecordError):
        return None


def _readable_status(run_dir: str) -> Optional[dict]:
    """The run's status record (``read_status``), None if it has none; one this code cannot
    read is refused (``SettingError``, naming it and what to do), not taken for no status."""
    try:
        return read_status(run_dir)
    except RecordError as err:
        raise SettingError(str(err)) from None


def _next_attempt(attempts: str, suffix: str) -> int:
    numbers = [int(name[len("attempt-"):-len(f"{suffix}.log")]) for name in os.listdir(attempts)
               if name.startswith("attempt-") and name.endswith(f"{suffix}.log")
               and re.fullmatch(r"[0-9]+", name[len("attempt-"):-len(f"{suffix}.log")])]
    return max(numbers, default=0) + 1


def repair_last_checkpoint(checkpoints: str) -> Optional[str]:
    """Replace an unreadable checkpoint_last.pt by the newest readable update checkpoint.

    fairseq 0.12 writes its first checkpoint file atomically but makes checkpoint_last.pt as a
    plain copy of it, so a signal during that copy leaves a truncated file, and every later
    resume fails; so does any other unreadable file (empty, corrupt data). ``checkpoint_io``
    reads each candidate weights-only, its tensors mapped, not read: the check costs little
    even for a large model. Returns a message when something was done.
    """
    # torch: only when there is a file
    from ...storage.checkpoint_io import is_readable, why_unreadable

    last = os.path.join(checkpoints, "checkpoint_last.pt")
    cause = why_unreadable(last) if os.path.isfile(last) else None
    if cause is None:
        return None
    updates = []
    for name in os.listdir(checkpoints):
        parts = name[:-len(".pt")].split("_") if name.endswith(".pt") else []
        if len(parts) == 3 and parts[0] == "checkpoint" and re.fullmatch(r"[0-9]+", parts[2]):
            updates.append((int(parts[2]), name))
    for _, name in sorted(updates, reverse=True):
        if is_readable(os.path.join(checkpoints, name)):
            copy_file(os.path.join(checkpoints, name), last)
            return f"checkpoint_last.pt was unreadable ({cause}); replaced by {name}"
    move(last, last + ".unreadable")
    return (f"checkpoint_last.pt was unreadable ({cause}) and no readable update checkpoint "
            f"exists: moved to checkpoint_last.pt.unreadable, training starts again from "
            f"update 0")


def training_done(checkpoints: str) -> Tuple[int, int]:
    """(updates, whole epochs) CHECKPOINTS/checkpoint_last.pt holds: fairseq's optimizer
    history, and its train iterator's state, whose epoch is the one to run next (fairseq
    saves an epoch's end as the next epoch at iteration 0); (0, 0) where there is none or it
    cannot be read (``repair_last_checkpoint`` deals with that one)."""
    from ...storage.checkpoint_io import CheckpointError, read_checkpoint

    last = os.path.join(checkpoints, "checkpoint_last.pt")
    if not os.path.isfile(last):
        return 0, 0
    try:
        state = read_checkpoint(last, mmap=True)
    except CheckpointError:
        return 0, 0
    history = state.get("optimizer_history") or [{}]
    iterator = (state.get("extra_state") or {}).get("train_iterator") or {}
    return (int(history[-1].get("num_updates", 0) or 0),
            max(int(iterator.get("epoch", 1) or 1) - 1, 0))


def limit_reached(cfg: Settings, updates: int, epochs: int) -> Optional[Tuple[str, str]]:
    """The limit, MAX_UPDATE or MAX_EPOCH (each 0: none), at which a run whose checkpoint_last.pt
    holds UPDATES and EPOCHS (``training_done``) has nothing more to train, and where that is;
    None if neither is reached. Resumed from a checkpoint at --max-update, fairseq would still
    take one update (and save it); at --max-epoch it would start, log no validation and exit 0,
    a "failed" run that a sweep retries: either way the run ended there, killed after its last
    save."""
    if cfg.int("MAX_UPDATE") and updates >= cfg.int("MAX_UPDATE"):
        return "MAX_UPDATE", f"update {updates}"
    if cfg.int("MAX_EPOCH") and epochs >= cfg.int("MAX_EPOCH"):
        return "MAX_EPOCH", f"the end of epoch {epochs} (update {updates})"
    return None


def _stale_temporaries(run_dir: str) -> List[str]:
    """Temporaries a killed attempt leaves in a run directory: fairseq's ``*.pt.tmp``
    checkpoint copies and the ``.tmp-*`` files of ``atomic_open``. Only called under the run's
    lock, so no live process is writing them."""
    found = []
    for directory in (run_dir, os.path.join(run_dir, "checkpoints")):
        if os.path.isdir(directory):
            found += [os.path.join(directory, name) for name in sorted(os.listdir(directory))
                      if name.endswith(".pt.tmp") or name.startswith(".tmp-")]
    return [path for path in found if os.path.isfile(path)]


def _vocab_size(bin_dir: str) -> int:
    dicts = sorted(name for name in os.listdir(bin_dir) if name.startswith("dict.")
                   and name.endswith(".txt"))
    return vocab_size(os.path.join(bin_dir, dicts[0]))


def prepared_otherwise(cfg: Settings, data: str, using: bool = False) -> Optional[str]:
    """Why DATA, already (partly) prepared, is not the data of these settings (its record,
    ``config.json``, says other data settings), or None. Asked by prepare, and by train,
    evaluate and the sweep before they write anything (``data_otherwise``, USING: a step that
    uses the data, not one that makes it, so a setting it leaves unset is no difference: the
    raw text's paths, TRAIN_TEXT and the like, are given to prepare and not repeated after)."""
    started = [p for p in ("raw/.done", "spm.model", "bin/.done")
               if os.path.exists(os.path.join(data, p))]
    try:
        record = read_record(os.path.join(data, "config.json"), "data-config")
    except RecordError as err:  # prepare would write over it: refused, started or not
        return str(err)
    if not started or record is None:
        return None
    if record.get("dataset") != cfg.dataset:
        different = [f"dataset {record.get('dataset')} before, {cfg.dataset} now"]
    else:
        names = [n for n in affecting(DATA) if not using or n in cfg.values]
        different = changed(names, {k: v["value"] for k, v in
                                    record.get("settings", {}).items()}, cfg.values)
    if not different:
        return None
    return (f"{data} holds data prepared with other settings ({'; '.join(different)}): using "
            f"it would train or evaluate on other data than these settings say. Set the values "
            f"it was prepared with, choose another DEEPNET_WORK, or delete {data} (the recipes "
            f"made it) to prepare it again")


def data_otherwise(cfg: Settings) -> None:
    """Refuse (a SettingError naming each setting and both values) prepared data whose record
    says other data settings than CFG's: a run would train or be evaluated on other data than
    its records say (VOCAB=2000 recorded, 1000 pieces used). Prepare's own check."""
    problem = prepared_otherwise(cfg, paths(cfg)["DATA_DIR"], using=True)
    if problem:
        raise SettingError(problem)


# ---- steps ----------------------------------------------------------------------------------

def train(cfg: Settings, env: Mapping[str, str], dry_run: bool = False) -> int:
    where = paths(cfg)
    run_dir, name = where["RUN_DIR"], cfg["RUN_NAME"]
    layout = plan_layout(cfg, env)
    command = train_command(cfg, layout, method_args(cfg), task_args(cfg, dry_run))
    log(cfg, "train", f"{name}: {cfg['ENC_LAYERS']}L-{cfg['DEC_LAYERS']}L {cfg['METHOD']}, "
                      f"{cfg['EMBED_DIM']}-{cfg['FFN_DIM']}-{cfg['HEADS']}, {layout.summary()}")
    if cfg.int("LR_BASE_LAYERS"):
        log(cfg, "train", f"{name}: peak lr {peak_lr(cfg)}, LR={cfg['LR']} moved from "
                          f"{cfg['LR_BASE_LAYERS']} layers per side by (base / L)^"
                          f"{cfg['LR_DEPTH_POWER']}")
    if "--fp16-no-flatten-grads" in command and any(o in command for o in PER_TENSOR_OPTIONS):
        log(cfg, "train", f"{cfg['METHOD']} scales some parameters' steps, which needs the "
                          f"optimizer to step each tensor: {layout.precision} with "
                          "--fp16-no-flatten-grads (the same memory)")
    if layout.memory_unknown:  # on stderr: stdout is the plan and the command
        log(cfg, "train", layout.memory_unknown)
    problem = machine_problem(cfg, layout, cores(), machine_memory_gb())
    if problem and not dry_run:
        raise SettingError(problem)
    if problem:  # a dry run may plan for another machine
        log(cfg, "train", f"on this machine a run would stop: {problem}")
    if dry_run:
        if layout.memory:
            print(layout.memory_text())
        print(shlex.join(command))
        return 0
    if not os.path.isfile(os.path.join(where["BIN"], ".done")):
        raise SettingError(f"no prepared data in {where['BIN']}; {prepare_first(cfg)}")
    data_otherwise(cfg)
    if os.path.isdir(run_dir) and not is_ours(run_dir):
        raise SettingError(f"{run_dir} exists and the recipes did not create it (no {MARKER} "
                           "in it): refusing to write into it. Choose another RUN_NAME, or move "
                           "the directory away")
    problem = trained_otherwise(cfg, run_dir)  # before a finished run is reported as this one
    if problem:
        raise SettingError(problem)
    status = _readable_status(run_dir)  # the one an attempt replaces: before anything is written
    if not cfg.flag("RETRY") and status and status.get("status") in ("ok", "diverged"):
        log(cfg, "train", f"{name} already finished ({status['status']}); RETRY=1 to train again")
        return EXIT[status["status"]]
    refuse_too_long(cfg, command)  # a valid or test pair fairseq would refuse after the work

    make_dirs(run_dir)
    with RunLock(run_dir, f"{LOCK}{layout.node_suffix}", "train") as lock:
        # fairseq reads and writes the run's files (checkpoint_last.pt...) and the data by
        # name: a link in them would resume from, and overwrite, what it points to. Asked
        # under the lock, so that no launch of the recipes changes the run between the
        # answer and fairseq's start
        for directory in (run_dir, where["BIN"]):
            refuse_links_within(directory)
        try:
            return _train_attempt(cfg, env, layout, command, lock)
        except OSError as err:  # a full disk, a directory made read-only: not "running"
            if layout.is_rank0:
                _mark_failed(run_dir, describe_os_error(err))
            raise


def trained_otherwise(cfg: Settings, run_dir: str) -> Optional[str]:
    """Why RUN_DIR, trained before, is not a run of these settings: its record (config.json)
    holds other values of the settings declared to affect what is trained or the data
    (``affects`` in spec/settings.py). Resuming it, or keeping its result, would mix two
    trainings under a record of one. None for a new run or the same settings."""
    path = os.path.join(run_dir, "config.json")
    try:
        record = read_record(path, "run-config")
    except RecordError as err:
        return str(err)
    if record is None:
        return None
    if record.get("dataset", cfg.dataset) != cfg.dataset:
        different = [f"dataset {record['dataset']} before, {cfg.dataset} now"]
    else:
        different = changed(affecting(TRAINED, DATA), {
            name: v["value"] for name, v in record.get("settings", {}).items()}, cfg.values)
    if not different:
        return None
    return (f"{cfg['RUN_NAME']} was trained with other settings ({'; '.join(different)}; see "
            f"{path}): resuming or reusing it would mix two trainings under one record. Train "
            f"these settings under another RUN_NAME, or move {run_dir} away to train it anew")


def _mark_failed(run_dir: str, reason: str) -> None:
    """Set the run's status to failed, even on a full disk: if no new file can be written,
    overwrite status.json in place (a few hundred bytes fit in the block it already has)."""
    path = os.path.join(run_dir, "status.json")
    try:  # read as write_record reads what it replaces: one it cannot read is left as it is
        status = {**(read_status(run_dir) or {}), "status": "failed", "reason": reason}
    except RecordError:
        return
    text = record_text("status", status)
    try:
        write_atomically(path, text)
    except OSError:
        try:
            overwrite_in_place(path, text)
        except OSError:
            pass  # nothing more can be done; the error line says what happened


def _train_attempt(cfg: Settings, env: Mapping[str, str], layout, command: List[str],
                   lock: RunLock) -> int:
    """One attempt of a run whose directory this launcher holds (``train``)."""
    where = paths(cfg)
    run_dir, name = where["RUN_DIR"], cfg["RUN_NAME"]
    attempts = make_dirs(os.path.join(run_dir, "attempts"))
    # fairseq writes and deletes checkpoints in it: made and marked here first, so that a
    # link planted in its place is refused (make_dirs) rather than followed by fairseq
    make_dirs(where["CHECKPOINTS"])
    make_dirs(where["TENSORBOARD"])  # the same for fairseq's TensorBoard event files
    suffix = layout.node_suffix
    number = _next_attempt(attempts, suffix)
    attempt_log = os.path.join(attempts, f"attempt-{number}{suffix}.log")
    train_log = os.path.join(run_dir, f"train{suffix}.log")
    meta = {"dataset": cfg.dataset, "method": cfg["METHOD"],
            "encoder_layers": cfg.int("ENC_LAYERS"), "decoder_layers": cfg.int("DEC_LAYERS"),
            "label": cfg["RUN_LABEL"], "seed": cfg.int("SEED"), "launcher": layout.launcher,
            "world_size": layout.world,
            "nnodes": layout.nnodes, "update_freq": layout.update_freq,
            "tokens_per_update": layout.tokens_per_update, "attempt": number}
    if layout.is_rank0:
        for stale in _stale_temporaries(run_dir):
            remove_file(stale)
            log(cfg, "train", f"{name}: removed {stale}, left by an interrupted attempt")
        repaired = repair_last_checkpoint(where["CHECKPOINTS"])
        if repaired:
            log(cfg, "train", f"{name}: {repaired}")
    updates, epochs = training_done(where["CHECKPOINTS"])
    reached = limit_reached(cfg, updates, epochs)
    if reached:
        return _ended_at(cfg, layout, {**meta, "attempt": number - 1, "num_updates": updates},
                         train_log, reached)
    if layout.is_rank0:
        write_record(os.path.join(run_dir, "config.json"), "run-config",
                     {"step": "train", "dataset": cfg.dataset, "settings": cfg.as_json(),
                      "layout": {**asdict(layout), "world": layout.world}, "command": command})
        write_atomically(os.path.join(run_dir, "command.sh"), shlex.join(command) + "\n")
        write_record(os.path.join(run_dir, "status.json"), "status",
                     {**meta, "status": "running", "reason": f"attempt {number} started {_now()}"})
    header = (f"{HEADER}{number}{f' (node {layout.node_rank})' if suffix else ''}, "
              f"{_now()}, {socket.gethostname()}: {one_line(shlex.join(command))}\n")
    for path in (attempt_log, train_log):
        _append(path, header)
    log(cfg, "train", f"{name}: attempt {number}, log {train_log} (live)")

    watch = runlog.DivergenceWatch(_vocab_size(where["BIN"]), cfg.int("WARMUP"),
                                   cfg.int("STOP_DIVERGED"))
    progress = runlog.Progress(cfg.int("MAX_UPDATE"))

    def echo(line):
        progress.feed(line)
        if "valid on '" in line:
            print("    " + line.rstrip(), file=sys.stderr, flush=True)
        return watch.feed(line)

    def every_so_often(done: threading.Event):
        while not done.wait(PROGRESS_EVERY_S):
            log(cfg, "train", f"{name}: {progress.line()}")

    done = threading.Event()
    threading.Thread(target=every_so_often, args=(done,), daemon=True).start()
    try:
        code, signum = run_forwarding(command, train_environment(env), [attempt_log, train_log],
                                      echo, pass_fds=(lock.fd,))
    finally:
        done.set()
    log(cfg, "train", f"{name}: {progress.line()}")
    ending = f"signal {signal.Signals(signum).name}" if signum else f"exit code {code}"
    for path in (attempt_log, train_log):
        _append(path, f"{HEADER}{number} ended {_now()}: {ending}\n")
    if not layout.is_rank0:
        log(cfg, "train", f"{name}: node {layout.node_rank} done ({ending}); rank 0 writes "
                          "the status")
        return 128 + signum if signum else (0 if code == 0 else EXIT["failed"])
    with open(attempt_log, encoding="utf-8", errors="replace") as handle:
        result = watch.stopped if watch.stopped and not signum else classify(
            handle.read(), code, _vocab_size(where["BIN"]), cfg.int("WARMUP"),
            signal.Signals(signum).name if signum else None)
    write_record(os.path.join(run_dir, "status.json"), "status", {**meta, **result})
    state = result["status"]
    log(cfg, "train", f"{name}: {state.upper() if state != 'ok' else state}"
                      f"{': ' + result['reason'] if result['reason'] else ''} "
                      f"(see {run_dir}/status.json, {train_log})")
    return 128 + signum if state == "interrupted" else EXIT[state]


def _ended_at(cfg: Settings, layout, meta: dict, train_log: str,
              reached: Tuple[str, str]) -> int:
    """A run whose checkpoint_last.pt is at its limit already (REACHED: ``limit_reached``'s;
    META holds its updates): its status as for a run that ended there, from fairseq's own
    lines in the run's log (every attempt's, so that one that failed before its first update
    does not hide the last validation)."""
    run_dir, name = paths(cfg)["RUN_DIR"], cfg["RUN_NAME"]
    limit, where = reached
    log(cfg, "train", f"{name}: checkpoint_last.pt is at {where}, {limit}={cfg[limit]}: "
                      f"nothing more to train (set {limit} higher to train on)")
    if not layout.is_rank0:
        return 0
    text = open(train_log, encoding="utf-8", errors="replace").read() \
        if os.path.isfile(train_log) else ""
    result = classify(text, 0, _vocab_size(paths(cfg)["BIN"]), cfg.int("WARMUP"))
    write_record(os.path.join(run_dir, "status.json"), "status",
                 {**meta, **(_status(run_dir) or {}), **result,
                  "num_updates": meta["num_updates"]})
    state = result["status"]
    log(cfg, "train", f"{name}: {state.upper() if state != 'ok' else state}"
                      f"{': ' + result['reason'] if result['reason'] else ''} (from {train_log}; "
                      f"see {run_dir}/status.json)")
    return EXIT[state]


def evaluate(cfg: Settings, env: Mapping[str, str], dry_run: bool = False) -> int:
    where = paths(cfg)
    run_dir, name = where["RUN_DIR"], cfg["RUN_NAME"]
    command = evaluate_command(cfg, dry_run=dry_run)
    if dry_run:
        print(shlex.join(command))
        return 0
    data_otherwise(cfg)  # it decodes data/bin and scores against data/raw
    status = _readable_status(run_dir)  # an unreadable one is that, not "not trained"
    if not status or status.get("status") != "ok":
        raise SettingError(f"{name} has not trained successfully (no ok status in "
                           f"{run_dir}/status.json); run train.sh first")
    refuse_too_long_to_evaluate(cfg)  # a test pair fairseq-generate would refuse at the end
    # the run's lock before anything is written: a second evaluation (or a training) is
    # refused here, with the first one's records and log untouched; the evaluation inherits it
    with RunLock(run_dir, step="evaluate") as lock:
        for directory in (where["CHECKPOINTS"], where["BIN"], where["RAW"]):
            refuse_links_within(directory)  # read by name, as training's (evaluate.py too)
        return _evaluate_locked(cfg, env, command, lock)


def _evaluate_locked(cfg: Settings, env: Mapping[str, str], command: List[str],
                     lock: RunLock) -> int:
    """``evaluate`` of a run whose directory this process holds."""
    from ..evaluation.evaluate import up_to_date

    run_dir, name = paths(cfg)["RUN_DIR"], cfg["RUN_NAME"]
    result = os.path.join(run_dir, "eval", "eval.json")
    if up_to_date(run_dir, command[3:]):  # command: python -m MODULE ARGV
        log(cfg, "evaluate", f"{name} already evaluated with these checkpoints and settings: "
                             f"{result}")
        return 0
    write_record(os.path.join(run_dir, "evaluate.config.json"), "evaluate-config",
                 {"step": "evaluate", "dataset": cfg.dataset, "settings": cfg.as_json(),
                  "command": command})
    log(cfg, "evaluate", f"{name}: average the last {cfg['AVERAGE_LAST']} checkpoints, decode "
                         f"(beam {cfg['BEAM']}, lenpen {cfg['LENPEN']}), score")
    evaluate_log = os.path.join(run_dir, "evaluate.log")
    open_no_follow(evaluate_log, "w").close()

    def echo(line):
        if line.startswith(runlog.DECODING):  # evaluate.py's progress, as training's
            log(cfg, "evaluate", f"{name}: {line[len(runlog.DECODING):].rstrip()}")
        elif "sacreBLEU" in line:
            print(line.rstrip(), file=sys.stderr, flush=True)

    held = [*command[:3], "--lock-fd", str(lock.fd), *command[3:]]
    code, signum = run_forwarding(held, env, [evaluate_log], echo, pass_fds=(lock.fd,))
    if signum:
        log(cfg, "evaluate", f"{name}: stopped by {signal.Signals(signum).name}; run evaluate.sh "
                             f"again to resume (finished directions are kept)")
        return 128 + signum
    if code != 0:
        log(cfg, "evaluate", f"evaluation failed; see {run_dir}/evaluate.log")
        return 1
    log(cfg, "evaluate", f"{name}: results in {result}")
    return 0


def results_dir(dataset: str, where: Mapping[str, str]) -> str:
    """The sweep's ``$WORK/results``, created and marked by the recipes; one they did not create
    (a user's own results/, a link) is refused, never written over."""
    results = where["RESULTS"]
    if os.path.lexists(results) and (os.path.islink(results) or not os.path.isdir(results)
                                     or not is_ours(results)):
        raise SettingError(f"{results} exists and the recipes did not create it (no {MARKER} "
                           f"in it): the table is not written over it. Move it away and run the "
                           f"sweep again (finished runs are kept), or draw the table elsewhere: "
                           f"python -m deepnet_fairseq.recipes.reporting.report "
                           f"--dataset {dataset} --runs {where['RUNS_DIR']} --out DIR")
    return make_dirs(results)


def sweep_specs(cfg: Settings) -> List[Tuple[str, str, str, List[str]]]:
    """(method, encoder layers, decoder layers, KEY=VALUE overrides) of every run, each checked
    as a ``RUNS`` entry is (a known method, depths of at least 1), whichever way it was given."""
    if cfg.get("RUNS"):
        return [check_run_entry(entry) for entry in cfg["RUNS"].split()]
    origin = (f"METHODS (from {cfg.sources.get('METHODS')}) x DEPTHS (from "
              f"{cfg.sources.get('DEPTHS')})")
    return [check_run_entry(f"{method}:{n}:{n}", f"{origin}: {method} x {n}")
            for method in cfg.words("METHODS") for n in cfg.ints("DEPTHS")]


def _run_spec(cfg: Settings, env: Mapping[str, str], method: str, n: str, m: str,
              overrides: List[str], name: str) -> Settings:
    """One run's settings, resolved from the sweep's inputs with its entry on top (each value
    recorded as coming from that entry), and its training command built as a dry run, so that
    what the command refuses (a TRAIN_ARGS option the recipe sets) is refused here."""
    source = (f"sweep RUNS entry {':'.join([method, n, m, *overrides])}" if cfg.get("RUNS")
              else f"sweep METHODS x DEPTHS {method} x {n}")
    run = {**{key: value for key, _, value in (kv.partition("=") for kv in overrides)},
           "METHOD": method, "ENC_LAYERS": n, "DEC_LAYERS": m, "RUN_NAME": name,
           "RUN_LABEL": run_label(method, overrides)}
    run_cfg = resolve(cfg.dataset, env, cfg.repo, given=cfg.given,
                      run={key: (value, source) for key, value in run.items()})
    train_command(run_cfg, plan_layout(run_cfg, env), method_args(run_cfg),
                  task_args(run_cfg, dry_run=True))
    return run_cfg


def sweep(cfg: Settings, env: Mapping[str, str], dry_run: bool = False) -> int:
    """Train and evaluate every run, going on past failed or diverged ones; then the table.

    Each run's settings are resolved from the sweep's own inputs (the environment, a config
    file's settings) with the run's entry on top (``_run_spec``), every run's before the first
    trains: a setting that is wrong for any run stops the sweep before it writes anything. The
    runs are trained here, in this process: the same ``train`` and ``evaluate`` as train.sh and
    evaluate.sh. An interrupted run stops the sweep (the scheduler is stopping it too);
    re-running it skips finished runs.
    """
    where = paths(cfg)
    specs = sweep_specs(cfg)
    if not specs:
        raise SettingError("nothing to run: set METHODS and DEPTHS, or RUNS")
    names = [run_name(m, n, d, o) for m, n, d, o in specs]
    log(cfg, "sweep", f"{len(specs)} run(s): {' '.join(names)}")
    run_cfgs, problems = [], []
    for (method, n, m, overrides), name in zip(specs, names):
        try:
            run_cfgs.append(_run_spec(cfg, env, method, n, m, overrides, name))
        except SettingError as err:
            problems.append(f"{name}: {err}")
    if problems:
        raise SettingError("the sweep trains nothing until every run's settings are right:\n"
                           + "\n".join(problems))
    if dry_run:
        for name in names:
            state = (_status(os.path.join(where["RUNS_DIR"], name)) or {}).get("status", "new")
            print(f"{name}: {state}")
        return 0
    if not os.path.isfile(os.path.join(where["BIN"], ".done")):
        raise SettingError(f"no prepared data in {where['BIN']}; {prepare_first(cfg)}")
    data_otherwise(cfg)  # before any run: each would be refused alike
    write_record(os.path.join(where["WORK"], "sweep.config.json"), "sweep-config",
                 {"step": "sweep", "dataset": cfg.dataset, "settings": cfg.as_json(),
                  "runs": names})
    for (method, n, m, overrides), name, run_cfg in zip(specs, names, run_cfgs):
        label = run_label(method, overrides)
        try:
            code = train(run_cfg, env)
        except (SettingError, Busy, NotOurs) as err:
            # stopped before training (a bad setting for this run, a run held elsewhere)
            log(cfg, "sweep", f"{name}: failed before training: {err}; going on")
            # a run without a status gets one; one whose status cannot be read keeps it
            # (train's refusal names it)
            if not isinstance(err, Busy) and not os.path.lexists(
                    os.path.join(where["RUNS_DIR"], name, "status.json")):
                write_record(os.path.join(make_dirs(os.path.join(where["RUNS_DIR"], name)),
                                          "status.json"), "status",
                             {"dataset": cfg.dataset, "method": method, "encoder_layers": int(n),
                              "decoder_layers": int(m), "label": label, "status": "failed",
                              "reason": f"stopped before training: {err}"})
            continue
        if code >= 128:
            log(cfg, "sweep", f"{name}: interrupted; stopping the sweep (re-run it to resume)")
            return code
        if code == 0:
            try:
                code = evaluate(run_cfg, env)
            except (SettingError, Busy) as err:  # Busy: another process holds the run
                log(cfg, "sweep", f"{name}: not evaluated: {err}; going on")
                continue
            if code >= 128:
                return code
            if code:
                log(cfg, "sweep", f"{name}: evaluation failed (see {where['RUNS_DIR']}/{name}/"
                                  "evaluate.log); going on")
        else:
            log(cfg, "sweep", f"{name}: not evaluated "
                              f"({'diverged' if code == EXIT['diverged'] else 'failed'}); going on")
    from ..reporting.report import main as report_main

    results_dir(cfg.dataset, where)
    # runs that trained but stayed at the source-blind loss are marked, where BIN gives it
    stalled = ["--data", where["BIN"]] if cfg.declaration.task.source_blind_baseline else []
    # --force: the results directory is the sweep's own (made and marked above), its tables
    # replaced by each sweep
    report_main(["--dataset", cfg.dataset, "--runs", where["RUNS_DIR"], "--out", where["RESULTS"],
                 "--force", *stalled])
    return 0
