"""Small command-line helpers of the plugin (installed as console scripts)."""

import argparse

from . import USER_DIR


def at_least_one(text: str) -> int:
    """argparse type: a count of checkpoints (0 or less would silently average all or some)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def print_user_dir(argv=None) -> None:
    """deepnet-user-dir: print the path to pass as ``--user-dir`` (for a pip-installed copy)."""
    argparse.ArgumentParser(prog="deepnet-user-dir", description=print_user_dir.__doc__
                            ).parse_args(argv)  # --help answered, anything else refused
    print(USER_DIR)


def print_model_options(argv=None) -> None:
    """deepnet-model-options: the --help of one architecture's model options.

    ``fairseq-train --arch X --help`` prints its help before it reads ``--arch``, so it never
    lists model options; this prints them, DeepNorm's overrides included.
    """
    parser = argparse.ArgumentParser(prog="deepnet-model-options", description=print_model_options.__doc__)
    parser.add_argument("--arch", default="deepnet_transformer",
                        help="one of the plugin's architectures (default: %(default)s; a name "
                             "that is not lists them)")
    args = parser.parse_args(argv)  # before fairseq is imported: --help answers at once
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    from . import register

    register()
    # the archs the plugin registers (their hooks are ours), those built by fairseq's own
    # transformer model included (post_ln_transformer, pre_ln_transformer)
    ours = sorted(a for a, hook in ARCH_CONFIG_REGISTRY.items()
                  if hook.__module__.startswith(__package__))
    if args.arch not in ours:
        parser.error(f"argument --arch: invalid choice: {args.arch!r} (choose from "
                     f"{', '.join(ours)})")
    model_parser = argparse.ArgumentParser(
        prog=f"fairseq-train DATA --user-dir {USER_DIR} --arch {args.arch}", add_help=False)
    group = model_parser.add_argument_group("model options", argument_default=argparse.SUPPRESS)
    ARCH_MODEL_REGISTRY[args.arch].add_args(group)
    model_parser.print_help()
