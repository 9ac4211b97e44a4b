"""The train step: attempts, live logs, signals, statuses (the evaluate step:
``evaluation/step.py``; the sweep: ``pipeline/sweeps.py``).

A training run lives in ``$WORK/runs/<run>/``. Each launch is one *attempt*:

* its output goes, line by line while it runs, to ``attempts/attempt-<N>.log`` and to
  ``train.log`` (all attempts, each after a header line); on node k > 0 of a multi-node
  torchrun run to ``attempts/attempt-<N>.node<k>.log`` and ``train.node<k>.log`` instead;
* global rank 0 alone writes ``config.json`` (settings, layout, command, the machine:
  ``machine.describe``), ``command.sh`` and ``status.json``: ``running`` while it trains, then
  ``ok`` / ``diverged`` / ``failed`` from its own log (``fairseq_log.classify``), ``diverged``
  or ``source-blind`` from the watch that stopped it (``runlog``), or ``interrupted`` when the
  launch received SIGTERM, SIGINT or SIGHUP (a scheduler's time limit, Ctrl-C), which it passes
  on to the processes;
* exit status: ``processes.EXIT`` (0 ok, 1 failed, 3 diverged, 4 source-blind), 128 + signal
  number when interrupted.

The next launch of a run that has not finished (``processes.FINISHED``) resumes from
``checkpoint_last.pt`` (fairseq's default ``--restore-file``; an unreadable one -- a copy
truncated by the interruption, a corrupt file -- is first replaced by the newest readable
update checkpoint); ``RETRY=1`` trains a finished run again.
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
from ...processes import EXIT, FINISHED, interrupted, run_forwarding
from ..base.console import log
from ..base.machine import cores, describe, machine_memory_gb
from . import runlog
from .lengths import refuse_too_long, train_args
from .. import write_atomically
from ...storage.records import read_record, read_status, record_text, write_record
from .commands import (PER_TENSOR_OPTIONS, layers_lr_args, method_args, peak_lr,
                       prepare_first, task_args, train_command)
from .layout import machine_problem, plan_layout
from ..data.checks import data_otherwise
from ..spec.paths import paths
from ..spec.settings import DATA, TRAINED, SettingError, Settings, affecting, changed
from ...storage.fileio import (RecordError, copy_file, describe_os_error, move, open_no_follow,
                               overwrite_in_place, refuse_links_within, remove_file)
from ...storage.directories import LOCK, MARKER, RunLock, is_ours, make_dirs

PROGRESS_EVERY_S = runlog.PROGRESS_EVERY_S  # a training's progress line this often


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _append(path: str, text: str) -> None:
    with open_no_follow(path, "a") as out:
        out.write(text)


def status_of(run_dir: str) -> Optional[dict]:
    """The run's status record (``read_status``: a killed launcher's ``running`` is
    ``interrupted``); None if it has none or it cannot be read (it is rewritten)."""
    try:
        return read_status(run_dir)
    except (OSError, RecordError):
        return None


def readable_status(run_dir: str) -> Optional[dict]:
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
            "exists: moved to checkpoint_last.pt.unreadable, training starts again from update 0")


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
    if cfg.optim.max_update and updates >= cfg.optim.max_update:
        return "MAX_UPDATE", f"update {updates}"
    if cfg.optim.max_epoch and epochs >= cfg.optim.max_epoch:
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


# ---- steps ----------------------------------------------------------------------------------

def train(cfg: Settings, env: Mapping[str, str], dry_run: bool = False) -> int:
    where = paths(cfg)
    run_dir, name = where.run_dir, cfg.text.run.run_name
    layout = plan_layout(cfg, env)
    command = train_command(cfg, layout, method_args(cfg), task_args(cfg, dry_run))
    run, model = cfg.text.run, cfg.text.model
    log(cfg, "train", f"{name}: {run.enc_layers}L-{run.dec_layers}L {run.method}, "
                      f"{model.embed_dim}-{model.ffn_dim}-{model.heads}, {layout.summary()}")
    if cfg.optim.lr_base_layers:
        rate = (f"peak lr {peak_lr(cfg)}" if cfg.optim.lr_depth_scope == "all" else
                f"the layers' lr x {layers_lr_args(cfg)[1]}")
        log(cfg, "train", f"{name}: {rate}, LR={cfg.text.optim.lr} moved from "
                          f"{cfg.text.optim.lr_base_layers} layers per side by (base / L)^"
                          f"{cfg.text.optim.lr_depth_power}")
    if "--fp16-no-flatten-grads" in command and any(o in command for o in PER_TENSOR_OPTIONS):
        log(cfg, "train", f"{cfg.text.run.method} scales some parameters' steps, which needs the "
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
    if not os.path.isfile(os.path.join(where.bin, ".done")):
        raise SettingError(f"no prepared data in {where.bin}; {prepare_first(cfg)}")
    data_otherwise(cfg)
    if os.path.isdir(run_dir) and not is_ours(run_dir):
        raise SettingError(f"{run_dir} exists and the recipes did not create it (no {MARKER} "
                           "in it): refusing to write into it. Choose another RUN_NAME, or move "
                           "the directory away")
    problem = trained_otherwise(cfg, run_dir)  # before a finished run is reported as this one
    if problem:
        raise SettingError(problem)
    status = readable_status(run_dir)  # the one an attempt replaces: before anything is written
    if not cfg.run.retry and status and status.get("status") in FINISHED:
        log(cfg, "train", f"{name} already finished ({status['status']}); RETRY=1 to train again")
        return EXIT[status["status"]]
    refuse_too_long(cfg, command)  # a valid or test pair fairseq would refuse after the work

    make_dirs(run_dir)
    with RunLock(run_dir, f"{LOCK}{layout.node_suffix}", "train") as lock:
        # fairseq reads and writes the run's files (checkpoint_last.pt...) and the data by name: a
        # link in them would resume from, and overwrite, what it points to. Asked under the lock, so
        # that no launch of the recipes changes the run between the answer and fairseq's start
        for directory in (run_dir, where.bin):
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
    return (f"{cfg.text.run.run_name} was trained with other settings ({'; '.join(different)}; see "
            f"{path}): resuming or reusing it would mix two trainings under one record. Train "
            f"these settings under another RUN_NAME, or move {run_dir} away to train it anew")


def checkpoint_otherwise(cfg: Settings, command: List[str]) -> Optional[str]:
    """Why the run's checkpoint_last.pt, which fairseq would resume, is not a checkpoint of
    this run (``not_the_runs``); None where there is none, it cannot be read (the attempt
    repairs that) or it is the run's."""
    where = paths(cfg)
    last = os.path.join(where.checkpoints, "checkpoint_last.pt")
    if not os.path.isfile(last):
        return None
    problem = not_the_runs(last, command, where.bin)
    if not problem:
        return None
    return (f"{problem} of {cfg.text.run.run_name}: resuming it would train another model "
            f"under this run's name and records. Move it away (the run then trains from "
            f"update 0), or put back the run's own (one of its checkpoint_E_U.pt)")


def not_the_runs(checkpoint: str, command: List[str], bin_dir: str) -> Optional[str]:
    """How CHECKPOINT is not a checkpoint of the run trained by COMMAND on BIN_DIR: the model
    its options define (``average_checkpoints.model_configuration``: the architecture, depths,
    widths and every method's constants), its seed or its learning rate differ from COMMAND's,
    or its embeddings are not BIN_DIR's dictionaries (the export's check). A file put where a
    run keeps its checkpoints -- another run's -- would otherwise be resumed, averaged and
    scored as the run's. None where it is the run's, or it cannot be read (its readers say)."""
    from ...average_checkpoints import model_configuration
    from ...export import ExportError, check_dictionaries
    from ...storage.checkpoint_io import CheckpointError, read_checkpoint, trained_on

    try:
        state = read_checkpoint(checkpoint, mmap=True)
    except CheckpointError:
        return None
    planned = train_args(command, bin_dir)

    def model(config):  # sharing all embeddings shares the decoder's output too (its build)
        shared = config.get("share_all_embeddings") == "True"
        return {**config, **({"share_decoder_input_output_embed": "True"} if shared else {})}

    ours, theirs = model(model_configuration({"args": planned})), model(model_configuration(state))
    stored = state.get("cfg") or {}
    ours.update(seed=str(planned.seed), lr=str(list(planned.lr)))
    theirs.update(seed=str((stored.get("common") or {}).get("seed")),
                  lr=str(list((stored.get("optimization") or {}).get("lr") or [])))
    different = [f"{name} {theirs[name]} there, {ours[name]} here"
                 for name in sorted(set(ours) & set(theirs)) if ours[name] != theirs[name]]
    try:
        check_dictionaries(state["model"], stored.get("task") or {}, bin_dir, trained_on(state))
    except ExportError as err:
        different.append(str(err).split(" (pass")[0])
    return f"{checkpoint} ({'; '.join(different)}) is not a checkpoint" if different else None


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
    run_dir, name = where.run_dir, cfg.text.run.run_name
    attempts = make_dirs(os.path.join(run_dir, "attempts"))
    # fairseq writes and deletes checkpoints in it: made and marked here first, so that a
    # link planted in its place is refused (make_dirs) rather than followed by fairseq
    make_dirs(where.checkpoints)
    make_dirs(where.tensorboard)  # the same for fairseq's TensorBoard event files
    suffix = layout.node_suffix
    number = _next_attempt(attempts, suffix)
    logs = [os.path.join(attempts, f"attempt-{number}{suffix}.log"),
            os.path.join(run_dir, f"train{suffix}.log")]  # this attempt's, the run's
    meta = {"dataset": cfg.dataset, "method": cfg.text.run.method,
            "encoder_layers": cfg.run.enc_layers, "decoder_layers": cfg.run.dec_layers,
            "label": cfg.text.run.run_label, "seed": cfg.run.seed, "launcher": layout.launcher,
            "world_size": layout.world, "nnodes": layout.nnodes, "update_freq": layout.update_freq,
            "tokens_per_update": layout.tokens_per_update, "attempt": number}
    if layout.is_rank0:
        _clean_up_after_an_interruption(cfg, name, where)
    problem = checkpoint_otherwise(cfg, command)
    if problem:
        raise SettingError(problem)
    updates, epochs = training_done(where.checkpoints)
    reached = limit_reached(cfg, updates, epochs)
    if reached:
        return _ended_at(cfg, layout, {**meta, "attempt": number - 1, "num_updates": updates},
                         logs[1], reached)
    if layout.is_rank0:
        write_record(os.path.join(run_dir, "config.json"), "run-config",
                     {"step": "train", "dataset": cfg.dataset, "settings": cfg.as_json(),
                      "layout": {**asdict(layout), "world": layout.world}, "command": command,
                      # what else moves the figures: another CPU's kernels round otherwise
                      "machine": describe(os.environ)})
        write_atomically(os.path.join(run_dir, "command.sh"), shlex.join(command) + "\n")
        write_record(os.path.join(run_dir, "status.json"), "status",
                     {**meta, "status": "running", "reason": f"attempt {number} started {_now()}"})
    header = (f"{HEADER}{number}{f' (node {layout.node_rank})' if suffix else ''}, "
              f"{_now()}, {socket.gethostname()}: {one_line(shlex.join(command))}\n")
    for path in logs:
        _append(path, header)
    log(cfg, "train", f"{name}: attempt {number}, log {logs[1]} (live)")
    code, signum, stopped = _run_fairseq(cfg, env, command, logs, lock)
    ending = f"signal {signal.Signals(signum).name}" if signum else f"exit code {code}"
    for path in logs:
        _append(path, f"{HEADER}{number} ended {_now()}: {ending}\n")
    if not layout.is_rank0:
        log(cfg, "train", f"{name}: node {layout.node_rank} done ({ending}); rank 0 writes "
                          "the status")
        return interrupted(signum) if signum else (0 if code == 0 else EXIT["failed"])
    return _record_end(cfg, meta, logs, code, signum, stopped)


def _clean_up_after_an_interruption(cfg: Settings, name: str, where) -> None:
    """What an interrupted attempt left: its temporaries removed, an unreadable
    checkpoint_last.pt replaced by the newest readable update checkpoint."""
    for stale in _stale_temporaries(where.run_dir):
        remove_file(stale)
        log(cfg, "train", f"{name}: removed {stale}, left by an interrupted attempt")
    repaired = repair_last_checkpoint(where.checkpoints)
    if repaired:
        log(cfg, "train", f"{name}: {repaired}")


def _run_fairseq(cfg: Settings, env: Mapping[str, str], command: List[str], logs: List[str],
                 lock: RunLock):
    """(exit code, signal, the record of the watch that stopped it or None) of the training
    COMMAND, its output into LOGS line by line, validation lines and a progress line every
    PROGRESS_EVERY_S on stderr."""
    name = cfg.text.run.run_name
    watches = [runlog.DivergenceWatch(_vocab_size(paths(cfg).bin), cfg.optim.warmup,
                                      cfg.run.stop_diverged),
               runlog.SourceBlindWatch(cfg.run.stop_source_blind)]
    with open(logs[1], encoding="utf-8", errors="replace") as handle:  # earlier attempts'
        progress = runlog.Progress(cfg.optim.max_update, earlier=handle.read())

    def echo(line):
        progress.feed(line)
        if "valid on '" in line:
            print("    " + line.rstrip(), file=sys.stderr, flush=True)
        return any([watch.feed(line) for watch in watches])  # a list: every watch sees it

    def every_so_often(done: threading.Event):
        while not done.wait(PROGRESS_EVERY_S):
            log(cfg, "train", f"{name}: {progress.line()}")

    done = threading.Event()
    threading.Thread(target=every_so_often, args=(done,), daemon=True).start()
    try:
        code, signum = run_forwarding(command, env, logs, echo, pass_fds=(lock.fd,))
    finally:
        done.set()
    log(cfg, "train", f"{name}: {progress.line()}")
    return code, signum, next((watch.stopped for watch in watches if watch.stopped), None)


def _record_end(cfg: Settings, meta: dict, logs: List[str], code: int, signum: Optional[int],
                stopped: Optional[dict]) -> int:
    """Rank 0's verdict on the attempt (its own log, or STOPPED: the record of the watch that
    stopped it) into status.json; the step's exit status."""
    where = paths(cfg)
    run_dir = where.run_dir
    with open(logs[0], encoding="utf-8", errors="replace") as handle:
        result = stopped if stopped and not signum else classify(
            handle.read(), code, _vocab_size(where.bin), cfg.optim.warmup,
            signal.Signals(signum).name if signum else None)
    write_record(os.path.join(run_dir, "status.json"), "status", {**meta, **result})
    state = result["status"]
    log(cfg, "train", f"{cfg.text.run.run_name}: {state.upper() if state != 'ok' else state}"
                      f"{': ' + result['reason'] if result['reason'] else ''} "
                      f"(see {run_dir}/status.json, {logs[1]})")
    return interrupted(signum) if state == "interrupted" else EXIT[state]


def _ended_at(cfg: Settings, layout, meta: dict, train_log: str, reached: Tuple[str, str]) -> int:
    """A run whose checkpoint_last.pt is at its limit already (REACHED: ``limit_reached``'s;
    META holds its updates): its status as for a run that ended there, from fairseq's own
    lines in the run's log (every attempt's, so that one that failed before its first update
    does not hide the last validation)."""
    run_dir, name = paths(cfg).run_dir, cfg.text.run.run_name
    limit, where = reached
    log(cfg, "train", f"{name}: checkpoint_last.pt is at {where}, {limit}={cfg[limit]}: "
                      f"nothing more to train (set {limit} higher to train on)")
    if not layout.is_rank0:
        return 0
    text = open(train_log, encoding="utf-8", errors="replace").read() \
        if os.path.isfile(train_log) else ""
    result = classify(text, 0, _vocab_size(paths(cfg).bin), cfg.optim.warmup)
    write_record(os.path.join(run_dir, "status.json"), "status",
                 {**meta, **(status_of(run_dir) or {}), **result,
                  "num_updates": meta["num_updates"]})
    state = result["status"]
    log(cfg, "train", f"{name}: {state.upper() if state != 'ok' else state}"
                      f"{': ' + result['reason'] if result['reason'] else ''} (from {train_log}; "
                      f"see {run_dir}/status.json)")
    return EXIT[state]

