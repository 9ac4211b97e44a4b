"""Valid and test pairs fairseq would refuse, found before a run trains (issue 43).

fairseq-train checks every validation pair against the model's positions and its batch size
only when it first validates, after an epoch of training; evaluation's fairseq-generate checks
the test pairs only after the whole run. Both refuse a single pair that does not fit, so a
run would train for nothing. ``refuse_too_long`` asks the same questions of the binarised
valid and test splits before the train step launches fairseq (and evaluate before it decodes),
with the limits read from the two steps' own command lines by fairseq's own parsers:

* positions (``FairseqTask.filter_indices_by_size`` over ``data_utils.
  filter_paired_dataset_indices_by_size``): a pair's source tokens above the smaller of the
  task's ``--max-source-positions`` and the encoder's ``max_positions()`` (its positional
  embedding's own limit), or its target tokens above the decoder's; fairseq-train's validation
  and fairseq-generate raise unless ``--skip-invalid-size-inputs-valid-test``. In generate
  the task's limits are generate's own options, the model's those it was trained with;
* batch size (``data_utils.batch_by_size``): a pair's ``num_tokens``, max(source, target),
  above ``--max-tokens-valid`` (``--max-tokens`` unless set) in validation, or above
  generate's ``--max-tokens`` (twice MAX_TOKENS, ``commands.evaluate_command``): an assertion.

A pair's tokens are its binarised sizes (pieces and ``</s>``, as fairseq-preprocess wrote
them, read by fairseq's own indexed-dataset reader), as the task loads them: the multilingual
task (``translation_multi_simple_epoch``) prepends a language token to the source
(``--encoder-langtok``) and to the target (``--decoder-langtok``) of every pair, unless
``--lang-tok-replacing-bos-eos``; ``--truncate-source`` cuts the source to its positions.
"""

import argparse
import math
import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ...storage.records import read_record
from ..spec.settings import SettingError, Settings
from ...storage.fileio import RecordError
from .commands import evaluate_command
from .train_args import parse_as_fairseq
from ..spec.paths import paths

VALID, TEST = "valid", "test"


@dataclass
class Limits:
    """What one fairseq step compares each pair of SPLIT against."""
    split: str
    step: str  # who refuses, for the message
    # source, target; None where fairseq skips long pairs instead (its flag)
    positions: Optional[Tuple[int, int]]
    max_tokens: Optional[int]  # None: no token limit
    tokens_option: str  # the option max_tokens comes from, for the message
    langtok: Tuple[int, int]  # tokens the task adds to each side
    truncate_source: bool


def train_args(command: Sequence[str], bin_dir: str):
    """fairseq-train's namespace of a training COMMAND (any launcher: its arguments start at
    the data directory)."""
    from fairseq import options

    return parse_as_fairseq(options.get_training_parser(), command[list(command).index(bin_dir):])


def model_positions(args) -> Tuple[int, int]:
    """The trained model's ``max_positions()``, as fairseq's Transformer encoder and decoder
    compute it (every architecture of the plugin is one): the configured positions, capped by
    the positional embedding's own limit (sinusoidal: 100,000) where there is one."""
    from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, \
        DEFAULT_MAX_TARGET_POSITIONS
    from fairseq.modules import PositionalEmbedding

    def side(positions, learned: bool) -> int:
        positions = int(positions)
        if getattr(args, "no_token_positional_embeddings", False):
            return positions
        # the embedding's limit does not depend on its width or padding index: a small one
        return min(positions, PositionalEmbedding(positions, 4, 1, learned=learned).max_positions)

    # unset (the model's options default to none), as the model's build_model sets them
    return (side(getattr(args, "max_source_positions", None) or DEFAULT_MAX_SOURCE_POSITIONS,
                 bool(getattr(args, "encoder_learned_pos", False))),
            side(getattr(args, "max_target_positions", None) or DEFAULT_MAX_TARGET_POSITIONS,
                 bool(getattr(args, "decoder_learned_pos", False))))


def _langtok(args) -> Tuple[int, int]:
    if args.task != "translation_multi_simple_epoch" or \
            getattr(args, "lang_tok_replacing_bos_eos", False):
        return 0, 0
    return int(bool(getattr(args, "encoder_langtok", None))), \
        int(bool(getattr(args, "decoder_langtok", False)))


def _task_field(args, name: str) -> int:
    """A task option as fairseq's config of ARGS holds it (``convert_namespace_to_omegaconf``):
    ARGS's value, else the task's default, from its dataclass or, for a task that declares its
    options by ``add_args`` (``translation_multi_simple_epoch``), from those, as fairseq's
    ``_set_legacy_defaults`` fills them in."""
    value = getattr(args, name, None)
    if value is None:
        from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY

        if args.task in TASK_DATACLASS_REGISTRY:
            value = TASK_DATACLASS_REGISTRY[args.task].__dataclass_fields__[name].default
        else:
            parser = argparse.ArgumentParser(add_help=False)
            TASK_REGISTRY[args.task].add_args(parser)
            value = parser.get_default(name)
    return int(value)


def _limits(split: str, step: str, args, model: Tuple[int, int]) -> Limits:
    """The limits of SPLIT in a step whose options fairseq parsed into ARGS, over a model of
    positions MODEL, as the step reads them: the fields fairseq's config of ARGS takes from
    ARGS (its parser has already made ``--max-tokens-valid`` default to ``--max-tokens``), read
    from ARGS without that conversion (a hydra compose of about a second, which was most of the
    time of every check) and without setting the task up (OPUS-100's loads a dictionary per
    language). The task's ``max_positions()`` is its max_source_positions and
    max_target_positions in both tasks (its own defaults where unset: the model's options share
    their names, not their defaults). tests/unit/test_hostile_lengths.py checks the limits
    against fairseq's own refusals."""
    # as the config types them: argparse leaves an Optional[int] option's value text
    max_tokens, train_max = (None if v is None else int(v) for v in (
        args.max_tokens_valid if split == VALID else args.max_tokens, args.max_tokens))
    positions = None if args.skip_invalid_size_inputs_valid_test else (
        min(_task_field(args, "max_source_positions"), model[0]),
        min(_task_field(args, "max_target_positions"), model[1]))
    return Limits(split, step, positions, max_tokens,
                  "--max-tokens" if max_tokens == train_max else "--max-tokens-valid",
                  _langtok(args), bool(getattr(args, "truncate_source", False)))


def valid_limits(args) -> Limits:
    """fairseq-train's validation (``Trainer.get_valid_iterator``) under the training options
    ARGS: the task's and the model's positions, ``--max-tokens-valid`` (``--max-tokens`` unless
    given)."""
    return _limits(VALID, "fairseq-train's validation", args, model_positions(args))


def test_limits(generate_argv: Sequence[str], trained) -> Limits:
    """Evaluation's fairseq-generate (``fairseq_cli.generate``) of GENERATE_ARGV over a model
    trained with the options TRAINED: generate's task positions and the model's, its
    ``--max-tokens``."""
    from fairseq import options

    return _limits(TEST, "evaluation's fairseq-generate",
                   parse_as_fairseq(options.get_generation_parser(), generate_argv),
                   model_positions(trained))


def pair_files(bin_dir: str, split: str, src: str, tgt: str) -> Optional[str]:
    """The prefix of a direction's binarised split, looked up as fairseq's tasks look it up
    (SPLIT.SRC-TGT, else the reverse direction's SPLIT.TGT-SRC); None where neither exists."""
    from fairseq.data import indexed_dataset

    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        prefix = os.path.join(bin_dir, f"{split}.{pair}.")
        if indexed_dataset.dataset_exists(prefix + src, impl=None):  # the tasks' default
            return prefix
    return None


def pair_sizes(prefix: str, src: str, tgt: str):
    """(source sizes, target sizes) of a binarised split, each pair's pieces with ``</s>``,
    by fairseq's own reader."""
    from fairseq.data import data_utils

    sizes = []
    for lang in (src, tgt):
        # held while its sizes are copied: the mmap reader unmaps them when it is collected
        dataset = data_utils.load_indexed_dataset(prefix + lang, None)
        sizes.append(dataset.sizes.astype("int64"))
        del dataset
    return tuple(sizes)


def problem(limits: Limits, direction: str, sizes, raw_name: str, max_tokens_setting: int,
            ) -> Optional[str]:
    """Why LIMITS's step would refuse a pair of DIRECTION's sizes (``pair_sizes``), one line
    naming the longest such pair (its line in RAW_NAME, the text prepare read) and what to do;
    None where every pair fits. MAX_TOKENS_SETTING: MAX_TOKENS, which the step's token limit
    scales."""
    src, tgt = sizes
    if limits.truncate_source and limits.positions:
        src = src.clip(max=limits.positions[0])
    src, tgt = src + limits.langtok[0], tgt + limits.langtok[1]
    where = (f"{limits.split} {direction}" + (" (a language token added to each side)"
                                               if any(limits.langtok) else ""))
    if limits.positions:
        over = (src > limits.positions[0]) | (tgt > limits.positions[1])
        if over.any():
            excess = (src - limits.positions[0]).clip(min=0) + \
                (tgt - limits.positions[1]).clip(min=0)
            worst = int(excess.argmax())
            return (f"{where}: {int(over.sum())} pair(s) longer than the model's positions "
                    f"({limits.positions[0]} source, {limits.positions[1]} target tokens), which "
                    f"{limits.step} would refuse; the longest, pair {worst} (line {worst + 1} of "
                    f"{raw_name}), has {src[worst]} source and {tgt[worst]} target tokens. "
                    f"Shorten or drop those lines in your {limits.split} text and prepare again "
                    f"(after deleting the data directory, which the recipes made)")
    if limits.max_tokens is not None:
        tokens = src.clip(min=tgt)  # fairseq's num_tokens: the longer side
        over = tokens > limits.max_tokens
        if over.any():
            worst = int(tokens.argmax())
            need = tokens[worst]
            if limits.tokens_option == "--max-tokens":
                fix = (f"raise MAX_TOKENS to at least "
                       f"{math.ceil(need * max_tokens_setting / limits.max_tokens)}")
            else:
                fix = f"raise {limits.tokens_option} in TRAIN_ARGS to at least {need}"
            origin = f" (from MAX_TOKENS={max_tokens_setting})" \
                if limits.tokens_option == "--max-tokens" else ""
            return (f"{where}: {int(over.sum())} pair(s) longer than {limits.step}'s "
                    f"{limits.tokens_option} {limits.max_tokens}{origin}, which it would refuse; "
                    f"the longest, pair {worst} (line {worst + 1} of {raw_name}), has {need} "
                    f"tokens (its longer side). {fix[0].upper()}{fix[1:]}, or shorten or drop "
                    f"those lines in your {limits.split} text and prepare again (after deleting "
                    "the data directory, which the recipes made)")
    return None


def directions(evaluate_argv: Sequence[str]) -> List[Tuple[str, str]]:
    """The (source, target) directions a step validates and evaluates: the --directions of its
    evaluate command EVALUATE_ARGV (SRC-TGT, or every pair of a multilingual dataset's
    lang_pairs.txt)."""
    pairs = list(evaluate_argv)[list(evaluate_argv).index("--directions") + 1]
    return [tuple(pair.split("-")) for pair in pairs.split(",")]


def refuse_too_long(cfg: Settings, train_command: Sequence[str], splits=(VALID, TEST)) -> None:
    """Refuse (a SettingError, one line) the run of CFG, trained by TRAIN_COMMAND, when a pair
    of SPLITS of its prepared data would be refused by fairseq-train's validation (valid) or
    evaluation's fairseq-generate (test): too long for the model's positions, or for the step's
    --max-tokens. Every direction is read; the message names the first refused one."""
    where = paths(cfg)
    evaluate_argv = evaluate_command(cfg)
    generate_argv = evaluate_argv[evaluate_argv.index("--") + 1:]
    found = [(split, src, tgt, prefix) for split in splits
             for src, tgt in directions(evaluate_argv)
             for prefix in [pair_files(where.bin, split, src, tgt)] if prefix]
    if not found:
        return  # nothing binarised: fairseq names a missing split itself
    trained = train_args(train_command, where.bin)
    limits = {VALID: valid_limits(trained) if VALID in splits else None,
              TEST: test_limits(generate_argv, trained) if TEST in splits else None}
    for split in splits:
        refused = []
        for _, src, tgt, prefix in (f for f in found if f[0] == split):
            pair = os.path.basename(prefix).split(".")[1]
            raw = os.path.join(where.raw, f"{split}.{pair}.{{{src},{tgt}}}")
            why = problem(limits[split], f"{src}-{tgt}", pair_sizes(prefix, src, tgt), raw,
                          cfg.machine.max_tokens)
            if why:
                refused.append(why)
        if refused:
            more = f" ({len(refused) - 1} other direction(s) too)" if len(refused) > 1 else ""
            raise SettingError(refused[0] + more)


def refuse_too_long_to_evaluate(cfg: Settings) -> None:
    """``refuse_too_long`` of the test split for evaluate, with the model's positions from the
    command its run trained with (its config.json); nothing where that record is missing or
    unreadable (evaluate's own checks deal with it)."""
    where = paths(cfg)
    try:
        record = read_record(os.path.join(where.run_dir, "config.json"), "run-config")
    except RecordError:
        return
    command = (record or {}).get("command")
    if command and where.bin in command:
        refuse_too_long(cfg, command, splits=(TEST,))
