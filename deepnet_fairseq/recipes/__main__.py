"""The recipes' command line: ``python -m deepnet_fairseq.recipes [--repo REPO] DATASET STEP``.

DATASET is wmt17, opus100 or iwslt14; STEP is train, evaluate or sweep (run here, by
``runner``), or prepare (``--shell`` prints the settings as shell assignments for
scripts/*/prepare.sh, which keep the download and binarising steps). The scripts in scripts/
hand over to it; ``--dry-run`` prints the resolved settings, the process layout, the memory
plan and the command, and runs nothing. Errors end in one line: a bad setting or a directory
the recipes may not touch (exit status 2), a full disk or an unwritable path (1).
"""

import argparse
import os
import sys

from . import runner
from .launch import print_settings, shell_assignments
from .settings import DATASETS, SettingError, resolve
from .workdir import Busy, NotOurs, describe_os_error


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deepnet_fairseq.recipes",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), help="the checkout holding configs/ and scripts/")
    parser.add_argument("dataset", choices=DATASETS)
    parser.add_argument("step", choices=("prepare", "train", "evaluate", "sweep"))
    parser.add_argument("--dry-run", action="store_true",
                        help="print the settings, layout and command; run nothing")
    parser.add_argument("--shell", action="store_true",
                        help="prepare: print the settings as bash assignments on stdout")
    args = parser.parse_args(argv)
    try:
        cfg = resolve(args.dataset, os.environ, args.repo)
        print_settings(cfg, args.step)
        if args.step == "prepare":
            if args.shell and not args.dry_run:
                runner.start_prepare(cfg)
                print(shell_assignments(cfg), end="")
            return 0
        return {"train": runner.train, "evaluate": runner.evaluate,
                "sweep": runner.sweep}[args.step](cfg, os.environ, args.dry_run)
    except (SettingError, Busy, NotOurs) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a full disk, a read-only directory: one line, no traceback
        print(f"error: {describe_os_error(err)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
