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


def _deepnet_form(form: str, rule: str) -> Method:
    return Method("deepnet_transformer", ("--deepnorm-constants", form), rule)


METHODS: Dict[str, Method] = {
    "deepnet": Method("deepnet_transformer", (),
                      "LN(alpha x + G(x)); ffn/v/out Xavier gain beta (Wang et al. 2022)"),
    "post_ln": Method("post_ln_transformer", (), "LN(x + G(x)) (fairseq default)"),
    "pre_ln": Method("pre_ln_transformer", (), "x + G(LN(x)), final LN (fairseq --*-normalize-before)"),
    "ds_init": Method("ds_init_transformer", (),
                      "LN(x + G(x)); layer l Xavier-uniform gain 1/sqrt(l) (Zhang et al. 2019)"),
    "admin": Method("admin_transformer", (),
                    "LN(omega*x + G(x)); omega_i = sqrt(sum_{j<i} Var y_j), profiled on batch 1 "
                    "(Liu et al. 2020)"),
    "rezero": Method("rezero_transformer", (), "x + a G(x), a = 0 learnable, no LN "
                     "(Bachlechner et al. 2020)"),
    "r_fixup": Method("r_fixup_transformer", (),
                      "x + m G(x), no LN; out/fc2 = 0, v/fc1 x L^(-1/2), m = 1 learnable "
                      "(Zhang et al. 2019, Fixup)"),
    "t_fixup": Method("t_fixup_transformer", (),
                      "x + G(x), no LN; enc v/out/ffn x 0.67 N^(-1/4), dec and embeddings "
                      "x (9M)^(-1/4) (Huang et al. 2020)"),
    "dlcl": Method("dlcl_transformer", (),
                   "Pre-LN; input of layer l+1 = sum_k W_lk LN(y_k), W learnable, starts at the "
                   "mean (Wang et al. 2019)"),
    "normformer": Method("normformer_transformer", (),
                         "Pre-LN + head scales, LN after self-attention, LN inside FFN "
                         "(Shleifer et al. 2021)"),
    "lipschitz": Method("lipschitz_transformer", (),
                        "LN(x + G(x)); weights U(+-1/sqrt(fan_in)), biases 0 (Xu et al. 2020)"),
    # Optimizer-aware DeepNorm (beyond the paper; constants.py, Su 2022), L = 2N enc, 3M dec:
    "deepnet_sgd": _deepnet_form("sgd", "LN(alpha x + G(x)); alpha = L^(1/4), gain L^(-1/4)"),
    "deepnet_adam": _deepnet_form("adam", "LN(alpha x + G(x)); alpha = L^(1/2), gain L^(-1/2)"),
    "deepnet_lamb": _deepnet_form("lamb", "LN(x + G(x)); gain L^(-1/2)"),
    "deepnet_pre_ln_sgd": _deepnet_form("pre_ln_sgd", "x + G(LN(x)); gain L^(-1/2)"),
    "deepnet_pre_ln_adam": _deepnet_form("pre_ln_adam", "x + G(LN(x)); gain 1/L"),
    "deepnet_pre_ln_lamb": _deepnet_form("pre_ln_lamb", "x + G(LN(x)); gain L^(-1/2)"),
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
        width = max(map(len, METHODS))
        for name, method in METHODS.items():
            print(f"{name:{width}s} {method.rule}")
        return
    try:
        method = get(args.method)
    except ValueError as err:
        parser.error(str(err))
    print(shlex.join(method.train_args(args.encoder_layers, args.decoder_layers)))


if __name__ == "__main__":
    main()
