"""How much a translation model uses its source: ``deepnet-source-use``.

A model that has collapsed into a target-side language model writes fluent sentences that do
not depend on the input. Two measurements on a fixed batch of held-out sentence pairs, in eval
mode (no dropout), for each checkpoint given:

``source_gain``
    teacher-forced NLL (bits per target token, no label smoothing) with every sentence's
    source replaced by another sentence's of the same batch, minus the NLL with the true
    sources. Zero for a model that ignores its source; the larger, the more the source counts.
``share.{self,cross,ffn}.{i}``
    for decoder layer i, the share of each sub-layer's branch in what the sub-layer adds up:
    mean over target positions of ``||b|| / ||s(x, b)||``, with ``b`` the branch output
    (self-attention, cross-attention or FFN, after dropout) and ``s`` the layer's own
    ``residual_connection`` (``x + b`` for Post-LN and Pre-LN, ``alpha * x + b`` for DeepNet).
    A small cross-attention share means the source barely moves the decoder's hidden state.
``encoder_spread``
    how much the encoder's output states differ across the batch's source tokens: their
    standard deviation over the tokens, per channel, averaged, over their root mean square.
    Zero for an encoder that writes one and the same vector for every token of every sentence
    (a collapsed encoder: no source can matter, whatever the decoder does); a decoder that
    ignores a working encoder shows a source gain near zero with a spread well above it.
``distinct``
    how many different greedy translations the batch's sources get (fairseq's
    SequenceGenerator, beam 1, at most 1.2 x source + 10 tokens): a model that ignores its
    source writes the same few sentences for every input.

Works for any model whose decoder layers are fairseq ``TransformerDecoderLayerBase`` (Post-LN,
Pre-LN, DeepNet and the methods built on fairseq's layers): the measurement wraps the
``residual_connection`` each sub-layer calls, in order self-attention, cross-attention, FFN.

A multilingual model (``translation_multi_simple_epoch``, the OPUS-100 recipe's) is measured
per direction, one row each: every direction's batch is its own first pairs of the split, built
by the task's own loader (language tokens as in training), its sources exchanged among
themselves, its greedy translations begun with the target's language token as fairseq-generate
begins them; ``--directions`` picks some. A bilingual model's one row names its direction too.

    deepnet-source-use DATA_BIN --checkpoints run/checkpoint_1_200.pt run/checkpoint_2_400.pt \\
        --out source_use.csv

DATA is the task's data directory for every checkpoint (it replaces the one stored in them);
a DATA without dictionaries, or with dictionaries of another size than a model's embeddings
(``deepnet-export``'s check), is refused, and an unreadable checkpoint stops the run with one
line, ``cannot read PATH: CAUSE`` (exit status 1).
"""

import argparse
import math
import os
import sys
from typing import Dict, List, Optional

from ..hub import is_multilingual
from .common import no_grad
from ..storage.fileio import add_force_argument, one_line_os_errors

SUBLAYERS = ("self", "cross", "ffn")
# the printed table's measured columns after the nll: (key, head, width)
COLUMNS = (("nll_shuffled", "nll_shuf", 8), ("source_gain", "gain", 6),
           ("encoder_spread", "spread", 6), ("share.self", "self", 6),
           ("share.cross", "cross", 6), ("share.ffn", "ffn", 6))


def _first(dataset, sentences: int) -> Dict:
    """The first ``sentences`` pairs of ``dataset`` as one collated batch (fixed, reproducible)."""
    return dataset.collater([dataset[i] for i in range(min(sentences, len(dataset)))])


def held_out_batch(task, subset: str, sentences: int) -> Dict:
    """The first ``sentences`` pairs of ``subset`` of a bilingual task, as one batch."""
    task.load_dataset(subset)
    return _first(task.dataset(subset), sentences)


def direction_batches(task, subset: str, sentences: int) -> Dict[str, Dict]:
    """{"SRC-TGT": batch} of ``subset``: one direction for a bilingual task; every direction of
    a multilingual one, each its own first pairs, loaded direction by direction by the task's
    data manager (its validation set concatenates them: a batch of its first pairs would hold
    one direction alone)."""
    if not is_multilingual(task):
        name = f"{task.cfg.source_lang}-{task.cfg.target_lang}"
        return {name: held_out_batch(task, subset, sentences)}
    datasets, _params = task.data_manager.load_split_datasets(subset, training=False)
    # the data manager's keys are "CATEGORY:SRC-TGT" ("main:de-en")
    return {key.split(":")[-1]: _first(dataset, sentences) for key, dataset in datasets}


def _nll_bits(model, net_input, target, pad: int) -> float:
    """Mean teacher-forced NLL of the non-pad target tokens, in bits."""
    output = model(**net_input)
    lprobs = model.get_normalized_probs(output, log_probs=True)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    mask = target.ne(pad)
    return (nll[mask].sum() / mask.sum()).item() / math.log(2)


@no_grad
def measure(model, batch, pad: int) -> Dict[str, float]:
    """``source_gain``, both NLLs and the per-layer branch shares of ``model`` on ``batch``."""
    model.eval()
    layers = list(model.decoder.layers)
    target = batch["target"]
    positions = target.ne(pad).t()  # T x B, the layout of the decoder's hidden states
    shares: Dict[str, List[float]] = {}

    def recording(index, original):
        calls = []

        def residual_connection(x, residual):
            out = original(x, residual)
            if len(calls) < len(SUBLAYERS):  # the true-source pass only
                ratio = x.norm(dim=-1) / out.norm(dim=-1).clamp_min(1e-12)
                shares[f"share.{SUBLAYERS[len(calls)]}.{index}"] = ratio[positions].mean().item()
            calls.append(None)
            return out
        return residual_connection

    for index, layer in enumerate(layers):
        # an instance attribute shadows the class's method for this measurement only
        layer.residual_connection = recording(index, layer.residual_connection)
    try:
        nll_true = _nll_bits(model, batch["net_input"], target, pad)
        shuffled = dict(batch["net_input"])
        # each target is scored against its neighbour's source: same lengths and padding
        # statistics as the true batch, but no information about this sentence
        shuffled["src_tokens"] = shuffled["src_tokens"].roll(1, dims=0)
        shuffled["src_lengths"] = shuffled["src_lengths"].roll(1, dims=0)
        nll_shuffled = _nll_bits(model, shuffled, target, pad)
    finally:
        for layer in layers:
            del layer.residual_connection
    result = {"nll_true": nll_true, "nll_shuffled": nll_shuffled,
              "source_gain": nll_shuffled - nll_true,
              "encoder_spread": encoder_spread(model, batch["net_input"])}
    for sub in SUBLAYERS:
        values = [shares[f"share.{sub}.{i}"] for i in range(len(layers))
                  if f"share.{sub}.{i}" in shares]
        result[f"share.{sub}"] = sum(values) / len(values) if values else float("nan")
    result.update(shares)
    return result


@no_grad
def encoder_spread(model, net_input) -> float:
    """``encoder_spread`` (the module's docstring) of fairseq's encoder output on NET_INPUT."""
    out = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])
    states = out["encoder_out"][0].transpose(0, 1)  # B x T x C
    masks = out.get("encoder_padding_mask") or [None]
    if masks[0] is not None:
        states = states[~masks[0]]  # the tokens, padding left out
    states = states.reshape(-1, states.size(-1))
    return (states.std(0, unbiased=False).mean()
            / states.pow(2).mean().sqrt().clamp_min(1e-12)).item()


@no_grad
def distinct_greedy(model, task, batch, target_lang: Optional[str] = None) -> int:
    """Number of different greedy translations of the batch's sources; for a multilingual
    TASK, into ``target_lang``, begun with its language token by the task's own
    ``inference_step`` (which reads the target from its options, as fairseq-generate sets it)."""
    from fairseq.sequence_generator import SequenceGenerator

    model.eval()
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=1,
                                  max_len_a=1.2, max_len_b=10)
    if not is_multilingual(task):
        hypotheses = generator.generate([model], batch)
    else:
        kept = task.args.target_lang
        task.args.target_lang = target_lang
        try:
            hypotheses = task.inference_step(generator, [model], batch)
        finally:
            task.args.target_lang = kept
    return len({tuple(best[0]["tokens"].tolist()) for best in hypotheses})


def missing_dictionaries(data: str, state=None) -> str:
    """Why ``data`` cannot be the task's data directory ('' if it can): it must exist and hold
    fairseq-preprocess's dict.*.txt -- with ``state``, those of the checkpoint's languages."""
    if not os.path.isdir(data):
        return f"DATA {data} is not a directory; give the fairseq-preprocess output directory"
    from ..storage.checkpoint_io import task_field

    task = task_field(state.get("cfg"), "task") if state is not None else None
    langs = [task_field(task, key) for key in ("source_lang", "target_lang")]
    names = ([f"dict.{lang}.txt" for lang in langs if lang] if any(langs) else
             [name for name in os.listdir(data) if name.startswith("dict.")
              and name.endswith(".txt")] or ["dict.*.txt"])
    absent = [name for name in names if not os.path.isfile(os.path.join(data, name))]
    if absent:
        return (f"DATA {data} has no {', '.join(absent)}: give the fairseq-preprocess output "
                f"directory the model was trained on")
    return ""


def unmeasured_task(state) -> str:
    """Why the checkpoint's task is not one this tool measures ('' if it is): its batches are
    ``LanguagePairDataset``s decoded as they are, which fairseq's ``translation`` task and the
    tasks built on it give, and ``translation_multi_simple_epoch`` direction by direction."""
    from fairseq.tasks import TASK_REGISTRY
    from fairseq.tasks.translation import TranslationTask

    from ..storage.checkpoint_io import MULTILINGUAL_TASK, task_field

    name = task_field(task_field(state.get("cfg"), "task"), "_name")
    if name == MULTILINGUAL_TASK or (isinstance(TASK_REGISTRY.get(name), type)
                                     and issubclass(TASK_REGISTRY[name], TranslationTask)):
        return ""
    return (f"its task is {name!r}; deepnet-source-use measures models of fairseq's "
            f"translation task and of {MULTILINGUAL_TASK} (the OPUS-100 recipe's). For "
            "another, decode test sentences with deepnet_fairseq.load(CHECKPOINT): one "
            "translation for every input is a model that ignores its source")


def load(path: str, data: str):
    """Model, task and update number of a fairseq checkpoint, the task reading ``data``.
    Raises CheckpointError, ValueError (``data`` unusable)."""
    from fairseq import checkpoint_utils

    from .. import register
    from ..export import ExportError, check_dictionaries
    from ..storage.checkpoint_io import read_checkpoint, read_fairseq_checkpoint, trained_on

    register()  # the plugin's models and tasks, which the checkpoint names
    # the data the checkpoint was trained on, before DATA replaces it in the state read below
    trained = trained_on(read_checkpoint(path, mmap=True))
    # read weights-only here: given a state, fairseq reads no file and also ignores its
    # arg_overrides, so DATA has to be put into the state itself
    state = read_fairseq_checkpoint(path, arg_overrides={"data": data})
    problem = unmeasured_task(state) or missing_dictionaries(data, state)
    if problem:
        raise ValueError(f"{path}: {problem}")
    try:  # a model of another vocabulary: one line, not fairseq's size-mismatch traceback
        check_dictionaries(state["model"], state["cfg"]["task"], data, trained)
    except ExportError as err:
        raise ValueError(f"{path}: {str(err).split(': pass --data')[0]}") from None
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], state=state)
    history = state.get("optimizer_history") or [{}]
    return models[0], task, history[-1].get("num_updates", 0)


@one_line_os_errors
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="deepnet-source-use", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Columns: update, direction, nll_true, nll_shuffled, source_gain (bits/token), "
               "encoder_spread, "
               "share.{self,cross,ffn} (mean over decoder layers) and per layer, "
               "distinct (different greedy translations of the --sentences sources).")
    parser.add_argument("data", help="fairseq binarised data directory (fairseq-preprocess output)")
    parser.add_argument("--checkpoints", nargs="+", required=True, help="checkpoint files")
    parser.add_argument("--subset", default="valid", help="held-out split (default: valid)")
    parser.add_argument("--sentences", type=int, default=256,
                        help="sentence pairs in the measured batch of each direction "
                             "(default: 256)")
    parser.add_argument("--directions", nargs="+", metavar="SRC-TGT",
                        help="a multilingual model's directions to measure (default: every "
                             "direction of the split)")
    parser.add_argument("--out", help="write the table as CSV here (atomically)")
    add_force_argument(parser, "an existing --out")
    args = parser.parse_args(argv)
    missing = [p for p in args.checkpoints if not os.path.isfile(p)]
    if missing:
        parser.error(f"checkpoint(s) not found: {', '.join(missing)}")
    if args.sentences < 2:
        parser.error("--sentences must be at least 2 (sources are exchanged within the batch)")
    from ..storage.checkpoint_io import output_problem

    # the data directory is an input too, and the checkpoints' runs: nothing is written there
    problem = args.out and output_problem(args.out, [*args.checkpoints, args.data], args.force,
                                          "--out")
    if problem:
        parser.error(problem)
    problem = missing_dictionaries(args.data)
    if problem:
        parser.error(problem)

    from ..storage.checkpoint_io import CheckpointError
    from .common import write_csv

    rows, batches = [], None
    print(f"{'update':>7} {'direction':>9} {'nll':>7} "
          + " ".join(f"{head:>{width}}" for _key, head, width in COLUMNS)
          + f" {'distinct':>8}  checkpoint")
    for path in args.checkpoints:
        try:
            model, task, update = load(path, args.data)
        except CheckpointError as err:
            print(err, file=sys.stderr)
            return 1
        except ValueError as err:
            parser.error(str(err))
        if batches is None:  # the first checkpoint's task reads them; every one is measured on them
            batches = direction_batches(task, args.subset, args.sentences)
            unknown = sorted(set(args.directions or ()) - set(batches))
            if unknown:
                parser.error(f"--directions {' '.join(unknown)}: {args.data}'s {args.subset} "
                             f"set has {', '.join(sorted(batches))}")
        for direction, batch in batches.items():
            if args.directions and direction not in args.directions:
                continue
            row = {"checkpoint": path, "update": update, "direction": direction,
                   "distinct": distinct_greedy(model, task, batch, direction.split("-")[-1]),
                   **measure(model, batch, task.target_dictionary.pad())}
            rows.append(row)
            print(f"{update:>7} {direction:>9} {row['nll_true']:7.3f} "
                  + " ".join(f"{row[key]:{width}.3f}" for key, _head, width in COLUMNS)
                  + f" {row['distinct']:>8}  {path}", flush=True)
    if args.out:
        fields = list(dict.fromkeys(key for row in rows for key in row))
        write_csv(args.out, rows, fields, ".5f")
    return 0


if __name__ == "__main__":
    sys.exit(main())
