"""The evaluate step of a trained run (evaluate.sh, the sweep): refuse what cannot be evaluated
(no ok training, other data, a test pair too long), take the run's lock, and run the
evaluation (``evaluate.py``: average, decode, score) as a process holding it, its progress on
stderr and its output in ``evaluate.log``. Exit status: 0, 1 failed, 128 + signal."""

import os
import shlex
import signal
import sys
from typing import List, Mapping

from ..base.console import log
from ..data.checks import data_otherwise
from ...processes import EXIT, interrupted, run_forwarding
from ..run import runlog
from ..run.commands import evaluate_command
from ..run.lengths import refuse_too_long_to_evaluate
from ..run.runner import readable_status
from ..spec.paths import paths
from ..spec.settings import SettingError, Settings
from ...storage.directories import RunLock
from ...storage.fileio import open_no_follow, refuse_links_within
from ...storage.records import write_record
from .evaluate import up_to_date


def evaluate(cfg: Settings, env: Mapping[str, str], dry_run: bool = False) -> int:
    where = paths(cfg)
    run_dir, name = where.run_dir, cfg.text.run.run_name
    command = evaluate_command(cfg, dry_run=dry_run)
    if dry_run:
        print(shlex.join(command))
        return 0
    data_otherwise(cfg)  # it decodes data/bin and scores against data/raw
    status = readable_status(run_dir)  # an unreadable one is that, not "not trained"
    if not status or status.get("status") != "ok":
        raise SettingError(f"{name} has not trained successfully (no ok status in "
                           f"{run_dir}/status.json); run train.sh first")
    refuse_too_long_to_evaluate(cfg)  # a test pair fairseq-generate would refuse at the end
    # the run's lock before anything is written: a second evaluation (or a training) is
    # refused here, with the first one's records and log untouched; the evaluation inherits it
    with RunLock(run_dir, step="evaluate") as lock:
        for directory in (where.checkpoints, where.bin, where.raw):
            refuse_links_within(directory)  # read by name, as training's (evaluate.py too)
        return _evaluate_locked(cfg, env, command, lock)


def _evaluate_locked(cfg: Settings, env: Mapping[str, str], command: List[str],
                     lock: RunLock) -> int:
    """``evaluate`` of a run whose directory this process holds."""
    run_dir, name = paths(cfg).run_dir, cfg.text.run.run_name
    result = os.path.join(run_dir, "eval", "eval.json")
    if up_to_date(run_dir, command[3:]):  # command: python -m MODULE ARGV
        log(cfg, "evaluate", f"{name} already evaluated with these checkpoints and settings: "
                             f"{result}")
        return 0
    write_record(os.path.join(run_dir, "evaluate.config.json"), "evaluate-config",
                 {"step": "evaluate", "dataset": cfg.dataset, "settings": cfg.as_json(),
                  "command": command})
    log(cfg, "evaluate", f"{name}: average the last {cfg.text.optim.average_last} checkpoints, "
                         f"decode "
                         f"(beam {cfg.text.eval.beam}, lenpen {cfg.text.eval.lenpen}), score")
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
        return interrupted(signum)
    if code != 0:
        log(cfg, "evaluate", f"evaluation failed; see {run_dir}/evaluate.log")
        return EXIT["failed"]
    log(cfg, "evaluate", f"{name}: results in {result}")
    return 0
