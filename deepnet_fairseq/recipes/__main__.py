"""The recipes' command line: ``python -m deepnet_fairseq.recipes [--repo REPO] DATASET STEP``,
or ``python -m deepnet_fairseq.recipes quickstart [--dry-run]`` (``quickstart.py``: the wmt17
recipe at the quickstart size, every step).

DATASET is one declared in ``datasets/`` (``--help`` lists them: wmt17, opus100, iwslt14,
parallel); STEP is prepare (``prepare``: download or local text, cleaning, sentencepiece,
fairseq-preprocess), train, evaluate or sweep (``runner``). The
scripts in scripts/ hand over to it; ``--dry-run`` prints the resolved settings, the process
layout, the memory plan and the command, and runs nothing. Errors end in one line: a bad setting or a directory
the recipes may not touch (exit status 2), a full disk or an unwritable path (1).
"""

import argparse
import os
import signal
import sys

from ..processes import Interrupted, signals_interrupt
from . import prepare, runner
from .launch import print_settings
from .datasets import DATASETS
from .settings import SettingError, help_text, home, resolve
from ..storage.directories import Busy, NotOurs
from ..storage.fileio import describe_os_error


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deepnet_fairseq.recipes",
                                     description=__doc__, epilog=help_text(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", default=home(),
                        help="where runs/ goes unless DEEPNET_WORK says: the checkout this "
                             "package is in, or the current directory for an installed copy")
    parser.add_argument("dataset", choices=list(DATASETS))
    parser.add_argument("step", choices=("prepare", "train", "evaluate", "sweep"))
    parser.add_argument("--dry-run", action="store_true",
                        help="print the settings, layout and command; run nothing")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["quickstart"]:  # all of its steps, with its own sizes (quickstart.py)
        from . import quickstart

        return quickstart.main(argv[1:])
    args = parser.parse_args(argv)
    try:
        cfg = resolve(args.dataset, os.environ, args.repo)
        print_settings(cfg, args.step)
        if args.step == "prepare":
            if args.dry_run:
                return 0
            with signals_interrupt():  # a killed step removes its temporaries
                return prepare.prepare(cfg)
        return {"train": runner.train, "evaluate": runner.evaluate,
                "sweep": runner.sweep}[args.step](cfg, os.environ, args.dry_run)
    except (SettingError, Busy, NotOurs) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a full disk, a read-only directory: one line, no traceback
        print(f"error: {describe_os_error(err)}", file=sys.stderr)
        return 1
    except (Interrupted, KeyboardInterrupt) as err:
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        print(f"{args.dataset}/{args.step} stopped by {signal.Signals(signum).name}; run it "
              "again to resume", file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
