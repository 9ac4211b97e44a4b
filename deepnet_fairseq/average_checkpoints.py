"""Average the parameters of several fairseq checkpoints (the paper averages the last ones).

    deepnet-average-checkpoints --inputs CKPT_DIR --num-update-checkpoints 5 --output avg.pt
    deepnet-average-checkpoints --inputs a.pt b.pt c.pt --output avg.pt

**What the output holds.** The model only: ``model`` (the mean of the inputs' models), and
what fairseq's ``checkpoint_utils.load_checkpoint_to_cpu`` / ``load_model_ensemble`` (so
``fairseq-generate --path``) need to rebuild and load it, taken from the newest input: ``cfg``
and ``args`` (how to build the model and task), ``task_state``, one minimal
``optimizer_history`` entry (criterion and optimizer names, scheduler state, ``num_updates``:
no optimizer state) and ``extra_state`` with the ``train_iterator`` position fairseq's
checkpoint upgrade looks for and the names of the averaged files. No ``last_optimizer_state``
(Adam's two moments: twice the model), no EMA copy, no training metrics: the file is about the
size of the model, and it is not meant to resume training from.

**Memory.** Inputs are read one at a time, memory-mapped (``torch.load(mmap=True)``) with
torch's weights-only unpickler (``checkpoint_compat`` allowlists what fairseq checkpoints
hold): only the pages of the model tensors are read, never the optimizer state, and they are
released before the next file is opened. The running sum is one float32 copy of the model
(tensors that share memory, such as tied embeddings, are summed once and stay shared in the
output). Peak memory is therefore about the float32 accumulator plus the one model being
added, instead of two whole checkpoints (optimizer state included) plus a float64 sum
(``benchmarks/average_memory.py`` measures both).

**Precision.** Floating-point tensors are summed in float32, divided once by the count, and
cast to their stored dtype. Summing K values one after another has an error of at most
(K - 1) * u * sum(|x_i|), u = 2**-24 for float32 (Higham, *Accuracy and Stability of
Numerical Algorithms*, 4.2): for the 5 to 10 checkpoints one averages, below 6e-7 of the
weights' magnitude. That is a thirtieth of the rounding step of fp16 (2**-11) and bf16 (2**-8)
weights, so the mean cast back to those dtypes is the float64 mean's rounding or, in rare ties,
its neighbour; for fp32 weights it is a few float32 ulps, the size of the differences between
two runs of the same model on different hardware. A float64 sum would change nothing that
matters and double the accumulator. Non-floating-point tensors (step counters, integer
buffers) are copied from the newest checkpoint, not averaged.

**Safety.** The output is written to a temporary file and renamed, so an interrupted run
never leaves a partial checkpoint behind; the temporary is removed on failure, SIGTERM and
Ctrl-C, and one left by a killed earlier run is removed by the next (``checkpoint_io``). An
``--output`` that is one of the inputs is refused, an existing one too unless ``--force``, before
anything is read. An unreadable input stops the run with one line, ``cannot read PATH: CAUSE``
(exit status 1).
"""

import argparse
import os
import re
import sys
from typing import Dict, List

from .cli import at_least_one
from .constants import RECORD
from .storage.checkpoint_io import (CheckpointError, dictionary_difference, output_problem,
                                    read_checkpoint, trained_on)
from .storage.fileio import add_force_argument, one_line_os_errors, save_torch, signals_raise

_PATTERNS = {
    "epoch": re.compile(r"^checkpoint(\d+)\.pt$"),
    "update": re.compile(r"^checkpoint_\d+_(\d+)\.pt$"),
}


def last_checkpoints(directory: str, count: int, kind: str) -> List[str]:
    """The ``count`` newest epoch (checkpointN.pt) or update (checkpoint_E_U.pt) checkpoints."""
    pattern = _PATTERNS[kind]
    numbered = []
    for name in os.listdir(directory):
        match = pattern.match(name)
        if match:
            numbered.append((int(match.group(1)), os.path.join(directory, name)))
    if len(numbered) < count:
        raise ValueError(
            f"asked to average the last {count} {kind} checkpoints of {directory}, but it holds "
            f"{len(numbered)} ({pattern.pattern}); train longer, save more often "
            f"(--save-interval / --save-interval-updates), or ask for fewer."
        )
    return [path for _, path in sorted(numbered)[-count:]]


def load_lazily(path: str) -> Dict:
    """A checkpoint read weights-only, its tensors memory-mapped (read from disk when used).
    Files in torch's legacy (non-zip) format cannot be mapped and are read whole. Raises
    CheckpointError for an unreadable file or one without a model."""
    state = read_checkpoint(path, mmap=True)
    if not isinstance(state.get("model"), dict):
        raise CheckpointError(path, "not a fairseq checkpoint (no 'model' entry)")
    return state


def model_only(newest: Dict, model: Dict, **extra_state) -> Dict:
    """What fairseq needs to load ``model`` for generation, from the newest checkpoint;
    ``extra_state`` records where the model came from."""
    history = (newest.get("optimizer_history") or [{}])[-1]
    extra = newest.get("extra_state") or {}
    return {
        "args": newest.get("args"),
        "cfg": newest.get("cfg"),
        "model": model,
        "optimizer_history": [{key: history[key] for key in (
            "criterion_name", "optimizer_name", "lr_scheduler_state", "num_updates")
            if key in history}],
        "task_state": newest.get("task_state") or {},
        "extra_state": {"train_iterator": extra.get("train_iterator", {"epoch": 0}),
                        **extra_state},
    }


def tied(model: Dict) -> Dict[str, str]:
    """Names whose tensor is the same memory as an earlier name's (tied embeddings, e.g.
    ``--share-all-embeddings``): name -> that earlier name. They are summed once."""
    first: Dict[tuple, str] = {}
    aliases: Dict[str, str] = {}
    for name, tensor in model.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(),
               tuple(tensor.shape), tensor.stride(), tensor.dtype)
        if tensor.numel() and key in first:
            aliases[name] = first[key]
        first.setdefault(key, name)
    return aliases


# the model options that define the function a checkpoint computes; with every option a method
# declares (DeepNorm's constants, --depth-transfer, DS-Init's alpha, ...), from the declarations
_DEFINING = ("_name", "arch", "encoder_layers", "decoder_layers", "encoder_embed_dim",
             "decoder_embed_dim", "encoder_ffn_embed_dim", "decoder_ffn_embed_dim",
             "encoder_attention_heads", "decoder_attention_heads", "encoder_normalize_before",
             "decoder_normalize_before", "activation_fn", "share_all_embeddings",
             "share_decoder_input_output_embed", "no_scale_embedding", "layernorm_embedding")


def model_configuration(state: Dict) -> Dict:
    """The options of a checkpoint that define its model (``_DEFINING`` and every method's own
    options); options a checkpoint does not record are left out."""
    from .methods import METHODS

    cfg = state.get("cfg") or {}
    model = cfg.get("model") if isinstance(cfg, dict) else getattr(cfg, "model", None)
    if model is None:
        model = state.get("args")
    if model is None:
        return {}
    options = vars(model) if hasattr(model, "__dict__") and not isinstance(model, dict) \
        else dict(model)
    names = set(_DEFINING) | {o.name for m in METHODS.values() for o in m.all_model_options}
    return {name: str(options[name]) for name in sorted(names) if name in options}


def _same_model(path: str, first: str, config: Dict, reference: Dict) -> None:
    differences = [f"{name} {reference.get(name, '(absent)')} vs {config.get(name, '(absent)')}"
                   for name in sorted(set(config) | set(reference))
                   if config.get(name) != reference.get(name)]
    if differences:
        raise ValueError(f"{path} is not the model of {first}: its model options differ "
                         f"({'; '.join(differences)}); average checkpoints of one run")


def _same_dictionaries(path: str, first: str, data: "str | None", reference: "str | None") -> None:
    """Refuse PATH, trained on DATA, if a dict.*.txt there holds other tokens than the same
    file in REFERENCE, the data FIRST was trained on. A checkpoint holds no dictionary, only
    that path: where either directory is gone (a moved work directory), the embeddings'
    shapes, compared with every parameter's, are all that is left to compare."""
    if not (data and reference and os.path.isdir(data) and os.path.isdir(reference)):
        return
    for name in sorted(os.listdir(reference)):
        ours, theirs = os.path.join(data, name), os.path.join(reference, name)
        if not (name.startswith("dict.") and name.endswith(".txt") and os.path.isfile(ours)
                and os.path.isfile(theirs)) or os.path.samefile(ours, theirs):
            continue
        difference = dictionary_difference(ours, theirs)
        if difference:
            raise ValueError(f"{path} was trained on other dictionaries than {first} "
                             f"({difference}): not one model; average checkpoints of one run")


def average(paths: List[str]) -> Dict:
    """A model-only checkpoint (``model_only``) whose model is the mean of the inputs'."""
    import torch  # here, not at the top: --help and argument errors answer without it

    if not paths:
        raise ValueError("no checkpoints to average")
    sums: Dict[str, torch.Tensor] = {}
    dtypes: Dict[str, torch.dtype] = {}
    names, aliases = None, {}
    for path in paths:
        state = load_lazily(path)
        model = state["model"]
        if names is None:
            names, aliases = set(model), tied(model)
            reference, data = model_configuration(state), trained_on(state)
        else:
            _same_model(path, paths[0], model_configuration(state), reference)
            _same_dictionaries(path, paths[0], trained_on(state), data)
        if set(model) != names:
            raise ValueError(f"{path} has different parameters from {paths[0]}: not one model")
        for name, tensor in model.items():
            if name in aliases:
                continue
            if name in sums and tensor.shape != sums[name].shape:
                raise ValueError(f"{path}: {name} has shape {tuple(tensor.shape)}, "
                                 f"{tuple(sums[name].shape)} in {paths[0]}: not one model")
            if name.endswith("." + RECORD):  # the constants a layer was built with: equal
                if name in sums and not torch.equal(sums[name], tensor):
                    raise ValueError(f"{path}: {name} = {tensor.tolist()}, "
                                     f"{sums[name].tolist()} in {paths[0]}: the layers were "
                                     f"built with other constants; not one model")
                sums[name] = tensor.clone()
            elif not tensor.is_floating_point():  # counters, integer buffers: the newest's
                sums[name] = tensor.clone()
            elif name in sums:
                sums[name].add_(tensor)  # read from the mapped file, added in float32
            else:
                sums[name] = tensor.to(torch.float32, copy=True)
            dtypes[name] = tensor.dtype
        if path != paths[-1]:
            del state, model  # unmap this file before the next is opened
    for name, total in sums.items():
        if total.is_floating_point() and not name.endswith("." + RECORD):
            sums[name] = total.div_(len(paths)).to(dtypes[name])
    averaged = {name: sums[aliases.get(name, name)] for name in model}  # the inputs' order
    return model_only(state, averaged,
                      averaged_checkpoints=[os.path.basename(p) for p in paths])


@one_line_os_errors
def cli_main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="deepnet-average-checkpoints",
        description="Average the parameters of fairseq checkpoints into one checkpoint.",
    )
    parser.add_argument("--inputs", nargs="+", required=True,
                        help="checkpoint files, or one directory with --num-*-checkpoints")
    parser.add_argument("--output", required=True, help="path of the averaged checkpoint "
                        "(never one of the inputs)")
    add_force_argument(parser, "an existing OUTPUT")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--num-epoch-checkpoints", type=at_least_one, metavar="N",
                       help="average the last N checkpointN.pt of the --inputs directory")
    group.add_argument("--num-update-checkpoints", type=at_least_one, metavar="N",
                       help="average the last N checkpoint_E_U.pt of the --inputs directory")
    args = parser.parse_args(argv)

    count = args.num_epoch_checkpoints or args.num_update_checkpoints
    try:
        if count is not None:
            if len(args.inputs) != 1 or not os.path.isdir(args.inputs[0]):
                raise ValueError("--num-*-checkpoints needs --inputs to be one directory")
            kind = "epoch" if args.num_epoch_checkpoints else "update"
            paths = last_checkpoints(args.inputs[0], count, kind)
        else:
            paths = args.inputs
            missing = [p for p in paths if not os.path.isfile(p)]
            if missing:
                raise ValueError(f"no such checkpoint file(s): {', '.join(missing)}")
        problem = output_problem(args.output, [*args.inputs, *paths], args.force)
        if problem:
            raise ValueError(problem)
        print(f"averaging {len(paths)} checkpoints: {' '.join(paths)}", file=sys.stderr)
        with signals_raise():  # a kill or Ctrl-C still removes the temporary
            save_torch(average(paths), args.output)
    except CheckpointError as err:
        print(err, file=sys.stderr)
        sys.exit(1)
    except ValueError as err:
        parser.error(str(err))
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    cli_main()
