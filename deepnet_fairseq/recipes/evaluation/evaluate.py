"""Evaluate one trained run, in one process: average its last checkpoints, decode each
direction with fairseq-generate's own code, score it (``score.py``), write eval.json.

    python -m deepnet_fairseq.recipes.evaluation.evaluate --run-dir RUN --average-last 5 \\
        --directions en-de --references DATA/raw [--tokenized-bleu] [--compound-split] \\
        -- DATA_BIN [fairseq-generate options but --path: --beam 5 --lenpen 1.0 ...]

1. ``RUN/eval.tmp/averaged.pt``: the mean of the last ``--average-last`` update checkpoints
   ``RUN/checkpoints/checkpoint_E_U.pt`` (fewer if fewer exist; checkpoint_last.pt if none),
   model only (``deepnet_fairseq/average_checkpoints.py``);
2. for each direction S-T, fairseq_cli.generate's ``main`` with the given options plus
   ``--path averaged.pt --source-lang S --target-lang T --results-path RUN/eval.tmp/S-T``:
   the output is exactly fairseq-generate's (``S-T/generate-test.txt``; fairseq's log goes to
   stderr). One process for all directions, and the model is read and built once
   (``models_loaded_once``): OPUS-100 has 198 directions, and every fairseq-generate start
   would pay for importing torch and fairseq and for loading the checkpoint (3.7B parameters
   for 500L-500L);
3. sacreBLEU (and tokenized BLEU if asked) against ``REFERENCES/test.S-T.T`` (or
   ``test.T-S.T``, pairs being stored once), X->En / En->X averages, and the number of
   distinct hypotheses (``distinct.py``: a warning when a direction's model ignores its
   source) into ``eval.json``;
   while it decodes, every 30 s a progress line as training's (``runlog.DecodeProgress``:
   sentences decoded of the test sets', the direction, elapsed time, ETA), on stderr after
   ``decoding: ``, which the recipes' runner shows;
4. ``RUN/eval.tmp`` becomes ``RUN/eval`` (the averaged weights are deleted: they are large and
   can be rebuilt). An interrupted evaluation resumes: finished directions are kept;
5. the scores go to the run's TensorBoard too (``tensorboard.py``: ``RUN/tensorboard/evaluate``,
   at the update of the newest checkpoint averaged), beside fairseq's training curves.

The checkpoints are read with torch's weights-only unpickler (``checkpoint_io``); an unreadable
one stops the evaluation with one line, ``cannot read PATH: CAUSE`` (exit status 1).
"""

import argparse
import contextlib
import inspect
import logging
import os
import sys
import threading
from typing import Optional

from .. import cli_parser
from ...cli import at_least_one
from ..run import runlog
from ...storage.evaluations import PURPOSE, purpose, recorded_purpose
from ...storage.records import read_record, write_record
from . import tensorboard
from .distinct import distinct_summary, ignores_source, report
from .score import hypotheses, score_direction, summarise
from ...storage.directories import LOCK, MARKER, Busy, RunLock, fresh, is_ours, replace_tree
from ...storage.fileio import (one_line_os_errors, refuse_links_within,
                               refuse_planted_links, remove_file, signals_raise)


def to_average(checkpoints: str, count: int) -> list:
    """The paths of the checkpoints an evaluation averages: the last COUNT update
    checkpoints (fewer if fewer exist), checkpoint_last.pt where there are none."""
    from ...average_checkpoints import last_checkpoints

    available = len([n for n in os.listdir(checkpoints) if n.count("_") == 2 and n.endswith(".pt")
                     and n.startswith("checkpoint_")])
    if min(count, available) == 0:
        return [os.path.join(checkpoints, "checkpoint_last.pt")]
    return last_checkpoints(checkpoints, min(count, available), "update")


def average_last(checkpoints: str, count: int, output: str) -> None:
    from ...average_checkpoints import average
    from ...storage.fileio import save_torch

    paths = to_average(checkpoints, count)
    last = paths == [os.path.join(checkpoints, "checkpoint_last.pt")]
    if len(paths) < count or last:
        print(f"warning: {0 if last else len(paths)} update checkpoint(s) in {checkpoints}, "
              f"fewer than --average-last {count} (a short run?)", file=sys.stderr)
    if last:
        print("evaluating checkpoint_last.pt (its model only)", file=sys.stderr)
    else:
        print(f"averaging {len(paths)} checkpoints: {' '.join(map(os.path.basename, paths))}",
              file=sys.stderr)
    save_torch(average(paths), output)


def up_to_date(run_dir: str, argv) -> bool:
    """Whether RUN_DIR/eval holds the result of evaluating these checkpoints with ARGV. Its
    records are read through the one reader, as a writer reads what it replaces: one this code
    cannot read is a ``RecordError`` naming it, neither taken for a result ("already
    evaluated") nor replaced by a new evaluation without a word."""
    final = os.path.join(run_dir, "eval")
    result = read_record(os.path.join(final, "eval.json"), "eval")
    recorded = read_record(os.path.join(final, PURPOSE), "purpose")
    return result is not None and recorded == purpose(run_dir, argv)


def _dictionaries(task):
    """The task's source and target vocabularies, as (size, hash) pairs."""
    found = []
    for name in ("source_dictionary", "target_dictionary"):
        try:
            dictionary = getattr(task, name, None)
        except NotImplementedError:
            dictionary = None
        found.append(None if dictionary is None
                     else (len(dictionary), hash(tuple(dictionary.symbols))))
    return tuple(found)


@contextlib.contextmanager
def models_loaded_once():
    """Within the block, fairseq's ``checkpoint_utils.load_model_ensemble`` -- the function
    ``fairseq_cli.generate`` loads its models with -- returns the models of its previous call
    when it is asked for the same files with the same options and a task of the same class
    and dictionaries; otherwise it loads, and keeps only the newest models. So fairseq-generate's
    own code decodes every direction (its output unchanged) and the checkpoint is read once.

    Reusing the model objects is safe for generation: ``_main`` only casts them (``half``,
    ``cuda``: no-ops the second time) and calls ``prepare_for_inference_``, which fairseq
    applies once per model; the direction's task, dataset and SequenceGenerator are new for
    each call. A model is built from its task's dictionaries, hence the dictionaries in the
    key: a direction whose vocabulary differs gets a model of its own."""
    from fairseq import checkpoint_utils

    from ... import register

    register()  # fairseq skips a --user-dir whose package is already imported
    original = checkpoint_utils.load_model_ensemble
    signature = inspect.signature(original)
    cache = {}

    def load_model_ensemble(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        options = dict(bound.arguments)
        task, state = options.pop("task"), options.pop("state")
        if state is not None:  # a state in memory: nothing to save
            return original(*args, **kwargs)
        key = (repr(sorted(options.items(), key=repr)), type(task).__name__, _dictionaries(task))
        if key not in cache:
            cache.clear()  # one model in memory at a time
            cache[key] = original(*args, **kwargs)
        return cache[key]

    checkpoint_utils.load_model_ensemble = load_model_ensemble
    try:
        yield cache
    finally:
        checkpoint_utils.load_model_ensemble = original


class _Counted:
    """fairseq-generate's progress bar over the test batches, counting each batch into a
    ``runlog.DecodeProgress`` once it is decoded (when the next one is asked for, or at the
    end); everything else (its ``log``, ``print``) is the bar's own."""

    def __init__(self, bar, progress: runlog.DecodeProgress):
        self.bar, self.progress = bar, progress

    def __iter__(self):
        self.progress.decoding()
        pending = 0
        for sample in self.bar:
            self.progress.add(pending)
            ids = sample.get("id") if isinstance(sample, dict) else None
            pending = len(ids) if ids is not None and "net_input" in sample else 0
            yield sample
        self.progress.add(pending)

    def __len__(self):
        return len(self.bar)

    def __getattr__(self, name):
        return getattr(self.bar, name)


@contextlib.contextmanager
def counting_decoded(progress: runlog.DecodeProgress):
    """Within the block, the progress bar fairseq-generate's ``_main`` iterates the test set
    with (``fairseq.logging.progress_bar.progress_bar``) counts the decoded sentences into
    PROGRESS (``_Counted``); its output is unchanged."""
    from fairseq.logging import progress_bar

    original = progress_bar.progress_bar

    def counted(*args, **kwargs):
        return _Counted(original(*args, **kwargs), progress)

    progress_bar.progress_bar = counted
    try:
        yield
    finally:
        progress_bar.progress_bar = original


@contextlib.contextmanager
def progress_lines(progress: runlog.DecodeProgress, every: Optional[float] = None, out=None):
    """Print PROGRESS's line (after ``runlog.DECODING``) every EVERY seconds (training's
    ``runlog.PROGRESS_EVERY_S``) while the block runs, and once at its end."""
    out = out or sys.stderr
    every = runlog.PROGRESS_EVERY_S if every is None else every
    done = threading.Event()

    def say():
        print(f"{runlog.DECODING}{progress.line()}", file=out, flush=True)

    def every_so_often():
        while not done.wait(every):
            say()

    thread = threading.Thread(target=every_so_often, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    say()


def _test_sentences(references: str, directions) -> int:
    """The test sentences of DIRECTIONS (their references' lines); 0 if a reference is
    missing (the progress line then has no total; scoring says which is missing)."""
    total = 0
    for direction in directions:
        try:
            with open(reference(references, direction), "rb") as handle:
                total += sum(1 for _ in handle)
        except OSError:
            return 0
    return total


def dictionary_problem(checkpoint: str, data: str, directions) -> "str | None":
    """Why the model in CHECKPOINT cannot decode DATA (its embeddings are not the size of the
    data's dictionaries, as ``deepnet-export`` checks), or None: one line instead of fairseq's
    size-mismatch traceback. Directions whose dict.LANG.txt files DATA does not have
    are left to fairseq, and so are multilingual models, whose embeddings also hold the
    language tokens (``_evaluate`` does not call this for them)."""
    from ...export import ExportError, check_dictionaries
    from ...storage.checkpoint_io import read_checkpoint, trained_on

    state = read_checkpoint(checkpoint, mmap=True)
    weights, trained = state["model"], trained_on(state)
    for direction in directions:
        src, tgt = direction.split("-")
        if all(os.path.isfile(os.path.join(data, f"dict.{lang}.txt")) for lang in (src, tgt)):
            try:
                check_dictionaries(weights, {"source_lang": src, "target_lang": tgt,
                                             "data": trained}, data)
            except ExportError as err:
                return f"{checkpoint}: {str(err).split(': pass --data')[0]}"
    return None


def check_distinct(generate_output: str) -> dict:
    """distinct.py's count of the direction's hypotheses, its report printed (a warning block
    when the model ignores its source)."""
    summary = distinct_summary(hypotheses(generate_output))
    print(report(summary), file=sys.stderr)
    return {"distinct": summary["distinct"], "distinct_share": summary["distinct_share"],
            "ignores_source": ignores_source(summary)}


# The test batches are loaded in this process unless the user's options say otherwise (theirs come
# after, and argparse keeps the last): fairseq's default forks a DataLoader worker, and a fork
# copies the locks the progress thread (``progress_lines``) may hold at that moment; such a worker
# died twice under the test suite. Reading binarized batches costs nothing beside beam search.
IN_PROCESS_LOADING = ("--num-workers", "0")


def generate(direction: str, averaged: str, out_dir: str, generate_args) -> str:
    """fairseq-generate for one direction; returns the path of its output."""
    from fairseq import options
    from fairseq_cli.generate import main as generate_main

    from ... import register

    register()

    src, tgt = direction.split("-")
    final = os.path.join(out_dir, direction)
    if not os.path.isdir(final):
        tmp = final + ".tmp"
        # fresh and marked before fairseq writes into it: a decode stopped half-way (a signal,
        # a fairseq error) leaves a directory the next evaluation may delete
        fresh(tmp)
        args = options.parse_args_and_arch(options.get_generation_parser(), [
            *IN_PROCESS_LOADING, *generate_args, "--path", averaged, "--source-lang", src, "--target-lang", tgt,
            "--results-path", tmp])
        generate_main(args)
        replace_tree(tmp, final)
    return os.path.join(final, "generate-test.txt")


def reference(references: str, direction: str) -> str:
    src, tgt = direction.split("-")
    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        path = os.path.join(references, f"test.{pair}.{tgt}")
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"no reference for {direction} in {references} (test.{src}-{tgt}.{tgt})")


@one_line_os_errors
def main(argv=None) -> None:
    parser = cli_parser("python -m deepnet_fairseq.recipes.evaluation.evaluate", __doc__)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--average-last", type=at_least_one, required=True,
                        help="how many of the newest update checkpoints to average (>= 1)")
    parser.add_argument("--directions", required=True, help="comma-separated SRC-TGT list")
    parser.add_argument("--references", required=True, help="directory of test.PAIR.LANG text")
    parser.add_argument("--tokenized-bleu", action="store_true")
    parser.add_argument("--compound-split", action="store_true")
    parser.add_argument("--multilingual", action="store_true",
                        help="the data set is multilingual (its declaration says): the "
                             "dictionaries' sizes are fairseq's to check")
    parser.add_argument("--lock-fd", type=int,
                        help="a descriptor of RUN/.lock that the caller (the recipes' runner) "
                             "holds and passed on: the evaluation is then under its lock")
    parser.add_argument("generate_args", nargs=argparse.REMAINDER,
                        help="after --: DATA_BIN and fairseq-generate options (no --path)")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    generate_args = args.generate_args[1:] if args.generate_args[:1] == ["--"] else args.generate_args
    if args.lock_fd is not None:
        if not _holds_lock(args.lock_fd, args.run_dir):
            parser.error(f"--lock-fd {args.lock_fd} is not a lock on {args.run_dir}/{LOCK} "
                         "passed on by its holder")
        # what is evaluated does not depend on who holds the lock (purpose.json)
        end = argv.index("--") if "--" in argv else len(argv)
        mine = [i for i, a in enumerate(argv[:end]) if a == "--lock-fd"] or [-2]
        with signals_raise():
            _evaluate(parser, args, [a for i, a in enumerate(argv)
                                     if i not in (mine[0], mine[0] + 1)
                                     and not (i < end and a.startswith("--lock-fd="))],
                      generate_args)
        return
    try:
        # one process at a time in a run directory: not while it trains (checkpoints changing
        # under the evaluation), not two evaluations (the trainer's lock, workdir.RunLock);
        # a signal ends it with its status and a line saying so (finished directions kept)
        with RunLock(args.run_dir, step="evaluate"), signals_raise():
            _evaluate(parser, args, argv, generate_args)
    except Busy as err:
        parser.exit(1, f"error: {err}\n")


def _holds_lock(fd: int, run_dir: str) -> bool:
    """Whether descriptor FD is RUN_DIR's lock file, locked by this process or the one that
    passed it on (flock on the same open file succeeds; any other holder makes it fail)."""
    import fcntl

    try:
        same = os.path.samestat(os.fstat(fd), os.stat(os.path.join(run_dir, LOCK)))
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return same


def _evaluate(parser, args, argv, generate_args) -> None:
    checkpoints, work = _refuse_what_is_not_ours(parser, args.run_dir)
    averaged = os.path.join(work, "averaged.pt")
    wanted = purpose(args.run_dir, argv)
    if up_to_date(args.run_dir, argv):
        print(f"{args.run_dir}/eval is the evaluation of these checkpoints with these settings: "
              "kept", file=sys.stderr)
        return
    # the recipes' runs keep fairseq's event files in RUN/tensorboard (recipes/spec/paths.py);
    # the scores' folder is made first: a link planted there is refused before any work
    events = os.path.join(args.run_dir, "tensorboard")
    scores_folder = tensorboard.events_folder(events) if os.path.isdir(events) else None
    averaging = to_average(checkpoints, args.average_last)  # what _average averages
    _refuse_other_runs_checkpoints(args.run_dir, averaging, generate_args)
    _average(checkpoints, args.average_last, averaged, wanted)
    _refuse_other_dictionaries(averaged, args, generate_args)
    _log_to_stderr()
    directions = _decode_and_score(args, work, averaged, generate_args)
    summary = _publish(args.run_dir, work, averaged, directions,
                       [os.path.basename(p) for p in averaging])
    if scores_folder:
        update = tensorboard.update_of(averaging)
        tensorboard.log_scores(events, summary, update)
        print(f"scores logged to TensorBoard at update {update}: {scores_folder}",
              file=sys.stderr)


def _refuse_what_is_not_ours(parser, run_dir: str):
    """RUN_DIR's checkpoints and eval.tmp; a parser error for a run not trained, and for an
    eval.tmp or eval the recipes did not make."""
    checkpoints = os.path.join(run_dir, "checkpoints")
    work = os.path.join(run_dir, "eval.tmp")
    last = os.path.join(checkpoints, "checkpoint_last.pt")
    if not os.path.isfile(last):
        parser.error(f"no {last}: train the run first")
    refuse_links_within(checkpoints)  # read by name: no other run's checkpoint through a link
    for directory in (work, os.path.join(run_dir, "eval")):
        refuse_planted_links(directory)  # a link to a marked directory elsewhere: not ours
        if os.path.lexists(directory) and not is_ours(directory):
            parser.error(f"{directory} exists and the recipes did not create it (no {MARKER} "
                         "in it): move it away, then evaluate again")
    return checkpoints, work


def _average(checkpoints: str, count: int, averaged: str, wanted: dict) -> None:
    """AVERAGED (in eval.tmp), the mean of the last COUNT CHECKPOINTS, unless eval.tmp already
    holds it for the same purpose (an interrupted evaluation resumes)."""
    work = os.path.dirname(averaged)
    if os.path.isfile(averaged) and recorded_purpose(work) == wanted:
        return
    # another evaluation's leftovers (other checkpoints or settings) are redone, not reused;
    # deleted only because the recipes made them (workdir's marker)
    fresh(work)
    write_record(os.path.join(work, PURPOSE), "purpose", wanted)
    from ...storage.checkpoint_io import CheckpointError

    try:
        average_last(checkpoints, count, averaged)
    except CheckpointError as err:
        print(err, file=sys.stderr)
        sys.exit(1)


def _refuse_other_runs_checkpoints(run_dir: str, paths, generate_args) -> None:
    """Exit 1 with one line if a checkpoint to average is not the run's: its model, seed, rate
    or dictionaries are not those of the training command the run records (its config.json;
    ``runner.not_the_runs``), as the train step refuses to resume one."""
    from ..run.runner import not_the_runs

    record = read_record(os.path.join(run_dir, "config.json"), "run-config") or {}
    command = record.get("command") or []
    data = next((a for a in generate_args if not a.startswith("-")), None)
    if not data or os.path.abspath(data) not in map(os.path.abspath, command):
        return  # trained outside the recipes, or on data moved since: nothing to compare with
    bin_dir = next(a for a in command if os.path.abspath(a) == os.path.abspath(data))
    for path in paths:
        problem = not_the_runs(path, command, bin_dir)
        if problem:
            print(f"error: {problem} of {run_dir}: averaging it would score another model as "
                  "this run's; move it out of the run's checkpoints, then evaluate again",
                  file=sys.stderr)
            sys.exit(1)


def _refuse_other_dictionaries(averaged: str, args, generate_args) -> None:
    """Exit 1 with one line if the data's dictionaries are not the ones the model was trained
    with (``dictionary_problem``)."""
    data = next((a for a in generate_args if not a.startswith("-")), None)
    # a multilingual model's embeddings also hold the language tokens fairseq's task adds to
    # the dictionaries: the sizes are fairseq's to check there
    single_pair = not args.multilingual
    problem = data and single_pair and dictionary_problem(averaged, data,
                                                          args.directions.split(","))
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(1)


def _log_to_stderr() -> None:
    # fairseq-generate sends its log to the stream logging is first configured with: the
    # first direction's output file, closed when that direction is done. Importing fairseq
    # may have configured it already, at DEBUG (fairseq 0.12's wav2vec2_classification), which
    # lets hydra's DEBUG lines through: the level is set either way
    level = os.environ.get("LOGLEVEL", "INFO").upper()
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                        level=level, stream=sys.stderr)
    logging.getLogger().setLevel(level)


def _decode_and_score(args, work: str, averaged: str, generate_args) -> dict:
    """Each direction decoded into WORK (those decoded already are kept) and scored: its
    scores, distinct hypotheses and reference, by direction."""
    directions = {}
    names = args.directions.split(",")
    todo = [d for d in names if not os.path.isdir(os.path.join(work, d))]  # not decoded yet
    progress = runlog.DecodeProgress(_test_sentences(args.references, todo), len(todo))
    with models_loaded_once(), counting_decoded(progress), \
            (progress_lines(progress) if todo else contextlib.nullcontext()):
        for direction in names:
            if direction in todo:
                progress.begin(todo.index(direction) + 1, direction)
            output = generate(direction, averaged, work, generate_args)
            scored_against = reference(args.references, direction)
            scores = score_direction(output, scored_against, direction.split("-")[1],
                                     args.tokenized_bleu, args.compound_split)
            extra = f", tokenized BLEU {scores['tok_bleu']}" if args.tokenized_bleu else ""
            print(f"{direction}: sacreBLEU {scores['sacrebleu']}{extra}", file=sys.stderr)
            # the reference file, so that a report can score the decode again (report.py)
            directions[direction] = {**scores, **check_distinct(output),
                                     "reference": os.path.abspath(scored_against)}
    return directions


def _publish(run_dir: str, work: str, averaged: str, directions: dict, scored: list) -> dict:
    """WORK's eval.json written from DIRECTIONS and the names of the checkpoints averaged
    (SCORED), the averaged weights deleted, and WORK made RUN_DIR/eval; what eval.json holds."""
    ignoring = [name for name, d in directions.items() if d["ignores_source"]]
    if ignoring and len(directions) > 1:
        print(f"WARNING: {len(ignoring)} of {len(directions)} directions ignore their source: "
              f"{' '.join(ignoring)}", file=sys.stderr)
    summary = {**summarise(directions), "checkpoints": scored}
    write_record(os.path.join(work, "eval.json"), "eval", summary)
    remove_file(averaged)
    # refuses an eval/ the recipes did not create, naming it
    replace_tree(work, os.path.join(run_dir, "eval"))
    if len(directions) > 1:
        print(f"average sacreBLEU {summary['sacrebleu_avg']}  X->En {summary.get('x_en')}  "
              f"En->X {summary.get('en_x')}", file=sys.stderr)
    return summary


if __name__ == "__main__":
    main()
