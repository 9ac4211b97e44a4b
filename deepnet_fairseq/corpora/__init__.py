"""Corpora shipped inside the package (package data), found without any setting.

``python -m deepnet_fairseq.corpora multi30k`` prints the folder, for shell scripts that run
from an installed copy rather than from the repository.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr")
MULTI30K_LANGS = ("en", "de", "fr", "cs")


def multi30k_dir():
    """The folder of Multi30k ``{train,val,test_2016_flickr}.{en,de,fr,cs}.gz``.

    Raises FileNotFoundError naming the missing file when the package data is incomplete (a
    copy installed without its data), so a caller never runs on a partial corpus.
    """
    folder = os.path.join(_HERE, "multi30k")
    for split in MULTI30K_SPLITS:
        for lang in MULTI30K_LANGS:
            path = os.path.join(folder, f"{split}.{lang}.gz")
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f"{path} is missing: this copy of deepnet_fairseq lacks its package data; "
                    "reinstall it with `bash scripts/install.sh` (or `pip install .`)")
    return folder


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["multi30k"]:
        print("usage: python -m deepnet_fairseq.corpora multi30k", file=sys.stderr)
        return 2
    print(multi30k_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
