"""Reading and writing checkpoint files so that a bad file is named, and an input is never lost.

**Reading.** ``read_checkpoint`` is the one place the plugin reads a checkpoint. It always
passes ``weights_only=True`` to ``torch.load``: torch lets ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``
turn the weights-only unpickler off only where the caller did not pass ``weights_only``
(torch.serialization.load, torch 2.6 to 2.13), so a pickle that would run code is refused
whatever the environment says. Every way a file can be unreadable -- missing, empty,
truncated (a zip archive's directory is at its end), not a torch file, a readable archive with
corrupt data, something the weights-only unpickler refuses -- becomes one ``CheckpointError``
whose message is one line, ``cannot read PATH: CAUSE``, for the CLIs to print as it is.
``read_fairseq_checkpoint`` adds what fairseq's ``load_checkpoint_to_cpu`` does after its own
(unrestricted) ``torch.load``: the OmegaConf config, the option overrides, the format upgrade.

**Writing** goes through the file layer (``fileio.py``: temporaries named for their output and
process, removed on failure, on signals inside ``signals_raise`` and by the next writer).
``output_problem`` is the CLIs' check that an output cannot destroy an input.

Importing this module imports no torch: the readers do, with ``checkpoint_compat`` (the
allowlist of what fairseq checkpoints hold) before their first ``torch.load``, so that the
CLIs built on it answer --help and argument errors without torch.
"""

import functools
import os
import pickle
import re
import zipfile
from typing import Iterable, Optional

from .fileio import MARKER, NotRegularFile, OutputRefused, check_regular, check_tool_output

# what torch's weights-only unpickler says when it refuses a class or call (as opposed to
# bytes that are no pickle at all: "Unsupported operand 215")
_REFUSAL = re.compile(r"GLOBAL|allowlist|add_safe_globals|must be imported|TorchScript")


@functools.lru_cache(maxsize=None)
def legacy_start() -> bytes:
    """How a file in torch's legacy (before 1.6, non-zip) format starts: its magic number,
    pickled."""
    import torch

    return pickle.dumps(torch.serialization.MAGIC_NUMBER,
                        protocol=torch.serialization.DEFAULT_PROTOCOL)


NOT_TORCH = "not a torch checkpoint (truncated or not a zip archive)"


class CheckpointError(Exception):
    """A checkpoint file that cannot be read; ``str()`` is ``cannot read PATH: CAUSE``."""

    def __init__(self, path: str, cause: str):
        self.path, self.cause = path, cause
        super().__init__(f"cannot read {path}: {cause}")


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _cause(err: BaseException, is_zip: bool) -> str:
    """The short cause of a torch.load failure."""
    if isinstance(err, FileNotFoundError):
        return "no such file"
    if isinstance(err, IsADirectoryError):
        return "is a directory, not a checkpoint file"
    if isinstance(err, PermissionError):
        return "permission denied"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    if isinstance(err, pickle.UnpicklingError) and err.__context__ is not None:
        err = err.__context__  # torch re-raises with a long preamble; the original says what
    message = _one_line(err)
    if _REFUSAL.search(message):
        # the first sentence names the class; the rest is torch's advice to allowlist it
        return f"refused by the weights-only unpickler: {message.split('. ')[0]}"
    if not is_zip:  # a legacy-format file
        return NOT_TORCH
    if isinstance(err, RuntimeError) and "PytorchStreamReader" in message:
        return f"not a torch checkpoint (a zip archive torch cannot read: {message})"
    return f"corrupt data ({type(err).__name__}: {message})"


def read_checkpoint(path: str, mmap: bool = False) -> dict:
    """The dict saved in ``path``, read on the CPU with torch's weights-only unpickler;
    ``mmap``: tensors memory-mapped (read from disk when used; zip-format files only).
    Raises CheckpointError for every file that cannot be read this way."""
    import torch

    from . import checkpoint_compat  # noqa: F401  (allowlists what fairseq checkpoints hold)

    is_zip = False
    try:
        check_regular(path)  # a FIFO would block torch.load forever, a device read on and on
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            raise CheckpointError(path, "empty file")
        is_zip = os.path.isfile(path) and zipfile.is_zipfile(path)
        if os.path.isfile(path) and not is_zip:
            # torch.save has written zip archives since torch 1.6; anything else is read
            # only if it starts like the older format (text would reach the unpickler)
            with open(path, "rb") as handle:
                if handle.read(len(legacy_start())) != legacy_start():
                    raise CheckpointError(path, NOT_TORCH)
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap and is_zip)
    except CheckpointError:
        raise
    except NotRegularFile as err:
        raise CheckpointError(path, err.strerror) from None
    except Exception as err:  # noqa: BLE001  (whatever the unpickler meets in corrupt bytes)
        raise CheckpointError(path, _cause(err, is_zip)) from err
    if not isinstance(state, dict):
        raise CheckpointError(path, f"holds a {type(state).__name__}, not a checkpoint dict")
    return state


def why_unreadable(path: str) -> Optional[str]:
    """None when ``path`` reads as a checkpoint, else the cause. The tensors are mapped, not
    read, so this costs about the size of the pickled structure, not of the model."""
    try:
        read_checkpoint(path, mmap=True)
    except CheckpointError as err:
        return err.cause
    return None


def is_readable(path: str) -> bool:
    return why_unreadable(path) is None


def read_fairseq_checkpoint(path: str, arg_overrides: Optional[dict] = None) -> dict:
    """``read_checkpoint`` followed by what fairseq's ``load_checkpoint_to_cpu`` does to the
    state (``cfg`` as OmegaConf, ``arg_overrides`` applied, old formats upgraded), ready for
    ``checkpoint_utils.load_model_ensemble_and_task(..., state=state)``."""
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import overwrite_args_by_name
    from omegaconf import OmegaConf

    state = read_checkpoint(path)
    if "model" not in state:
        raise CheckpointError(path, "not a fairseq checkpoint (no 'model' entry)")
    try:
        if state.get("args") is not None and arg_overrides:
            for name, value in arg_overrides.items():
                setattr(state["args"], name, value)
        if state.get("cfg") is not None:
            # allow_objects: fairseq-train's cfg.model is an argparse.Namespace
            state["cfg"] = OmegaConf.create(state["cfg"], flags={"allow_objects": True})
            if arg_overrides:
                overwrite_args_by_name(state["cfg"], arg_overrides)
        return checkpoint_utils._upgrade_state_dict(state)
    except Exception as err:  # noqa: BLE001  (a dict without what a fairseq checkpoint holds)
        raise CheckpointError(path, f"not a fairseq checkpoint ({type(err).__name__}: "
                                    f"{_one_line(err)})") from err


MULTILINGUAL_TASK = "translation_multi_simple_epoch"  # the OPUS-100 recipe's task


def task_field(holder, name: str):
    """NAME of a checkpoint's task cfg (or of its cfg, or its old ``args``): a DictConfig or
    dict, or the argparse.Namespace of a task's legacy arguments, which is how fairseq keeps
    the multilingual task's cfg; None where HOLDER is None or lacks NAME."""
    if holder is None:
        return None
    return holder.get(name) if hasattr(holder, "get") else getattr(holder, name, None)


def trained_on(state: dict) -> Optional[str]:
    """The data directory a checkpoint records it was trained on (``cfg.task.data``; ``args.data``
    in older ones), or None."""
    task = task_field(state.get("cfg"), "task")
    found = task_field(task, "data") if task is not None else task_field(state.get("args"), "data")
    return found if isinstance(found, str) and found else None


def load_dictionary(path: str):
    """fairseq's ``Dictionary.load(path)``, a FIFO, device, socket or directory refused first
    (``NotRegularFile``): fairseq opens it by name, and would block on a FIFO for ever."""
    from fairseq.data import Dictionary

    check_regular(path)
    return Dictionary.load(path)


def dictionary_difference(path: str, other: str) -> Optional[str]:
    """Where two dict.*.txt files differ as fairseq reads them (the tokens in order, the
    special symbols included), as text naming both; None if they hold the same tokens."""
    ours, theirs = load_dictionary(path).symbols, load_dictionary(other).symbols
    for index, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"{path} and {other} differ at entry {index}: {a!r} vs {b!r}"
    if len(ours) != len(theirs):
        return f"{path} has {len(ours)} entries, {other} {len(theirs)}"
    return None


class ExportError(ValueError):
    """A checkpoint or option deepnet-export (``export``, ``hf_export``) cannot handle; the
    message says what to do."""


def load_fairseq_checkpoints_weights_only() -> None:
    """Make fairseq's own checkpoint loading (``checkpoint_utils.load_checkpoint_to_cpu``: what
    ``fairseq-generate --path``, ``fairseq-interactive``, ``fairseq-train --restore-file`` and the
    hub interface call) read with torch's weights-only unpickler whatever
    ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` says, as the plugin's own readers do: fairseq calls
    ``torch.load`` without ``weights_only``, which that variable (the way out torch's own error
    message suggests) turns into a full unpickler that runs a checkpoint's code. Done when the
    plugin registers; idempotent. A file that is not a checkpoint stops with ``CheckpointError``
    (``cannot read PATH: CAUSE``)."""
    global _WEIGHTS_ONLY_INSTALLED
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    if _WEIGHTS_ONLY_INSTALLED:  # once per process: a wrapper put on top of it later stays
        return

    def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
        return read_fairseq_checkpoint(PathManager.get_local_path(path), arg_overrides)

    load_checkpoint_to_cpu.__doc__ = load_fairseq_checkpoints_weights_only.__doc__
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
    # and underneath, whatever wraps or replaces that function later: every torch.load of
    # fairseq's checkpoint_utils is weights-only
    checkpoint_utils.torch = _TorchLoadingWeightsOnly()
    _WEIGHTS_ONLY_INSTALLED = True


_WEIGHTS_ONLY_INSTALLED = False


class _TorchLoadingWeightsOnly:
    """``torch`` as fairseq's ``checkpoint_utils`` sees it: ``load`` always weights-only (an
    explicit ``weights_only=True`` wins over TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD), the rest torch."""

    @staticmethod
    def load(f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)):
            check_regular(f)
        import torch

        kwargs["weights_only"] = True
        return torch.load(f, *args, **kwargs)

    def __getattr__(self, name):
        import torch

        return getattr(torch, name)


# ---- the outputs of the CLIs --------------------------------------------------------------------

def run_directories_of(checkpoint: str) -> list:
    """The directories the recipes made that hold CHECKPOINT: its own (a run's checkpoints/)
    and the one above, if theirs too (the run). A program that reads a checkpoint counts them
    as input directories and writes nothing into them: a run's directory is written by the
    recipes' own steps only, and the report and resumed runs read what is there."""
    found = []
    directory = os.path.dirname(os.path.abspath(checkpoint))
    while len(found) < 2 and os.path.isfile(os.path.join(directory, MARKER)):
        found.append(directory)
        directory = os.path.dirname(directory)
    return found


def output_problem(output: str, inputs: Iterable[str], force: bool,
                   option: str = "--output", directory: bool = False) -> Optional[str]:
    """Why writing ``output`` (a file, or a ``directory``) is refused, or None: the rule of
    every program's output (``fileio.check_tool_output``), as the text of the refusal; the
    inputs are checkpoints and what they name, and a checkpoint's run directories
    (``run_directories_of``) are inputs too."""
    inputs = list(inputs)
    inputs += [run for given in inputs if os.path.isfile(given)
               for run in run_directories_of(given)]
    try:
        check_tool_output(output, inputs, force, option, directory)
    except OutputRefused as err:
        return str(err)
    return None
