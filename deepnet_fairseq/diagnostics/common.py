"""What the diagnostics share: building a model of a method and depth through fairseq's own
parser, arch hook and task (as ``fairseq-train`` does), a generated reverse-copy task, atomic
writes and progress output.

Imports neither torch nor fairseq: the functions that compute do, so that the tools' --help
and argument errors answer without them."""

from __future__ import annotations  # (torch in annotations: it is imported where it computes)

import argparse
import copy
import csv
import functools
import io
import os
import sys
import time
from typing import Dict, Iterable, List, Sequence

from .. import USER_DIR, methods
from ..methods import tiny_width_args
from ..storage.fileio import save_png, write_atomically


def method_names(value: str) -> List[str]:
    """argparse type of ``--methods``: comma- or space-separated names of ``methods.METHODS``."""
    names = [name for name in value.replace(",", " ").split() if name]
    for name in names:
        try:
            methods.get(name)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return names


def add_methods_option(parser, default: Sequence[str]) -> None:
    parser.add_argument(
        "--methods", type=method_names, default=list(default),
        help=f"methods to compare, comma-separated names of the method registry "
             f"(deepnet_fairseq/methods.py; now: {', '.join(methods.METHODS)}); "
             f"default: {','.join(default)}")


def positive_ints(value: str) -> List[int]:
    """argparse type: comma-separated positive integers (depths per side)."""
    try:
        numbers = [int(v) for v in value.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}")
    if not numbers or min(numbers) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {value!r}")
    return numbers


def write_dictionary(directory: str, words: int) -> None:
    """fairseq dictionaries (dict.src.txt, dict.tgt.txt) of ``words`` symbols w0 .. w{words-1}."""
    for lang in ("src", "tgt"):
        atomic_write_text(os.path.join(directory, f"dict.{lang}.txt"),
                          "".join(f"w{i} 1\n" for i in range(words)))


def build_training(data_dir: str, method: str, layers: int, extra: Iterable[str] = (),
                   seed: int = 1):
    """(cfg, task, model, criterion) of ``method`` at ``layers``-``layers``, tiny width, on CPU,
    through fairseq's training parser; ``extra`` are more fairseq-train options."""
    return build_from_options(
        [data_dir, "--user-dir", USER_DIR, "--cpu", "--seed", str(seed),
         "--source-lang", "src", "--target-lang", "tgt",
         *methods.get(method).train_args(layers, layers), *tiny_width_args(), *extra], seed)


_CONFIGS: dict = {}  # fairseq's config of each namespace converted in this process


def fairseq_config(args):
    """fairseq's config of the parsed options ARGS (``convert_namespace_to_omegaconf``), each
    namespace converted once a process: the conversion is a hydra compose of about a second,
    and a pure function of the namespace (the registries it reads are filled at import), while
    a copy of its result takes a hundredth of that. A copy is returned: callers may change it."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    key = repr(sorted(vars(args).items()))
    if key not in _CONFIGS:
        _CONFIGS[key] = convert_namespace_to_omegaconf(args)
    return copy.deepcopy(_CONFIGS[key])


def build_from_options(argv: Sequence[str], seed: int = 1):
    """(cfg, task, model, criterion) from fairseq-train's options ``argv``, as fairseq-train
    builds them: its parser, the arch hook, the task; the weights drawn after seeding ``seed``."""
    import torch
    from fairseq import options, tasks

    from .. import register

    register()  # the plugin's archs and tasks, which the options name
    args = options.parse_args_and_arch(options.get_training_parser(), list(argv))
    cfg = fairseq_config(args)
    torch.manual_seed(seed)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    return cfg, task, model, criterion


def reverse_copy_batch(dictionary, batch_size: int, length: int, generator: torch.Generator):
    """A fairseq translation batch (left-padded source, as fairseq's collater) of random words
    and their reversal; all sentences have ``length`` words plus </s>."""
    import torch

    first = dictionary.nspecial
    words = torch.randint(first, len(dictionary), (batch_size, length), generator=generator)
    eos = torch.full((batch_size, 1), dictionary.eos())
    target = torch.cat([words.flip(1), eos], dim=1)
    return {
        "id": torch.arange(batch_size),
        "nsentences": batch_size,
        "ntokens": target.numel(),
        "net_input": {
            "src_tokens": torch.cat([words, eos], dim=1),
            "src_lengths": torch.full((batch_size,), length + 1),
            "prev_output_tokens": torch.cat([eos, target[:, :-1]], dim=1),
        },
        "target": target,
    }


def no_grad(function):
    """``torch.no_grad()`` as a decorator that imports torch when ``function`` runs, not when
    its module is imported."""
    @functools.wraps(function)
    def without_gradients(*args, **kwargs):
        import torch

        with torch.no_grad():
            return function(*args, **kwargs)
    return without_gradients


atomic_write_text = write_atomically  # (path, text): the recipes' atomic text writer


def write_csv(path: str, rows: List[Dict], fields: Sequence[str], float_format: str) -> None:
    """Write ``rows`` as CSV with the columns ``fields``, floats as ``float_format``, atomically."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(fields), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (format(v, float_format) if isinstance(v, float) else v)
                         for k, v in row.items()})
    atomic_write_text(path, buffer.getvalue())


atomic_savefig = save_png  # (figure, path): one atomic PNG writer for recipes and diagnostics


class Progress:
    """One-line progress messages on stderr, with elapsed time."""

    def __init__(self, prog: str, quiet: bool = False):
        self.prog, self.quiet, self.start = prog, quiet, time.time()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[{self.prog} {time.time() - self.start:6.0f}s] {message}", file=sys.stderr,
                  flush=True)
