"""The prepare step's parallel stages: independent tasks (one file or one language pair each)
spread over worker processes, their results taken in the tasks' order, so that what is
written and printed is what one process would write and print.

Each task runs in its own process, forked from the prepare process (it shares its imports),
and sends its result back on a pipe of its own. No lock or queue is shared between processes:
``multiprocessing.Pool`` shares its task and result queues' locks among its workers, and its
``terminate()`` hung (3 of 3 full test runs on Python 3.13, 1 of 10 on 3.12) when it stopped a
worker that held one. Here stopping a worker is a kill and a wait, whatever it was doing.

Workers stop with the step: a signal that stops it (SIGTERM, SIGHUP: ``Interrupted``; Ctrl-C)
kills the running workers before the step's temporaries are removed, workers ignore Ctrl-C
(the parent stops them), and Linux's parent-death signal ends a worker whose parent was killed
outright, so none is left behind.
"""

import multiprocessing
import multiprocessing.connection
import os
import signal
from typing import Callable, Dict, Optional, Sequence, Tuple

from ...processes import die_with_parent, raise_if_interrupted


class WorkerDied(RuntimeError):
    """A worker ended without sending its task's result (killed, or out of memory)."""


def _work(parent: int, send, function: Callable, task: tuple) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    for signum in (signal.SIGTERM, signal.SIGHUP):  # not the parent's Interrupted handler
        signal.signal(signum, signal.SIG_DFL)
    die_with_parent(parent)
    try:
        outcome = (True, function(*task))
    except BaseException as error:  # the parent raises it, in the tasks' order
        outcome = (False, error)
    try:
        send.send(outcome)
    except Exception as unsendable:  # an exception or result that does not pickle
        send.send((False, RuntimeError(f"{outcome[1]!r} (could not be sent back: {unsendable})")))
    send.close()


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
    waiting = (sorted(range(len(tasks)), key=lambda i: -sizes[i]) if sizes is not None
               else list(range(len(tasks))))
    context = multiprocessing.get_context("fork")
    running: Dict[object, Tuple[int, multiprocessing.process.BaseProcess]] = {}
    done: Dict[int, Tuple[bool, object]] = {}
    first_failure = len(tasks)  # no task after a failed one is started
    reported = 0
    try:
        while reported < min(first_failure + 1, len(tasks)):
            while len(running) < workers and any(i < first_failure for i in waiting):
                raise_if_interrupted()  # a signal whose exception a start-up swallowed
                index = next(i for i in waiting if i < first_failure)
                waiting.remove(index)
                receive, send = context.Pipe(duplex=False)
                process = context.Process(target=_work, daemon=True,
                                          args=(os.getpid(), send, function, tasks[index]))
                process.start()
                send.close()
                running[receive] = (index, process)
            raise_if_interrupted()
            for receive in multiprocessing.connection.wait(list(running)):
                index, process = running.pop(receive)
                try:
                    done[index] = receive.recv()
                except EOFError:
                    process.join()
                    done[index] = (False, WorkerDied(
                        f"the worker of task {index + 1} of {len(tasks)} ended without a result "
                        f"(exit status {process.exitcode})"))
                receive.close()
                process.join()
                if not done[index][0]:
                    first_failure = min(first_failure, index)
            while reported in done:
                succeeded, value = done.pop(reported)
                if not succeeded:
                    raise value
                each(reported, value)
                reported += 1
    finally:
        for receive, (_, process) in running.items():  # a failure, a signal: stop the rest
            process.kill()
            process.join()
            receive.close()
