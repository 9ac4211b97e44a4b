"""The recipes' progress lines on stderr: ``[DATASET/STEP HH:MM:SS] message`` (UTC), one
format for every step, which the tests and the users' log scrapers read."""

import datetime
import sys


def log(cfg, step: str, message: str) -> None:
    """A progress line of STEP for CFG's dataset (any object with ``dataset``: the settings)."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
    print(f"[{cfg.dataset}/{step} {now}] {message}", file=sys.stderr, flush=True)
