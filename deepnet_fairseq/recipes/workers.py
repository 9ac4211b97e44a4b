"""The prepare step's parallel stages: independent tasks (one file or one language pair each)
spread over worker processes, their results taken in the tasks' order, so that what is
written and printed is what one process would write and print.

Workers are forked from the prepare process (they share its imports) and stop with it: a
signal that stops the step (SIGTERM, SIGHUP: ``Interrupted``; Ctrl-C) ends the pool before
the step's temporaries are removed, workers ignore Ctrl-C (the parent stops them), and Linux's
parent-death signal ends a worker whose parent was killed outright, so none is left behind.
"""

import multiprocessing
import os
import signal
from typing import Callable, Optional, Sequence

from ..processes import die_with_parent



def cores() -> int:
    """The cores this process may run on (a scheduler's CPU set, else every core)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _start_worker(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    for signum in (signal.SIGTERM, signal.SIGHUP):  # not the parent's Interrupted handler
        signal.signal(signum, signal.SIG_DFL)
    die_with_parent(parent)


def run_all(function: Callable, tasks: Sequence[tuple], workers: int,
            each: Callable[[int, object], None] = lambda index, result: None,
            sizes: Optional[Sequence[int]] = None) -> None:
    """``function(*task)`` for every task on up to WORKERS processes (in this process when
    WORKERS is 1 or there is one task); ``each(index, result)`` is called in the tasks' order,
    and the first task (in that order) that raises stops the rest and raises here. ``sizes``:
    the tasks' sizes, largest started first (so that the largest does not start last)."""
    workers = min(workers, len(tasks))
    if workers <= 1:
        for index, task in enumerate(tasks):
            each(index, function(*task))
        return
    order = (sorted(range(len(tasks)), key=lambda i: -sizes[i]) if sizes is not None
             else range(len(tasks)))
    pool = multiprocessing.get_context("fork").Pool(workers, initializer=_start_worker,
                                                    initargs=(os.getpid(),))
    try:
        pending = {index: pool.apply_async(function, tasks[index]) for index in order}
        for index in range(len(tasks)):
            each(index, pending[index].get())
        pool.close()
    finally:
        pool.terminate()  # SIGTERM to every worker still running (a failure, a signal)
        pool.join()
