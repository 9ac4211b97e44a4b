"""The recipes' datasets, as declarations: one module here per dataset, each holding one
``DATASET = Dataset(...)`` named as the module. Its preset, where its raw text comes from, its
languages, whether it is multilingual, its metric and the paper's numbers are all in it; the
settings, prepare, train, evaluate, the report, ``--help`` and docs/reproducing.md's table
read them from here, and no other module names a dataset (``tests/unit/test_datasets.py``
scans the package for it). Adding a dataset is adding one file to this directory
(docs/running.md, "Adding a dataset").
"""

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

# what a declaration is made of, importable from here: ``from . import CHOSEN, Dataset, Preset``
from ..base.provenance import ADMIN, CHOSEN, PAPER, Preset  # noqa: F401

# The BLEU a dataset's results table reports (report.py), and how the table names it.
METRICS = {"tok_bleu": "tokenized BLEU with compound splitting (the paper's metric)",
           "sacrebleu": "detokenised sacreBLEU",
           "sacrebleu_avg": "detokenised sacreBLEU, averaged over directions"}
# The values of the SOURCE setting: text read from a dataset's archives, your files or the
# shipped Multi30k (a dataset's default), or written by the declaration itself (a generated task).
READ_SOURCES = ("download", "local", "multi30k")
SOURCES = READ_SOURCES + ("generate",)


class Reference(NamedTuple):
    """One number of the paper (Wang et al. 2022) as transcribed in docs/methods.md; a cell the
    paper has but a declaration lacks is left blank in the reports rather than guessed."""
    method: Optional[str]  # a deepnet_fairseq.methods name, or None for a row we do not implement
    encoder_layers: int
    decoder_layers: int
    bleu: Optional[float]  # None: "diverged"
    label: str  # how the paper names the row


@dataclass(frozen=True)
class Dataset:
    name: str  # python -m deepnet_fairseq.recipes NAME STEP; runs/NAME; the module's name
    about: str  # one line for the docs' table: what it is, and which part of the paper
    languages: str  # for the docs' table: "En->De", "SRC->TGT (yours)"
    preset: Preset  # its defaults, the dataset layer of settings.resolve
    # (cfg, out, say) -> ["src-tgt", ...]: writes OUT/{train,valid,test}.SRC-TGT.{SRC,TGT}
    raw_text: Callable[..., List[str]]
    metric: str = "sacrebleu"  # a key of METRICS
    # one model over many pairs (fairseq's translation_multi_simple_epoch): a language token
    # per language, the pairs binarised against one shared dictionary
    multilingual: bool = False
    sources: Tuple[str, ...] = READ_SOURCES  # the SOURCE values it can read
    paper: Tuple[Reference, ...] = ()  # the paper's published numbers, where it has some
    note: str = ""  # printed under the results table
    order: int = 100  # its place in lists (--help, docs): the paper's order first
    # the settings only this dataset reads (its archive's address): declared with
    # read_when="its dataset's download", refused in a config file of any other dataset
    settings: Tuple[str, ...] = ()

    def __post_init__(self):
        problems = []
        if self.metric not in METRICS:
            problems.append(f"metric {self.metric!r} is not one of {', '.join(METRICS)}")
        if not self.sources or not set(self.sources) <= set(SOURCES):
            problems.append(f"sources {self.sources} are not among {SOURCES}")
        missing = [name for name in ("METHODS", "DEPTHS") if name not in self.preset.values]
        if missing:
            problems.append(f"its preset does not set {' and '.join(missing)} (its default "
                            "sweep)")
        if (self.preset.kind, self.preset.name) != ("dataset", self.name):
            problems.append(f"its preset is {self.preset.kind} {self.preset.name!r}, not "
                            f"dataset {self.name!r}")
        if problems:
            raise ValueError(f"dataset {self.name!r}: " + "; ".join(problems))


def discover(paths: Iterable[str]) -> Dict[str, Dataset]:
    """Every dataset declared in the modules of PATHS (this package's), in order."""
    found = []
    for module in pkgutil.iter_modules(list(paths)):
        if module.name.startswith("_"):  # __main__: the docs table, not a dataset
            continue
        declared = getattr(importlib.import_module(f"{__name__}.{module.name}"), "DATASET", None)
        if not isinstance(declared, Dataset) or declared.name != module.name:
            raise TypeError(f"{__name__}.{module.name} must declare DATASET = Dataset("
                            f"name={module.name!r}, ...): one dataset per module, named as it")
        found.append(declared)
    return {d.name: d for d in sorted(found, key=lambda d: (d.order, d.name))}


DATASETS: Dict[str, Dataset] = discover(__path__)


def markdown_table() -> str:
    """docs/reproducing.md's table of datasets, from the declarations (a test checks it)."""
    rows = ["| dataset | what | languages | default sweep | BLEU reported |",
            "|---|---|---|---|---|"]
    for d in DATASETS.values():
        values = {name: v.value for name, v in d.preset.values.items()}
        sweep = (f"{', '.join(values['METHODS'].split())} x "
                 f"{'/'.join(values['DEPTHS'].split())} layers per side")
        rows.append(f"| `{d.name}` | {d.about} | {d.languages} | {sweep} | {METRICS[d.metric]} |")
    return "\n".join(rows) + "\n"

