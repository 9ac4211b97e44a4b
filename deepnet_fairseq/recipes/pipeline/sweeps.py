"""The sweep: every run of a config (METHODS x DEPTHS, or RUNS), each resolved and checked
before the first trains, then trained and evaluated in this process (the same steps as
train.sh and evaluate.sh), going on past a failed, diverged or source-blind run; then the
results table."""

import os
from typing import List, Mapping, Tuple

from ..base.console import log
from ..data.checks import data_otherwise
from ..evaluation.step import evaluate
from ..reporting.report import main as report_main
from ..run.commands import method_args, prepare_first, task_args, train_command
from ..run.layout import plan_layout
from ..run.runner import status_of, train
from ...processes import ENDING, signal_of
from ..spec.paths import RunPaths, paths
from ..spec.settings import SettingError, Settings, check_run_entry, resolve, run_label, run_name
from ...storage.directories import MARKER, Busy, NotOurs, is_ours, make_dirs
from ...storage.records import write_record


def results_dir(dataset: str, where: RunPaths) -> str:
    """The sweep's ``$WORK/results``, created and marked by the recipes; one they did not create
    (a user's own results/, a link) is refused, never written over."""
    results = where.results
    if os.path.lexists(results) and (os.path.islink(results) or not os.path.isdir(results)
                                     or not is_ours(results)):
        raise SettingError(f"{results} exists and the recipes did not create it (no {MARKER} "
                           f"in it): the table is not written over it. Move it away and run the "
                           f"sweep again (finished runs are kept), or draw the table elsewhere: "
                           f"python -m deepnet_fairseq.recipes.reporting.report "
                           f"--dataset {dataset} --runs {where.runs_dir} --out DIR")
    return make_dirs(results)


def sweep_specs(cfg: Settings) -> List[Tuple[str, str, str, List[str]]]:
    """(method, encoder layers, decoder layers, KEY=VALUE overrides) of every run, each checked
    as a ``RUNS`` entry is (a known method, depths of at least 1), whichever way it was given."""
    if cfg.optional.sweep.runs:
        return [check_run_entry(entry) for entry in cfg.text.sweep.runs.split()]
    origin = (f"METHODS (from {cfg.sources.get('METHODS')}) x DEPTHS (from "
              f"{cfg.sources.get('DEPTHS')})")
    return [check_run_entry(f"{method}:{n}:{n}", f"{origin}: {method} x {n}")
            for method in cfg.sweep.methods for n in cfg.sweep.depths]


def _run_spec(cfg: Settings, env: Mapping[str, str], method: str, n: str, m: str,
              overrides: List[str], name: str) -> Settings:
    """One run's settings, resolved from the sweep's inputs with its entry on top (each value
    recorded as coming from that entry), and its training command built as a dry run, so that
    what the command refuses (a TRAIN_ARGS option the recipe sets) is refused here."""
    source = (f"sweep RUNS entry {':'.join([method, n, m, *overrides])}"
              if cfg.optional.sweep.runs else f"sweep METHODS x DEPTHS {method} x {n}")
    run = {**{key: value for key, _, value in (kv.partition("=") for kv in overrides)},
           "METHOD": method, "ENC_LAYERS": n, "DEC_LAYERS": m, "RUN_NAME": name,
           "RUN_LABEL": run_label(method, overrides)}
    run_cfg = resolve(cfg.dataset, env, cfg.repo, given=cfg.given,
                      run={key: (value, source) for key, value in run.items()})
    train_command(run_cfg, plan_layout(run_cfg, env), method_args(run_cfg),
                  task_args(run_cfg, dry_run=True))
    return run_cfg


def sweep(cfg: Settings, env: Mapping[str, str], dry_run: bool = False) -> int:
    """Train and evaluate every run, going on past failed, diverged or source-blind ones; then
    the table.

    Each run's settings are resolved from the sweep's own inputs (the environment, a config
    file's settings) with the run's entry on top (``_run_spec``), every run's before the first
    trains: a setting that is wrong for any run stops the sweep before it writes anything. The
    runs are trained here, in this process: the same ``train`` and ``evaluate`` as train.sh and
    evaluate.sh. An interrupted run stops the sweep (the scheduler is stopping it too);
    re-running it skips finished runs.
    """
    where = paths(cfg)
    specs, names, run_cfgs = _resolve_runs(cfg, env)
    if dry_run:
        for name in names:
            state = (status_of(os.path.join(where.runs_dir, name)) or {}).get("status", "new")
            print(f"{name}: {state}")
        return 0
    if not os.path.isfile(os.path.join(where.bin, ".done")):
        raise SettingError(f"no prepared data in {where.bin}; {prepare_first(cfg)}")
    data_otherwise(cfg)  # before any run: each would be refused alike
    write_record(os.path.join(where.work, "sweep.config.json"), "sweep-config",
                 {"step": "sweep", "dataset": cfg.dataset, "settings": cfg.as_json(),
                  "runs": names})
    for spec, name, run_cfg in zip(specs, names, run_cfgs):
        code = _train_and_evaluate(cfg, env, spec, name, run_cfg)
        if signal_of(code):
            return code
    _report(cfg, where)
    return 0


def _resolve_runs(cfg: Settings, env: Mapping[str, str]):
    """(entries, run names, run settings) of the sweep, every run's settings resolved and
    checked before any trains; the problems of all of them in one refusal."""
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
    return specs, names, run_cfgs


def _train_and_evaluate(cfg: Settings, env: Mapping[str, str], spec, name: str,
                        run_cfg: Settings) -> int:
    """One run of the sweep: its exit status when a signal stopped it (the sweep stops too),
    else 0 whatever became of it (failed, diverged, source-blind, not evaluated: logged, and
    the sweep goes on)."""
    method, n, m, overrides = spec
    runs_dir = paths(cfg).runs_dir
    try:
        code = train(run_cfg, env)
    except (SettingError, Busy, NotOurs) as err:
        # stopped before training (a bad setting for this run, a run held elsewhere)
        log(cfg, "sweep", f"{name}: failed before training: {err}; going on")
        # a run without a status gets one; one whose status cannot be read keeps it
        # (train's refusal names it)
        if not isinstance(err, Busy) and not os.path.lexists(
                os.path.join(runs_dir, name, "status.json")):
            write_record(os.path.join(make_dirs(os.path.join(runs_dir, name)), "status.json"),
                         "status",
                         {"dataset": cfg.dataset, "method": method, "encoder_layers": int(n),
                          "decoder_layers": int(m), "label": run_label(method, overrides),
                          "status": "failed", "reason": f"stopped before training: {err}"})
        return 0
    if signal_of(code):
        log(cfg, "sweep", f"{name}: interrupted; stopping the sweep (re-run it to resume)")
        return code
    if code:
        log(cfg, "sweep", f"{name}: not evaluated ({ENDING.get(code, 'failed')}); going on")
        return 0
    try:
        code = evaluate(run_cfg, env)
    except (SettingError, Busy) as err:  # Busy: another process holds the run
        log(cfg, "sweep", f"{name}: not evaluated: {err}; going on")
        return 0
    if code and not signal_of(code):
        log(cfg, "sweep", f"{name}: evaluation failed (see {runs_dir}/{name}/evaluate.log); "
                          "going on")
    return code if signal_of(code) else 0


def _report(cfg: Settings, where) -> None:
    """The sweep's results table, in its own results directory."""
    results_dir(cfg.dataset, where)
    # runs that trained but stayed at the source-blind loss are marked, where BIN gives it
    stalled = ["--data", where.bin] if cfg.declaration.task.source_blind_baseline else []
    # --force: the results directory is the sweep's own (made and marked above), its tables
    # replaced by each sweep
    report_main(["--dataset", cfg.dataset, "--runs", where.runs_dir, "--out", where.results,
                 "--force", *stalled])
