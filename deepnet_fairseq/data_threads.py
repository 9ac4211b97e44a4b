"""A clean exit for fairseq-train's batch thread.

fairseq-train's batches come through a thread, the consumer of fairseq's ``BufferedIterator``
(fairseq/data/iterators.py), which collates the next batches while the model trains. Training
ends at ``--max-update`` in the middle of an epoch, with that thread still running; if Python
finalizes while it is inside a torch operation (which lets go of the GIL), the thread is ended
as it takes the GIL back, inside C++ code that cannot be unwound, and the whole process aborts
("terminate called without an active exception", status 134) after a complete run: the
recipes' runner would call a finished run failed. At exit, before finalization, each such thread
is asked to stop after its current batch, and waited for.
"""

import atexit
import queue
import threading
import time

STOP_WITHIN_S = 30.0  # a batch being collated takes far less; past this, exit as fairseq would


def stop_batch_threads(within_s: float = STOP_WITHIN_S) -> None:
    """Stop every live fairseq batch thread after its current batch, making room in its queue
    for the batch and the end marker it puts there."""
    from fairseq.data.iterators import BackgroundConsumer

    deadline = time.monotonic() + within_s
    for thread in threading.enumerate():
        if not isinstance(thread, BackgroundConsumer):
            continue
        thread._max_len = 0  # its loop stops once its count reaches this, after the next put
        while thread.is_alive() and time.monotonic() < deadline:
            try:
                thread._queue.get_nowait()
            except queue.Empty:
                pass
            thread.join(0.01)


def install() -> None:
    """Run ``stop_batch_threads`` at exit, once however often the plugin registers. atexit
    handlers run before the interpreter finalizes, the last registered first: this one before
    multiprocessing's (registered when torch is imported), so a DataLoader's worker processes
    still answer while it waits."""
    atexit.unregister(stop_batch_threads)
    atexit.register(stop_batch_threads)
