"""The suite's layers and its shared data.

- ``unit/``: the package in this process, models built and trained for a step or a few
  through fairseq's own code; 5.5 minutes of test time on one thread (README: which tests to
  run when).
- ``integration/``: what crosses a process boundary: the console scripts and the shell recipes
  as a user runs them, an installed ``--user-dir``, signals, worker processes, the docs'
  commands; seconds each.
- ``slow/``: end to end (trainings of tens of updates, torchrun, the recipes' chains): marked
  ``slow`` here, run in CI, skipped locally with ``-m "not slow"``.

The helpers are in ``support.py``; the fixtures below are the toy corpus, binarised once a
session (by fairseq-preprocess's own main, in this process)."""

import os
import subprocess

# One thread per test process and per process a test starts (OMP_NUM_THREADS is inherited),
# unless the caller chose: the models here are tiny, so a second thread buys little, and where
# threads outnumber the free cores (two pytest-xdist workers on two cores, or a training beside
# the suite) OpenMP's barriers wait on descheduled threads (the session's trained model took
# 234 s on two threads beside one busy core, 17 s on one). Before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import deepnet_fairseq  # noqa: E402
from support import (REPO, build, fairseq_preprocess, make_toy_data,  # noqa: E402
                     save_checkpoint, train)

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
deepnet_fairseq.register()  # the tests build models through fairseq in this process

pytest_plugins = ["release_server",  # its ``server`` fixture: the download tests, fast and slow
                  "reference_fairscale"]  # ``fairscale_reference``: fairscale, for comparisons only

CHECKOUT = pytest.StashKey[set]()
SLOW_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow")


LAYERS = ("unit", "integration", "slow")  # the order they run in: the fastest feedback first


def pytest_configure(config):
    """The third-party warnings the plugin silences for its users (fairseq's, hydra's, torch's
    about each other: ``deepnet_fairseq.THIRD_PARTY_WARNINGS``) are ignored here too, so that
    the warnings summary shows what is the project's business. The plugin's filters, installed
    when conftest imports it, do not outlast pytest's collection (each phase restores the
    filters it started with), hence the same filters as ini lines (pytest.ini has the rest)."""
    for category, message, module in deepnet_fairseq.THIRD_PARTY_WARNINGS:
        config.addinivalue_line("filterwarnings",
                                f"ignore:{message}:{category.__name__}:{module}")


def _checkout_entries():
    """The checkout's top-level entries that git would not ignore."""
    names = os.listdir(REPO)
    ignored = subprocess.run(["git", "check-ignore", "--stdin"], cwd=REPO, text=True,
                             input="\n".join(names), capture_output=True).stdout.split()
    return set(names) - set(ignored)


def pytest_sessionstart(session):
    session.config.stash[CHECKOUT] = _checkout_entries()


def pytest_sessionfinish(session):
    """A test writes into its own temporary directories, never into the checkout: fairseq's
    default ./checkpoints of a run launched from it, for one, would be left beside the code
    (and committed by the next careless `git add`). What appeared fails the session."""
    before = session.config.stash.get(CHECKOUT, None)
    written = sorted(_checkout_entries() - before) if before is not None else []
    if written:
        session.config.get_terminal_writer().line(
            f"the tests wrote into the checkout {REPO}: {', '.join(written)} (run the "
            "program that wrote it in a temporary working directory)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(items):
    for item in items:
        if str(item.path).startswith(SLOW_DIR + os.sep):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: next((i for i, layer in enumerate(LAYERS)
                                      if f"{os.sep}{layer}{os.sep}" in str(item.path)), 0))


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory):
    """A binarised fairseq dataset (src -> tgt, joined dictionary) built by fairseq-preprocess."""
    return make_toy_data(tmp_path_factory.mktemp("toy"))


@pytest.fixture(scope="session")
def mono_data(toy_data):
    """The toy corpus's source side as monolingual data (masked_lm, language_modeling)."""
    root = toy_data.parent
    fairseq_preprocess("--only-source", "--trainpref", root / "train.src",
                       "--validpref", root / "valid.src", "--destdir", root / "mono",
                       "--workers", 1)
    return root / "mono"


def made_once(tmp_path_factory, worker_id: str, name: str, make):
    """The folder NAME, filled by ``make(folder)`` once a test session: under pytest-xdist the
    workers share it (the first to come makes it, under a file lock, while the others wait),
    so that a costly artefact several files read is made once, not once a worker. Read it;
    a test that changes it copies it first."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    # a worker's base is the session's own folder's child (popen-gwN); without xdist the base
    # is the session's folder itself (its parent holds earlier sessions')
    root = base.parent if worker_id != "master" else base
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def trained_tiny(tmp_path_factory, worker_id):
    """The session's one trained tiny DeepNet (3L-2L, shared embeddings): fairseq-train's own
    main, 200 updates on the toy reversal at lr 3e-3, no dropout, init gain beta 1 (at this
    width the paper's beta keeps the model at the uniform loss for about 400 updates; with beta
    1 it reverses in part after 200), alpha the paper's (1.11 and 1.57). No validation and one
    save at the end: the same weights, without 40 checkpoint writes. Trained once for all the
    workers (made_once), on its own copy of the toy data. The path of its checkpoint_last.pt;
    a test that changes it copies it first."""
    def make(folder):
        toy = folder / "toy"
        toy.mkdir()
        train(make_toy_data(toy), folder / "checkpoints", "--encoder-layers", 3,
              "--decoder-layers", 2, "--share-all-embeddings", "--max-update", 200,
              "--lr", "3e-3", "--dropout", 0, "--deepnorm-encoder-beta", 1,
              "--deepnorm-decoder-beta", 1, "--disable-validation", "--save-interval", 1000)

    return made_once(tmp_path_factory, worker_id, "trained-tiny", make) / "checkpoints" / \
        "checkpoint_last.pt"


@pytest.fixture(scope="session")
def tiny_checkpoint(toy_data, tmp_path_factory):
    """A checkpoint as fairseq-train writes it (update 5), of a tiny DeepNet on the toy data."""
    model, _, cfg = build(toy_data, "deepnet_transformer_tiny", "--share-all-embeddings")
    path = tmp_path_factory.mktemp("checkpoint") / "checkpoint_1_5.pt"
    save_checkpoint(model, cfg, path, num_updates=5)
    return path
