"""The TRAIN_ARGS policy: a user's extra fairseq-train options are read with fairseq-train's
own parser (the plugin registered), and one that sets what a recipe setting already sets, or
that would move a run's files outside its directory, is refused with the setting to use."""

import argparse
import shlex
from typing import List, Tuple

from ..spec.settings import SettingError, Settings


def train_args_of(cfg: Settings) -> List[str]:
    """TRAIN_ARGS split as a shell splits it; a quoting error is a setting error, not a
    traceback (and not the end of a sweep)."""
    text = cfg.optional.optim.train_args or ""
    try:
        return shlex.split(text)
    except ValueError as err:
        raise SettingError(f"TRAIN_ARGS={text!r} (from {cfg.sources.get('TRAIN_ARGS')}): {err}; "
                           "quote it as in a shell") from None


# fairseq-train's destinations (argparse's dest: one per option, whatever its spelling) that a
# setting decides, refused in TRAIN_ARGS with the setting to use instead, whether or not this
# run's command names them (PRECISION=fp32 leaves --fp16 out: it still decides it). A run's
# records (config.json, status.json, the results table) say what its settings say; an option
# slipped behind them would train something else.
SETTING_OF_DEST = {
    "arch": "METHOD", "encoder_layers": "LAYERS or ENC_LAYERS",
    "decoder_layers": "LAYERS or DEC_LAYERS", "save_dir": "RUN_NAME or DEEPNET_WORK",
    "task": "the dataset (scripts/<dataset>/)",
    "lr": "LR", "seed": "SEED", "max_update": "MAX_UPDATE", "max_epoch": "MAX_EPOCH",
    "warmup_updates": "WARMUP", "warmup_init_lr": "WARMUP_INIT_LR", "dropout": "DROPOUT",
    "max_tokens": "MAX_TOKENS", "update_freq": "TOKENS_PER_UPDATE",
    "distributed_world_size": "NPROC and NNODES", "encoder_embed_dim": "EMBED_DIM",
    "decoder_embed_dim": "EMBED_DIM", "encoder_ffn_embed_dim": "FFN_DIM",
    "decoder_ffn_embed_dim": "FFN_DIM", "encoder_attention_heads": "HEADS",
    "decoder_attention_heads": "HEADS", "source_lang": "SRC", "target_lang": "TGT",
    "label_smoothing": "LABEL_SMOOTHING", "weight_decay": "WEIGHT_DECAY",
    "clip_norm": "CLIP_NORM", "adam_betas": "ADAM_BETAS",
    "save_interval_updates": "SAVE_INTERVAL_UPDATES", "keep_interval_updates": "AVERAGE_LAST",
    "log_interval": "LOG_INTERVAL", "ddp_backend": "DDP_BACKEND",
    "num_workers": "NUM_WORKERS", "cpu": "DEVICE", "checkpoint_activations":
    "CHECKPOINT_ACTIVATIONS", "fp16_init_scale": "FP16_INIT_SCALE",
    "fp16_scale_window": "FP16_SCALE_WINDOW", "min_loss_scale": "MIN_LOSS_SCALE",
    "distributed_port": "MASTER_PORT", "distributed_init_method": "LAUNCHER, MASTER_ADDR and "
    "MASTER_PORT", "sampling_temperature": "TEMPERATURE",
    # each of these trains in another precision than PRECISION says (--memory-efficient-fp16
    # sets fp16; the memory plan adds it itself where a card needs it)
    **dict.fromkeys(("fp16", "bf16", "amp", "memory_efficient_fp16", "memory_efficient_bf16"),
                    "PRECISION"),
}


# Options that make fairseq read or write outside the run's directories ($WORK/data, the run's
# directory), refused with the way to do it instead: a run's records could not say where its
# weights came from, and files would land where no record (and no cleaning up) finds them.
OUTSIDE = {
    **dict.fromkeys(("restore_file", "finetune_from_model", "ema_seed_model"),
                    "starts from weights outside the run (a run resumes from its own "
                    "checkpoints/checkpoint_last.pt, and its records say it trained from "
                    "scratch); train a new run instead"),
    # files a component reads (a tokenizer's model, a dictionary, more data): the run is its
    # data directory's, whose record says how it was made
    **dict.fromkeys(("encoder_embed_path", "decoder_embed_path", "quantization_config_path",
                     "sentencepiece_model", "sentencepiece_model_path", "bpe_codes",
                     "gpt2_encoder_json", "gpt2_vocab_bpe", "bpe_vocab_file", "bpe_merges",
                     "bpe_vocab", "lang_dict", "source_dict", "target_dict", "fixed_dictionary",
                     "extra_data", "sampling_weights_from_file"),
                    "reads a file outside the run that its records would not name"),
    "tensorboard_logdir": "moves the TensorBoard event files the recipe writes into the run's own "
                          "tensorboard/ (tensorboard --logdir $DEEPNET_WORK/runs shows every run)",
    **dict.fromkeys(("log_file", "aim_repo", "wandb_project", "azureml_logging"),
                    "writes the training log outside the run (or off this machine); the run's "
                    "train.log has every logged value: python -m "
                    "deepnet_fairseq.recipes.reporting.curves RUN_DIR plots them"),
    # renamed or missing checkpoints would be neither resumed nor evaluated; --no-save stays
    # allowed: a run that saves nothing (the GPU check's throughput runs) asks for it
    **dict.fromkeys(("checkpoint_suffix", "no_last_checkpoints"),
                    "changes the checkpoints the recipe resumes, averages and evaluates "
                    "(checkpoints/checkpoint_last.pt and checkpoint_*_N.pt); "
                    "SAVE_INTERVAL_UPDATES and AVERAGE_LAST set how often and how many"),
    "plasma_path": "puts a data store outside the run; the recipe loads the data itself",
    "help": "prints fairseq-train's options instead of training; run fairseq-train --help",
    "user_dir": "is set by the recipe (its plugin, deepnet_fairseq): another would load code "
                "that the run's records do not name",
}


# The splits the recipe trains and validates on, and its validation: the records say the run
# trained on DATA/bin's train split, and its status (ok / diverged) and the report read the
# valid split's loss from the log; an option here would make them say something else, or end
# a full training in "no validation loss in the log".
SPLITS = {
    **dict.fromkeys(("train_subset", "valid_subset", "combine_valid_subsets"),
                    "changes the split the run trains or validates on (the records say train "
                    "and valid of the prepared data; the test split is evaluation's)"),
    **dict.fromkeys(("disable_validation", "max_valid_steps"),
                    "removes or cuts short the validation the run's status and report are read "
                    "from (its valid loss)"),
}


class _Refused(Exception):
    """argparse's error or exit while a TRAIN_ARGS check parses: a message, not an exit."""


def _quiet(parser):
    """PARSER with argparse's exits and prints turned into _Refused (it is only asked)."""
    def fail(*args, message=None, **kwargs):
        raise _Refused(message or (args[-1] if args else ""))

    parser.error = parser.exit = fail
    parser.print_help = parser.print_usage = lambda *args, **kwargs: None
    return parser


def parse_as_fairseq(parser, argv: List[str]):
    """fairseq's namespace for ARGV as its own CLI parses it with PARSER, which gains the
    architecture's, task's, optimizer's and other chosen components' options and defaults;
    the plugin registered first, as fairseq's --user-dir registers it."""
    import logging

    from fairseq import options

    from ... import register

    register()
    utils_log = logging.getLogger("fairseq.utils")  # "--user-dir=... already imported"
    level = utils_log.level
    utils_log.setLevel(logging.WARNING)
    try:
        return options.parse_args_and_arch(parser, list(argv), parse_known=True)[0]
    finally:
        utils_log.setLevel(level)


def fairseq_train_parser(argv: List[str]):
    """fairseq-train's own parser for the command line ARGV, built as fairseq builds it, so that
    it knows every option and alias fairseq-train would accept there."""
    from fairseq import options

    parser = _quiet(options.get_training_parser())
    parse_as_fairseq(parser, argv)
    return parser


class _Seen(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        namespace.seen.append((self.dest, option_string))


def train_args_dests(extra: List[str], parser, strict: bool = True) -> List[Tuple[str, str]]:
    """(destination, option string) of every option of EXTRA as PARSER would read it: its
    option strings, abbreviations where it allows them, --opt=value, -xVALUE, found by
    argparse itself (a parser with PARSER's options that only notes which one it met)."""
    shadow = _quiet(argparse.ArgumentParser(add_help=False, allow_abbrev=parser.allow_abbrev,
                                            prefix_chars=parser.prefix_chars))
    for action in parser._actions:
        if action.option_strings:  # the positionals are the recipe's (the data directory)
            shadow.add_argument(*action.option_strings, dest=action.dest, nargs=action.nargs,
                                const=action.const, action=_Seen)
    found, unknown = shadow.parse_known_args(extra, argparse.Namespace(seen=[]))
    if unknown and strict:
        raise _Refused(f"fairseq-train would not accept {' '.join(unknown)} (no such option "
                       "here, or a value with no option before it)")
    return found.seen


def check_train_args(extra: List[str], own: List[str]) -> None:
    """Refuse TRAIN_ARGS options (``extra``) that set what the recipe's command (``own``) or a
    setting decides, or that read or write outside the run, by the destination fairseq-train's
    parser gives them, so that no alias (-a for --arch, -s/-t for the languages) gets by; and
    options fairseq-train would not accept, before anything is written."""
    if not extra:
        return
    user_dir = own[own.index("--user-dir"):own.index("--user-dir") + 2] if "--user-dir" in own \
        else []
    try:  # as fairseq builds it, with the recipe's own plugin (an extra --user-dir is refused)
        parser = fairseq_train_parser([*own, *extra, *user_dir])
    except Exception as err:  # a bad value in EXTRA (_Refused); refused below, or as this
        parser, problem = fairseq_train_parser(own), str(err) or repr(err)
    else:
        problem = None
    try:
        seen = train_args_dests(extra, parser)
    except _Refused as err:
        raise SettingError(f"TRAIN_ARGS: {err}") from None
    # [0]: the data directory; not strict: EXTRA may have chosen another architecture
    ours = {dest for dest, _ in train_args_dests(own[1:], parser, strict=False)}
    long_of = {action.dest: max(action.option_strings, key=len) for action in parser._actions
               if action.option_strings}
    refused = []
    for dest, option in seen:
        named = option if option == long_of[dest] else f"{option} ({long_of[dest]})"
        if dest in OUTSIDE or dest in SPLITS:
            refused.append(f"{named} {OUTSIDE.get(dest) or SPLITS[dest]}")
        elif dest in SETTING_OF_DEST:
            refused.append(f"{named} is set by the recipe from {SETTING_OF_DEST[dest]}: set "
                           "that instead")
        elif dest in ours:
            refused.append(f"{named} is set by the recipe: the run's records would not say "
                           "what it trained")
    if refused or problem:
        raise SettingError("TRAIN_ARGS: " + "; ".join(refused or [
            f"fairseq-train would refuse it: {problem}"]))
