"""The training methods the recipes and diagnostics can select by name (METHOD=<name>).

One place maps a method name to the fairseq-train options that build its model at a given
depth; the width (base, tiny, ...) is set separately by the caller. Each method is a residual
rule plus an init rule (see the README's methods table).

    python -m deepnet_fairseq.methods                      # list the methods
    python -m deepnet_fairseq.methods deepnet 18 18        # print its fairseq-train options
"""

import argparse
import shlex
from dataclasses import dataclass
from typing import Dict, List, Tuple


@dataclass(frozen=True)
class Method:
    arch: str  # registered fairseq architecture
    options: Tuple[str, ...]  # extra fairseq-train options that select the method
    rule: str  # the residual/init rule in one line

    def train_args(self, encoder_layers: int, decoder_layers: int) -> List[str]:
        return ["--arch", self.arch, "--encoder-layers", str(encoder_layers),
                "--decoder-layers", str(decoder_layers), *self.options]


METHODS: Dict[str, Method] = {
    "deepnet": Method("deepnet_transformer", (),
                      "LN(alpha x + G(x)); ffn/v/out Xavier gain beta (Wang et al. 2022)"),
    "post_ln": Method("transformer", (), "LN(x + G(x)) (fairseq default)"),
    "pre_ln": Method("transformer", ("--encoder-normalize-before", "--decoder-normalize-before"),
                     "x + G(LN(x)), final LN (fairseq --*-normalize-before)"),
}


def get(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(
            f"unknown method {name!r}; choose one of: {', '.join(METHODS)}") from None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepnet_fairseq.methods", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("method", nargs="?", help="method name; omit to list them")
    parser.add_argument("encoder_layers", nargs="?", type=int, default=6)
    parser.add_argument("decoder_layers", nargs="?", type=int, default=6)
    args = parser.parse_args(argv)
    if args.method is None:
        for name, method in METHODS.items():
            print(f"{name:12s} {method.rule}")
        return
    try:
        method = get(args.method)
    except ValueError as err:
        parser.error(str(err))
    print(shlex.join(method.train_args(args.encoder_layers, args.decoder_layers)))


if __name__ == "__main__":
    main()
