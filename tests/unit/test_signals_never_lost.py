"""A SIGTERM inside a step ends it as interrupted wherever it lands (issue 60): a signal handler
runs wherever the main thread is, and where that is a ``__del__`` or a finalizer -- a pipe
closed while a parallel stage starts its workers -- Python prints "Exception ignored" and goes
on, which let prepare finish with status 0 after a scheduler's SIGTERM. The handlers keep a
record of the signal beside the exception (``processes.raise_if_interrupted``,
``fileio.signals_raise``), so the block ends interrupted however the code it landed in treated
the exception.

Tested where the signal is swallowed for certain (a ``__del__``), and by SIGTERMs sent at
generated moments of a parallel stage's start-up and work (``workers.run_all``), not at one."""

import gc
import os
import signal
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from deepnet_fairseq.processes import Interrupted, signals_interrupt
from deepnet_fairseq.recipes.data import workers
from deepnet_fairseq.storage.fileio import signals_raise

# the swallowed exceptions are the point: Python reports them as unraisable
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


class SignalsInDel:
    """An object whose ``__del__`` receives SIGTERM: the handler's exception is swallowed."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs here, inside __del__


def swallow_a_sigterm():
    SignalsInDel()
    gc.collect()


def test_a_sigterm_swallowed_by_a_del_still_interrupts_the_block():
    with pytest.raises(Interrupted) as caught:
        with signals_interrupt():
            swallow_a_sigterm()
            done = True  # the block runs on: the exception did not reach it
    assert done and caught.value.signum == signal.SIGTERM
    with signals_interrupt():  # the record does not outlive the block
        pass


def test_a_sigterm_swallowed_by_a_del_still_stops_a_tool(capsys):
    with pytest.raises(SystemExit) as caught:
        with signals_raise():
            swallow_a_sigterm()
    assert caught.value.code == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in capsys.readouterr().err


def _nap(seconds):
    time.sleep(seconds)
    return seconds


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(delay=st.floats(min_value=0.0, max_value=0.25))
def test_a_sigterm_at_any_moment_of_a_parallel_stage_interrupts_it(delay):
    """Six tasks on two forked workers, about 0.3 s in all; the SIGTERM comes while workers
    start, while they work, or between: always Interrupted, never a finished stage."""
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGTERM))
    results = []
    with pytest.raises(Interrupted):
        with signals_interrupt():
            timer.start()
            try:
                workers.run_all(_nap, [(0.05,)] * 6, 2,
                                each=lambda index, value: results.append(index))
                time.sleep(0.5)  # the signal came while the stage ran, or comes now
            finally:
                timer.join()
    assert len(results) < 6 or delay > 0.15  # a late signal may find the stage finished
