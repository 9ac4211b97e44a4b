"""The recipes' command line: ``python -m deepnet_fairseq.recipes [--repo REPO] DATASET STEP``,
``python -m deepnet_fairseq.recipes run FILE.toml [--dry-run]`` (an experiment written as a file,
``configfile.py``: its dataset, its steps in order, its settings; ``configs/`` holds the ones
``results/`` reports), or ``python -m deepnet_fairseq.recipes quickstart [--dry-run]``
(``quickstart.py``: the wmt17 recipe at the quickstart size, every step).

DATASET is one declared in ``datasets/`` (``--help`` lists them: wmt17, opus100, iwslt14,
parallel); STEP is prepare (``prepare``: download or local text, cleaning, sentencepiece,
fairseq-preprocess), train, evaluate or sweep (``pipeline``). The
scripts in scripts/ hand over to it; ``--dry-run`` prints the resolved settings, the process
layout, the memory plan and the command, and runs nothing. Errors end in one line: a bad setting or a directory
the recipes may not touch, a record this code cannot read or replace (exit status 2), a full disk or an unwritable path (1).
"""

import glob
import os
import signal
import sys

from ..processes import EXIT, Interrupted, interrupted
from . import cli_parser, pipeline
from .spec import configfile
from .spec.paths import paths
from .datasets import DATASETS
from .spec.settings import SETTINGS, SettingError, help_text, home, print_settings, resolve
from ..storage.directories import Busy, NotOurs
from ..storage.fileio import (RecordError, add_force_argument, check_tool_output,
                              describe_os_error, one_line_os_errors)


def run_step(dataset: str, step: str, repo: str, dry_run: bool, given=None,
             save_config: str = "", force: bool = False) -> int:
    cfg = resolve(dataset, os.environ, repo, given=given)
    print_settings(cfg, step)
    if not save_config:
        return pipeline.STEPS[step](cfg, dry_run)
    # what this command was given, not what the presets add; written once the step has
    # accepted it: a command the step refuses (its plan, its inputs) leaves no file that would
    # only be refused again when run
    check_tool_output(save_config, _read_by(cfg), force, "--save-config")
    accepted = True
    try:
        return pipeline.STEPS[step](cfg, dry_run)
    except (SettingError, Busy, NotOurs):
        accepted = False
        raise
    finally:
        if accepted:
            configfile.save(save_config, dataset, [step], {
                name: cfg[name] for name, source in cfg.sources.items()
                if source.startswith("environment") and not SETTINGS[name].prefix_only})
            print(f"wrote {save_config}: run it with python -m deepnet_fairseq.recipes run "
                  f"{save_config}", file=sys.stderr)


def _read_by(cfg) -> list:
    """What a step reads or keeps, which --save-config may not overwrite: every path setting
    (a text setting's PATH.SRC and PATH.TGT too) and the recipes' directories -- not WORK
    itself, which may be the checkout where configs/ lives."""
    where = paths(cfg)
    found = [where.data_dir, where.runs_dir, where.results]
    for name, setting in SETTINGS.items():
        value = cfg.get(name) if setting.kind == "path" and name != "WORK" else None
        if value:
            found += [value, *glob.glob(glob.escape(value) + ".*")]
    return found


def run_file(argv) -> int:
    parser = cli_parser("python -m deepnet_fairseq.recipes run", configfile.__doc__)
    parser.add_argument("file", help="an experiment as a TOML file, e.g. configs/quickstart.toml")
    parser.add_argument("--repo", default=home(), help="as for DATASET STEP")
    parser.add_argument("--dry-run", action="store_true",
                        help="every step as a dry run: settings, layout and command; run nothing")
    args = parser.parse_args(argv)

    def steps() -> int:
        config = configfile.load(args.file)
        given = {name: (value, f"config {args.file}") for name, value in config.settings.items()}
        for step in config.steps:
            code = run_step(config.dataset, step, args.repo, args.dry_run, given)
            if code:
                return code
        return 0

    return _one_line_errors(f"run {args.file}", steps)


@one_line_os_errors
def main(argv=None) -> int:
    parser = cli_parser("python -m deepnet_fairseq.recipes", __doc__, epilog=help_text())
    parser.add_argument("--repo", default=home(),
                        help="where runs/ goes unless DEEPNET_WORK says: the checkout this "
                             "package is in, or the current directory for an installed copy")
    parser.add_argument("dataset", choices=list(DATASETS))
    parser.add_argument("step", choices=configfile.STEPS)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the settings, layout and command; run nothing")
    parser.add_argument("--save-config", metavar="FILE.toml", default="",
                        help="also write the settings this command was given (the environment's) "
                             "as an experiment file, runnable by `run FILE.toml`")
    add_force_argument(parser, "an existing --save-config file")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["quickstart"]:  # all of its steps, with its own sizes (quickstart.py)
        from . import quickstart

        return quickstart.main(argv[1:])
    if argv[:1] == ["run"]:
        return run_file(argv[1:])
    args = parser.parse_args(argv)
    return _one_line_errors(f"{args.dataset}/{args.step}", lambda: run_step(
        args.dataset, args.step, args.repo, args.dry_run, save_config=args.save_config,
        force=args.force))


def _one_line_errors(what: str, work) -> int:
    """WORK's exit status; its refusals and disk errors as one line, its interruption as the
    shell's status for the signal."""
    try:
        return work()
    except (SettingError, Busy, NotOurs, RecordError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT["refused"]
    except OSError as err:  # a full disk, a read-only directory: one line, no traceback
        print(f"error: {describe_os_error(err)}", file=sys.stderr)
        return EXIT["failed"]
    except (Interrupted, KeyboardInterrupt) as err:
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        print(f"{what} stopped by {signal.Signals(signum).name}; run it again to resume",
              file=sys.stderr)
        return interrupted(signum)


if __name__ == "__main__":
    sys.exit(main())
