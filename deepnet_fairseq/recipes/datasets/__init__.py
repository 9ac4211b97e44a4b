"""The recipes' datasets, as declarations: one module here per dataset, each holding one
``DATASET = Dataset(...)`` named as the module. Its preset, where its raw text comes from, its
languages, its task (one pair, or one model over many), its metric and the paper's numbers are
all in it; the settings, prepare, train, evaluate, the report, ``--help`` and
docs/reproducing.md's table read them from here, and no other module names a dataset (``tests/unit/test_datasets.py``
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


def _one_pair(cfg, read) -> List[str]:
    return ["--task", "translation", "--source-lang", cfg.text.data.src,
            "--target-lang", cfg.text.data.tgt]


def _many_pairs(cfg, read) -> List[str]:
    return ["--task", "translation_multi_simple_epoch", "--langs", read("langs.txt"),
            "--lang-pairs", read("lang_pairs.txt"), "--encoder-langtok", "src",
            "--decoder-langtok"]


@dataclass(frozen=True)
class Task:
    """What one model of a dataset is trained over, and what every step does differently for
    it: a dataset names one of the two below (``Dataset.task``). The hooks take the resolved
    settings and READ(NAME), the list prepare wrote into BIN/NAME (langs.txt, lang_pairs.txt)."""
    train_args: Callable[..., List[str]]  # (cfg, read) -> fairseq-train's task options
    # (cfg, read) -> fairseq-generate's task options, beside the ones of every task
    generate_args: Callable[..., List[str]]
    directions: Callable[..., str]  # (cfg, read) -> "SRC-TGT,...": the directions evaluated
    # the settings only a dataset of this task reads (settings.READ_WHEN; SRC and TGT: the
    # check that they differ)
    settings: Tuple[str, ...]
    language_tokens: int = 0  # dictionary entries the fairseq task adds (layout.dictionary_size)
    # prepare binarises pair by pair against one shared dictionary (every piece of the
    # sentencepiece model) and writes langs.txt and lang_pairs.txt, not one pair with
    # --joined-dictionary
    shared_dictionary: bool = False
    # the report lists each run's X->En, En->X and average BLEU and fits BLEU(d) = a ln d + b
    # over depth d (the paper's Table 2 and Figure 8; depth_law reads its runs), not a method
    # x depth table
    depth_law: bool = False
    # BIN is one pair's: the report can mark the runs that stalled at its source-blind baseline
    source_blind_baseline: bool = True


ONE_PAIR = Task(  # one pair SRC->TGT, fairseq's translation task
    train_args=_one_pair,
    generate_args=lambda cfg, read: [],  # fairseq-generate's default task is translation
    directions=lambda cfg, read: f"{cfg.text.data.src}-{cfg.text.data.tgt}",
    # the local text of one pair can be named file by file; many pairs' is a directory per pair
    settings=("SRC", "TGT", "TRAIN_TEXT", "VALID_TEXT", "TEST_TEXT"))
MANY_PAIRS = Task(  # fairseq's translation_multi_simple_epoch, a language token per language
    train_args=lambda cfg, read: _many_pairs(cfg, read) + [
        "--sampling-method", "temperature", "--sampling-temperature", cfg.text.run.temperature],
    generate_args=_many_pairs, directions=lambda cfg, read: read("lang_pairs.txt"),
    settings=("LANGS", "TEMPERATURE"),
    language_tokens=100,  # OPUS-100: about 100 languages; a few entries either way change little
    shared_dictionary=True, depth_law=True, source_blind_baseline=False)


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
    task: Task = ONE_PAIR  # or MANY_PAIRS: one model over many pairs, as OPUS-100
    # (cfg) -> None, or PrepareError: the SOURCE=local text raw_text reads is there, checked
    # before prepare creates anything; None: one pair's files (rawtext.local_files)
    check_local: Optional[Callable[..., None]] = None
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
            problems.append(f"its preset does not set {' and '.join(missing)} (its default sweep)")
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

