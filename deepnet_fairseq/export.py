"""Export a trained DeepNet as a plain fairseq ``transformer`` (decoded by stock fairseq, without
this plugin) and, through it, as a CTranslate2 model and as a Hugging Face transformers model.

    deepnet-export CHECKPOINT --output OUT.pt
    deepnet-export CHECKPOINT --ctranslate2 DIR [--quantization int8] \\
        [--sentencepiece-model spm.model]
    deepnet-export CHECKPOINT --transformers DIR [--sentencepiece-model spm.model]

**The fold.** A DeepNorm sub-layer computes ``LN(alpha * x + G(x))``. LayerNorm does not see
the scale of its input, ``LN(c * y) = LN(y)`` for c > 0 (up to its epsilon, below), so
``LN(alpha * x + G(x)) = LN(x + G(x) / alpha)``, and ``G(x) / alpha`` is ``G`` with the weight
and bias of its last affine map divided by alpha: ``out_proj`` of self- and cross-attention
(NormFormer's ``attn_ln`` where it follows ``out_proj``) and ``fc2``. The result is fairseq's
Post-LN ``transformer`` with the same options, depths, widths and embeddings. Each side's alpha
is read from the built model's layers (``layer.alpha``), not recomputed from the options.

**Epsilon.** ``LN(y) = (y - mean) / sqrt(var + eps)``; for ``y = alpha * z`` that is
``(z - mean_z) / sqrt(var_z + eps / alpha^2)``. The folded model normalises ``z`` with
fairseq's eps (1e-5) instead of ``eps / alpha^2``: a relative change of about
``eps (1 - 1/alpha^2) / (2 var_z)`` of each normalised value, below 1e-5 whenever the
variance of a sum is at least 1/2; docs/deploying.md has the measured difference.

**What is written.** ``--output``: the model only (no optimizer state), in the form stock
fairseq loads under torch >= 2.6 with its default weights-only unpickler: the model options
as a plain dict (fairseq-train stores an ``argparse.Namespace``, which only this plugin's
``checkpoint_compat`` allowlists), ``--arch transformer``, without the plugin's ``deepnorm_*``
options and ``--user-dir``. Everything else (task options, dictionary paths, sizes, the
training position) is kept. ``--ctranslate2``: CTranslate2's own fairseq converter run on that
checkpoint, plus the sentencepiece model, in a directory that appears complete or not at all.
``--transformers``: that checkpoint as transformers' own FSMT model (fairseq's transformer,
ported) with a MarianTokenizer over the sentencepiece model and fairseq's dictionary, which
AutoModelForSeq2SeqLM and AutoTokenizer load (``hf_export``), complete or not at all.

**Inputs are safe.** The checkpoint is read with torch's weights-only unpickler, whatever
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` says (``checkpoint_io``); an unreadable one stops the export
with one line, ``cannot read PATH: CAUSE`` (exit status 1). An ``--output`` that is the
checkpoint, or a ``--ctranslate2`` or ``--transformers`` directory that holds it, is refused,
and so is any output in the run directory of the recipes the checkpoint is in (``RUN/`` and
``RUN/checkpoints/``: the recipes' own steps write there) or in a directory that does not exist;
an existing output (a non-empty directory for ``--ctranslate2`` and ``--transformers``) too,
unless ``--force``. Temporaries are removed on failure, SIGTERM and Ctrl-C, and those of a
killed earlier run by the next run. ``--data DIR`` must hold the model's dictionaries: the sizes
of their embeddings are checked against them.

Refused, with nothing written: methods other than DeepNet (not plain Post-LN after folding),
DeepNorm's Pre-LN forms (``--deepnorm-constants pre_ln_*``) and Pre-LN, unknown architectures.
fairseq's own ``transformer`` architectures pass through unchanged (weights and options);
``post_ln_transformer``, this plugin's Post-LN baseline, is folded like DeepNet (a division by
one unless it was trained with --depth-transfer, whose branch multiplier is folded the same way).
With ``--transformers``, also every option transformers' FSMT does not compute (``hf_export``).
"""

from __future__ import annotations  # (torch in annotations: it is imported where it computes)

import argparse
import glob
import os
import sys
from typing import Dict, Optional

from .average_checkpoints import model_only
from .storage.checkpoint_io import (MULTILINGUAL_TASK, CheckpointError, ExportError,
                                    dictionary_difference, load_dictionary, output_problem,
                                    read_fairseq_checkpoint, task_field)
from .storage.fileio import (add_force_argument, check_regular, copy_file, directory_published, one_line_os_errors,
                             save_torch, scratch_directory, signals_raise)
from .constants import RECORD  # (what nn.method_layers registers its buffer as)
from .methods import METHODS

QUANTIZATIONS = ("int8", "int8_float16", "float16")

# the models whose Post-LN layers are a plain fairseq transformer once each branch's output map
# is divided by (alpha / branch multiplier): DeepNet, and this plugin's Post-LN baseline
FOLDED_MODELS = (METHODS["deepnet"].model, METHODS["post_ln"].model)

# fairseq options CTranslate2's converter does not read: it would translate without them
CTRANSLATE2_UNSUPPORTED = ("scale_attn", "scale_fc", "scale_heads", "scale_resids",
                           "cross_self_attention")

SUPPORTED = ("deepnet-export exports deepnet_transformer checkpoints (Post-LN DeepNorm), "
             "this plugin's post_ln_transformer and fairseq's own transformer architectures")


def _option(model_cfg, name, default=None):
    if isinstance(model_cfg, argparse.Namespace):
        return getattr(model_cfg, name, default)
    return model_cfg.get(name, default)


def export_kind(model_cfg) -> str:
    """How a checkpoint with these model options is exported: ``fold`` (a Post-LN DeepNet or
    post_ln_transformer) or ``passthrough`` (a fairseq transformer architecture).
    Raises ExportError for everything else, from the options alone (no model is built)."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    from .constants import is_pre_ln_form

    arch = _option(model_cfg, "arch")
    model = ARCH_MODEL_NAME_REGISTRY.get(arch)
    if model is None:
        raise ExportError(f"unknown architecture --arch {arch!r}: neither fairseq nor this plugin "
                          f"registers it, so how to fold it is unknown; {SUPPORTED}")
    if model in FOLDED_MODELS:
        form = str(_option(model_cfg, "deepnorm_constants") or "paper")
        if model == METHODS["deepnet"].model and is_pre_ln_form(form):
            raise ExportError(
                f"the checkpoint uses --deepnorm-constants {form}, DeepNorm's Pre-LN form "
                f"(Pre-LN layers, alpha = 1): there is no Post-LN DeepNorm to fold; "
                f"deepnet-export folds the Post-LN forms (paper, sgd, adam, lamb) only")
        return "fold"
    if model == "transformer":
        return "passthrough"
    if any(m.model == model and m.layer_norm == "pre" for m in METHODS.values()):
        raise ExportError(f"--arch {arch} is Pre-LN, not a Post-LN model; {SUPPORTED}")
    raise ExportError(
        f"--arch {arch} (model {model}) is not a DeepNet: its layers are not a plain Post-LN "
        f"Transformer after folding, so stock fairseq and CTranslate2 cannot run it; {SUPPORTED}")


def branch_outputs(model) -> Dict[str, float]:
    """The state-dict prefix of the last affine map of every Post-LN sub-layer's branch, with
    the divisor that folds its layer into a plain Post-LN one, read from the built ``model``:
    ``LN(alpha x + m G(x)) = LN(x + G(x) m / alpha)``, alpha DeepNorm's skip scale (1 for the
    Post-LN baseline) and m the --depth-transfer branch multiplier (1 without it)."""
    from .nn.method_layers import DeepNorm, Standard

    found = {}
    for name, layer in model.named_modules():
        if not isinstance(layer, (DeepNorm, Standard)):
            continue
        if layer.normalize_before:  # export_kind refuses these; a guard for direct use
            raise ExportError(f"{name} is a Pre-LN layer: there is no Post-LN layer to fold")
        divisor = getattr(layer, "alpha", 1.0) / layer.branch_multiplier
        # NormFormer's attn_ln (--scale-attn) follows out_proj: then it is the last map.
        # --scale-resids multiplies the skip path itself, which the division leaves exact.
        last = ["attn_ln" if getattr(layer, "attn_ln", None) is not None
                else "self_attn.out_proj", "fc2"]
        if getattr(layer, "encoder_attn", None) is not None:
            last.append("encoder_attn.out_proj")
        found.update({f"{name}.{sub}": divisor for sub in last})
    if not found:
        raise ExportError("the model has no Post-LN layers to fold")
    return found


def fold(weights: Dict[str, torch.Tensor], outputs: Dict[str, float]) -> Dict[str, torch.Tensor]:
    """``weights`` with each branch output map's weight and bias divided by its alpha (in
    float64, rounded once to the stored dtype); every other tensor is the same object."""
    folded = dict(weights)
    for prefix, alpha in outputs.items():
        for key in (f"{prefix}.weight", f"{prefix}.bias"):
            if key not in folded:
                raise ExportError(f"{key} is not in the checkpoint's model: it does not match "
                                  f"the model built from its options")
            tensor = folded[key]
            folded[key] = (tensor.double() / alpha).to(tensor.dtype)
    return folded


def plain_cfg(cfg, arch: str) -> Dict:
    """The checkpoint's cfg in plain containers, the model options renamed ``arch`` and
    without this plugin's options or --user-dir (see the module doc)."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):
        cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    cfg = dict(cfg)
    model = cfg["model"]
    model = dict(vars(model) if isinstance(model, argparse.Namespace) else model)
    for option in METHODS["deepnet"].all_model_options:
        model.pop(option.name, None)
    model.update(arch=arch, _name=arch, user_dir=None)
    cfg["model"] = model
    if cfg.get("common"):
        cfg["common"] = {**cfg["common"], "user_dir": None}
    return cfg


def data_dir(stored: str, given: Optional[str]) -> str:
    """The directory with the model's dictionaries: ``given`` (--data), else ``stored``, where
    the model was trained."""
    found = given or stored
    if not os.path.isdir(found):
        raise ExportError(
            f"the data directory {found!r} with the model's dict.*.txt does not exist; pass "
            f"--data DIR, the fairseq-preprocess output the model was trained on")
    return found


def check_dictionaries(weights: Dict[str, torch.Tensor], task_cfg, data: str,
                       trained: Optional[str] = None) -> None:
    """Refuse a data directory whose dictionaries are not the model's: each side's embedding
    has one row per entry of its dict.LANG.txt (fairseq's four special symbols included), and
    where the directory the checkpoint was trained on (TRAINED [``task_cfg``'s data]) still
    holds its dict.LANG.txt, the data's holds the same tokens in the same order. A
    multilingual model's (``MULTILINGUAL_TASK``) embeddings also hold its language tokens:
    each of its dictionaries has at most the embedding's rows, and the tokens of TRAINED's."""
    from fairseq.data import data_utils

    trained = trained or task_field(task_cfg, "data")
    if task_field(task_cfg, "_name") == MULTILINGUAL_TASK:
        names = sorted(n for n in os.listdir(data) if n.startswith("dict.") and n.endswith(".txt"))
        if not names:
            raise ExportError(f"{data} holds no dict.*.txt: pass --data DIR, the "
                              f"fairseq-preprocess output the model was trained on")
        rows = min((weights[f"{side}.embed_tokens.weight"].shape[0] for side in
                    ("encoder", "decoder") if f"{side}.embed_tokens.weight" in weights),
                   default=None)
        for name in names if rows is not None else ():  # no embedding: no size to compare
            _check_dictionary(os.path.join(data, name), rows, trained, data, exact=False)
        return
    src, tgt = task_field(task_cfg, "source_lang"), task_field(task_cfg, "target_lang")
    if src is None or tgt is None:  # fairseq infers them from the data's file names
        src, tgt = data_utils.infer_language_pair(data)
        if src is None or tgt is None:
            raise ExportError(f"the checkpoint does not name its languages and {data} has no "
                              f"train.SRC-TGT.* files to tell them: pass --data DIR, the "
                              f"fairseq-preprocess output the model was trained on")
    for side, lang in (("encoder", src), ("decoder", tgt)):
        embedding = weights.get(f"{side}.embed_tokens.weight")
        if lang is None or embedding is None:
            continue
        path = os.path.join(data, f"dict.{lang}.txt")
        check_regular(path)  # a FIFO is no file to isfile: not "does not exist", but what it is
        if not os.path.isfile(path):
            raise ExportError(f"{path} does not exist: {data} is not the data the model was "
                              f"trained on; pass --data DIR, its fairseq-preprocess output")
        _check_dictionary(path, embedding.shape[0], trained, data, side=side)


def _check_dictionary(path: str, rows: int, trained: Optional[str], data: str,
                      exact: bool = True, side: str = "") -> None:
    """PATH, a dict.LANG.txt of DATA, against an embedding of ROWS rows (as many entries, or,
    not EXACT, at most as many) and the same file of TRAINED, where that is still there."""
    entries = len(load_dictionary(path))
    if entries > rows or (exact and entries != rows):
        raise ExportError(
            f"{path} has {entries} entries but the checkpoint's {side + ' ' if side else ''}"
            f"embedding has {'' if exact else 'at most '}{rows} rows: {data} is not the data "
            f"the model was trained on; pass --data DIR, its fairseq-preprocess output")
    # a checkpoint holds no dictionary, only the path of the data it was trained on: where
    # that directory is gone (a moved work directory) the embedding's size is all that
    # tells the model's dictionary from another
    recorded = os.path.join(trained, os.path.basename(path)) if trained else None
    if recorded and os.path.isfile(recorded) and not os.path.samefile(recorded, path):
        difference = dictionary_difference(path, recorded)
        if difference:
            raise ExportError(f"{difference} (the dictionary the checkpoint was trained "
                              f"on): {data} is not the data the model was trained on; "
                              f"pass --data DIR, its fairseq-preprocess output")


def export(path: str, data: Optional[str] = None) -> Dict:
    """The exported, model-only checkpoint of ``path`` (nothing is written). Raises
    CheckpointError when ``path`` cannot be read."""
    from fairseq import checkpoint_utils

    from . import register

    register()  # fairseq skips a --user-dir whose package is already imported
    # not fairseq's load_checkpoint_to_cpu: its torch.load leaves weights_only to the environment
    state = read_fairseq_checkpoint(path)
    state.pop("last_optimizer_state", None)  # Adam's moments: twice the model, not needed
    if state.get("cfg") is None:
        raise CheckpointError(path, "not a fairseq checkpoint of this format (no 'cfg' entry)")
    kind = export_kind(state["cfg"].model)
    arch = state["cfg"].model.arch if kind == "passthrough" else "transformer"
    weights = state["model"]
    if data is not None or kind == "fold":
        check_dictionaries(weights, state["cfg"].task, data_dir(state["cfg"].task.data, data))
    if kind == "fold":
        state["cfg"].task.data = data_dir(state["cfg"].task.data, data)
        # fairseq's own loading path with this plugin loaded: the alphas are the built model's
        [model], _, _ = checkpoint_utils.load_model_ensemble_and_task([path], state=state)
        weights = fold(state["model"], branch_outputs(model))
        del model
        # the recorded constants are folded in now; fairseq's transformer has no such buffer
        weights = {k: v for k, v in weights.items() if not k.endswith("." + RECORD)}
    exported = model_only(state, weights, exported_from=os.path.basename(path),
                          trained_arch=state["cfg"].model.arch)
    exported.update(args=None, cfg=plain_cfg(state["cfg"], arch))
    return exported


def to_ctranslate2(exported: Dict, data: str, output_dir: str, quantization: Optional[str],
                   sentencepiece_model: Optional[str], inputs=()) -> None:
    """Convert an exported checkpoint with CTranslate2's fairseq converter into ``output_dir``,
    with the sentencepiece model as ``sentencepiece.model``. An existing ``output_dir`` (the
    caller allowed it: --force) is replaced once the new one is complete."""
    converter_cls = ctranslate2_converter()
    model_cfg, task_cfg = exported["cfg"]["model"], exported["cfg"]["task"]
    unsupported = [f"--{name.replace('_', '-')}" for name in CTRANSLATE2_UNSUPPORTED
                   if model_cfg.get(name)]
    if unsupported:
        raise ExportError(f"CTranslate2's converter ignores {', '.join(unsupported)}: its model "
                          f"would not compute what this one does; use the --output checkpoint")
    if sentencepiece_model:  # copied beside the model: the one its dictionaries were made with
        from .hf_export import check_sentencepiece, languages

        for lang in dict.fromkeys(languages(task_cfg, data)):
            if os.path.isfile(os.path.join(data, f"dict.{lang}.txt")):
                check_sentencepiece(sentencepiece_model, os.path.join(data, f"dict.{lang}.txt"))
    with scratch_directory() as scratch, directory_published(output_dir, "ctranslate2-",
                                                                     inputs) as built:
        checkpoint = os.path.join(scratch, "exported.pt")
        # the converter assigns to the model options (args.data = ...): it needs them as the
        # Namespace fairseq-train writes, which it can read here (checkpoint_compat)
        save_torch({**exported, "cfg": {**exported["cfg"],
                                        "model": argparse.Namespace(**model_cfg)}}, checkpoint)
        converter = converter_cls(checkpoint, data,
                                  source_lang=task_field(task_cfg, "source_lang"),
                                  target_lang=task_field(task_cfg, "target_lang"))
        try:  # into the new, empty directory being built (force: it exists, made for it)
            converter.convert(built, quantization=quantization, force=True)
        except ValueError as err:  # its configuration checks
            raise ExportError(f"CTranslate2's converter refused the model: {err}") from err
        if sentencepiece_model:
            copy_file(sentencepiece_model, os.path.join(built, "sentencepiece.model"))


def ctranslate2_converter():
    try:
        from ctranslate2.converters import FairseqConverter
    except ImportError as err:
        raise ExportError(f"--ctranslate2 needs the ctranslate2 package ({err}): "
                          f"pip install 'deepnet_fairseq[deploy]' (or bash scripts/install.sh)")
    return FairseqConverter


def sentencepiece_of(cfg, given: Optional[str]) -> Optional[str]:
    """--sentencepiece-model, else the one the checkpoint was trained with (--bpe sentencepiece)."""
    if given:
        return given
    bpe = cfg.get("bpe") or {}
    return bpe.get("sentencepiece_model") if bpe.get("_name") == "sentencepiece" else None


@one_line_os_errors
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="deepnet-export",
        description="Export a DeepNet checkpoint as a plain fairseq transformer that stock "
                    "fairseq-generate loads without --user-dir, and/or as a CTranslate2 model, "
                    "and/or as a Hugging Face transformers model. "
                    "DeepNorm's skip scale alpha is folded into the branch weights (exact up to "
                    "LayerNorm's epsilon; docs/deploying.md).")
    parser.add_argument("checkpoint", help="a fairseq checkpoint trained with this plugin "
                                           "(e.g. checkpoints/checkpoint_last.pt)")
    parser.add_argument("--output", metavar="OUT.pt",
                        help="write the exported model-only checkpoint here (atomically; "
                             "into an existing directory, never the CHECKPOINT itself nor the "
                             "run directory of the recipes it is in)")
    parser.add_argument("--ctranslate2", metavar="DIR",
                        help="write a CTranslate2 model directory here (must not exist or be "
                             "empty, unless --force; not in the CHECKPOINT's run directory)")
    parser.add_argument("--transformers", metavar="DIR",
                        help="write a Hugging Face transformers model directory here (FSMT, "
                             "with a tokenizer given the sentencepiece model; must not exist or "
                             "be empty, unless --force; not in the CHECKPOINT's run directory)")
    add_force_argument(parser, "an existing OUTPUT (--output file, --ctranslate2 or "
                               "--transformers directory)")
    parser.add_argument("--quantization", choices=QUANTIZATIONS,
                        help="CTranslate2 weight type (default: float32, as trained)")
    parser.add_argument("--sentencepiece-model", metavar="SPM",
                        help="sentencepiece model to copy into the CTranslate2 directory and "
                             "to build the transformers tokenizer from (default: the "
                             "checkpoint's --sentencepiece-model, if any)")
    parser.add_argument("--data", metavar="DIR",
                        help="fairseq data directory with the model's dict.*.txt (default: the "
                             "one it was trained on, as stored in the checkpoint)")
    args = parser.parse_args(argv)
    if not (args.output or args.ctranslate2 or args.transformers):
        parser.error("nothing to write: give --output OUT.pt, --ctranslate2 DIR, or both, "
                     "and/or --transformers DIR")
    if args.quantization and not args.ctranslate2:
        parser.error("--quantization applies to --ctranslate2 only")
    written = []
    try:
        if not os.path.isfile(args.checkpoint):
            raise ExportError(f"no such checkpoint file: {args.checkpoint}")
        from .hf_export import transformers_classes

        for directory, needs in ((args.ctranslate2, ctranslate2_converter),
                                 (args.transformers, transformers_classes)):
            if directory:
                needs()  # its package is installed
        # the outputs checked against what the arguments name before anything is read, then
        # against all the checkpoint names (its data, dictionaries, sentencepiece model)
        check_outputs(args, [args.checkpoint, args.sentencepiece_model, args.data])
        if (args.ctranslate2 or args.transformers) and args.sentencepiece_model \
                and not os.path.isfile(args.sentencepiece_model):
            raise ExportError(f"no such sentencepiece model: {args.sentencepiece_model}")
        exported = export(args.checkpoint, args.data)
        check_outputs(args, inputs_of(args, exported))
        with signals_raise():  # a kill or Ctrl-C still removes the temporaries
            write(args, exported=exported, written=written)
    except CheckpointError as err:
        print(err, file=sys.stderr)
        sys.exit(1)
    except ExportError as err:
        parser.error(f"{err} ({'only ' + ', '.join(written) if written else 'nothing'} "
                     f"written)")


def inputs_of(args, exported: Dict) -> list:
    """Every path the export reads: the checkpoint, the data directory (--data, else the one
    stored in the checkpoint) and its dictionaries, the sentencepiece model (given or stored)."""
    data = args.data or task_field(exported["cfg"]["task"], "data")
    # every dict.*.txt: the languages may be unnamed in the checkpoint (fairseq infers them)
    dictionaries = glob.glob(os.path.join(glob.escape(data), "dict.*.txt")) if data else []
    return [args.checkpoint, data, *dictionaries,
            sentencepiece_of(exported["cfg"], args.sentencepiece_model)]


def check_outputs(args, inputs) -> None:
    """Refuse (ExportError) an output that is one of ``inputs`` or, a directory, holds one
    (even with --force), and an existing one without --force."""
    for flag, path, directory in (("--output", args.output, False),
                                  ("--ctranslate2", args.ctranslate2, True),
                                  ("--transformers", getattr(args, "transformers", None), True)):
        problem = path and output_problem(path, filter(None, inputs), args.force, flag,
                                          directory=directory)
        if problem:
            raise ExportError(problem)


def write(args, exported: Dict, written: list) -> None:
    """Write what main's ``args`` ask for; each path written is appended to ``written``.
    Everything that can be refused is refused before the first file is written."""
    transformers = getattr(args, "transformers", None)
    inputs = inputs_of(args, exported)  # the layer refuses each output onto them again
    if args.ctranslate2 or transformers:
        if task_field(exported["cfg"]["task"], "_name") == MULTILINGUAL_TASK:
            raise ExportError(f"{args.checkpoint} is a multilingual model ({MULTILINGUAL_TASK}:"
                              " language tokens choose its direction), which the CTranslate2 "
                              "and Hugging Face exports do not carry over: export it with "
                              "--output alone and translate with fairseq or deepnet_fairseq.load")
        data = data_dir(task_field(exported["cfg"]["task"], "data"), args.data)
        if args.data is None:  # export checked --data; the stored directory is checked here
            check_dictionaries(exported["model"], exported["cfg"]["task"], data)
        spm = sentencepiece_of(exported["cfg"], args.sentencepiece_model)
        if spm and not os.path.isfile(spm):
            raise ExportError(f"the checkpoint's sentencepiece model {spm} does not exist: "
                              f"pass --sentencepiece-model")
    if transformers:
        from . import hf_export

        converted = hf_export.convert(exported, data, spm)
    if args.output:
        save_torch(exported, args.output, inputs)
        written.append(args.output)
        print(f"wrote {args.output} (--arch {exported['cfg']['model']['arch']})",
              file=sys.stderr)
    if args.ctranslate2:
        to_ctranslate2(exported, data, args.ctranslate2, args.quantization, spm, inputs)
        print(f"wrote {args.ctranslate2} (CTranslate2, {args.quantization or 'float32'}"
              + ("" if spm else "; no sentencepiece model given: pass "
                 "--sentencepiece-model to include it") + ")", file=sys.stderr)
        written.append(args.ctranslate2)
    if transformers:
        from .hf_card import card_text

        history = (exported.get("optimizer_history") or [{}])[-1]
        card = card_text(exported["cfg"]["model"],
                         exported["extra_state"].get("trained_arch", "transformer"),
                         converted.langs, converted.weights, args.checkpoint,
                         history.get("num_updates"), hf_export.TESTED_TRANSFORMERS)
        hf_export.save(converted, transformers, spm, inputs, card)
        written.append(transformers)
        print(f"wrote {transformers} (transformers FSMTForConditionalGeneration"
              + (", MarianTokenizer" if spm else "; no tokenizer: no sentencepiece model given, "
                 "pass --sentencepiece-model to include one") + ")", file=sys.stderr)


if __name__ == "__main__":
    main()
