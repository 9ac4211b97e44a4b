"""Decode several translation directions with one model, in one process (OPUS-100 evaluation).

    python -m deepnet_fairseq.recipes.multi_generate --directions de-en,en-de --out-dir gen \\
        -- DATA_BIN --task translation_multi_simple_epoch --path avg.pt ... (fairseq-generate options)

For each direction this runs fairseq-generate's own ``main`` (fairseq_cli.generate) with the
given options plus ``--source-lang S --target-lang T --results-path OUT_DIR/S-T``, so each
direction's output is exactly fairseq-generate's, in ``OUT_DIR/S-T/generate-<subset>.txt``.
One process instead of one per direction: OPUS-100 has 198 directions, and each
fairseq-generate start pays for importing torch and fairseq and reading the model.
A direction's results directory appears only once its decoding has finished.
"""

import argparse
import os
import shutil
import sys


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepnet_fairseq.recipes.multi_generate",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--directions", required=True, help="comma-separated SRC-TGT list")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("generate_args", nargs=argparse.REMAINDER,
                        help="after --: fairseq-generate's arguments")
    args = parser.parse_args(argv)
    generate_args = args.generate_args[1:] if args.generate_args[:1] == ["--"] else args.generate_args

    from fairseq import options
    from fairseq_cli.generate import main as generate_main

    for direction in args.directions.split(","):
        src, tgt = direction.split("-")
        final = os.path.join(args.out_dir, direction)
        if os.path.isdir(final):
            print(f"{direction}: already decoded ({final})", file=sys.stderr)
            continue
        tmp = final + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        parser_g = options.get_generation_parser()
        gen_args = options.parse_args_and_arch(parser_g, [
            *generate_args, "--source-lang", src, "--target-lang", tgt, "--results-path", tmp])
        generate_main(gen_args)
        os.replace(tmp, final)
        print(f"{direction}: decoded -> {final}", file=sys.stderr)


if __name__ == "__main__":
    main()
