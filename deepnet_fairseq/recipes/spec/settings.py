"""The recipes' settings: one list of known names, read from the presets and the environment.

Where a value comes from, first match wins:

1. the environment, ``DEEPNET_<NAME>`` (always accepted, and always wins);
2. the environment, ``<NAME>``, for every name except the prefix-only ones (``WORK``, which
   several HPC systems predefine, and ``PYTHON``): those are read only as ``DEEPNET_WORK`` /
   ``DEEPNET_PYTHON``;
3. the training settings of the method's declaration (``methods``: T-Fixup's warmup);
4. the presets (``presets.py``), in this order: the size (SIZE other than full), the dataset
   (its declaration's preset, ``datasets/``), the model width (MODEL), the machine (DEVICE);
5. the default below, or a value derived from other settings (``ENC_LAYERS`` from ``LAYERS``).

Every value is checked (numbers are numbers, choices are among the choices). A variable that
is not a setting but looks like one is an error, not ignored: any unknown ``DEEPNET_*`` name,
and a bare name close to a setting's name (``LAYER=18``, ``METHDO``), except the common
system variables in ``NOT_SETTINGS``.
"""

import difflib
import math
import os
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from . import presets
from ..datasets import DATASETS, SOURCES
from ..base.machine import count_gpus
from ..base.errors import SettingError
from ...fairseq_log import SOURCE_BLIND_BITS

PREFIX = "DEEPNET_"


@dataclass(frozen=True)
class Setting:
    # int | int|auto (a whole number or the word auto) | float | text | words | ints | betas
    # | path | one of "a|b|c"
    kind: str
    help: str
    default: Optional[str] = None  # None: from a config file, derived, or unset
    prefix_only: bool = False
    # a numeric setting's range: (lowest, highest, whether the lowest itself is allowed),
    # None for no bound; checked once all settings are resolved, before anything is written
    bounds: Optional[Tuple[Optional[float], Optional[float], bool]] = None
    # (regular expression, what it asks for) that every word of the value must match
    pattern: Optional[Tuple[str, str]] = None
    # who may set it: "run" (any run of a sweep may differ), "entry" (a RUNS entry's own fields
    # METHOD:ENC:DEC say it), "sweep" (what the sweep is), "data" (the prepared data depends
    # on it: prepare records it, every run shares it), "prepare" (how prepare works),
    # "machine" (where and how processes run: the same for every run)
    scope: str = "run"
    # what a value changes, so that a record made with another value is never reused: DATA (the
    # prepared data: prepare redoes or refuses a data directory prepared otherwise; every setting of
    # scope "data" and only those) or TRAINED (what a run trains: a run is not resumed or kept under
    # another value); None for the rest (where, how fast, how long, how often it logs: a run resumed
    # on another machine, with another layout or a longer MAX_UPDATE, trains the same model)
    affects: Optional[str] = None
    # when a dataset reads it (a key of READ_WHEN), None for always: a config file that sets it
    # where it is not read is refused, since the value would be dropped without a word
    read_when: Optional[str] = None


DATA, TRAINED = "data", "trained"


def _s(kind, help, default=None, prefix_only=False, bounds=None, pattern=None, scope="run",
       affects=None, read_when=None):
    if scope == "data":  # one declaration: who may set it and what it changes agree
        affects = DATA
    return Setting(kind, help, default, prefix_only, bounds, pattern, scope, affects, read_when)


# read_when -> (whether the resolved settings read it, what reads it): from the dataset's
# declaration (datasets/: its task's settings, its own) and the resolved SOURCE, as the
# steps that read each one decide (raw text: rawtext.local_files, the declarations'
# download functions; training: the task's train_args, datasets/)
READ_WHEN = {
    "multilingual": (lambda cfg, name: name in cfg.declaration.task.settings,
                     "only a multilingual dataset (one model over many pairs) reads it"),
    "local": (lambda cfg, name: cfg.text.data.source == "local", "only SOURCE=local reads it"),
    "local, one pair": (lambda cfg, name: cfg.text.data.source == "local"
                        and name in cfg.declaration.task.settings,
                        "only SOURCE=local of a dataset of one pair reads it (a multilingual "
                        "one reads LOCAL_DIR, a directory per pair)"),
    "download": (lambda cfg, name: cfg.text.data.source == "download",
                 "only SOURCE=download reads it"),
    "its dataset's download": (lambda cfg, name: cfg.text.data.source == "download"
                               and name in cfg.declaration.settings,
                               "only SOURCE=download of the dataset that declares it reads it"),
}


AT_LEAST_ONE = (1, None, True)
# a language code names the data's files (train.SRC-TGT.SRC) and fairseq's pairs (SRC-TGT):
# a '-' or '.' in it would split wrongly
LANG_CODE = (r"[A-Za-z][A-Za-z0-9_]{0,31}",
             "a language code: a letter, then letters, digits or _ (de, en, pt_br), at most 32 "
             "characters; no '-' or '.', which separate the languages in the data's file names")
# processes on one machine: more than its cores only contend, and a number far beyond them
# (WORKERS=100000) forks until the machine stops. The bound is this machine's cores where the
# setting is used here (prepare: a few times them, so that the parallel stages can still be
# tried on a small machine), a generous constant where it may plan another machine
CORES = os.cpu_count() or 1
PROCESSES_PER_NODE = 1024


# Every name the recipes read. Defaults of dataset/size/model/machine values: presets.py.
SETTINGS: Dict[str, Setting] = {
    # what to run, where
    "SIZE": _s("text", "full, mini, smoke, quickstart or quickstart-cuda (presets.SIZES)",
               "full", scope="sweep"),
    "DEVICE": _s("auto|cuda|cpu", "auto: cuda when a GPU is visible", "auto", scope="machine"),
    "WORK": _s("path", "output directory [runs/<dataset>, runs/<dataset>-<SIZE>]",
               prefix_only=True, scope="machine"),
    "PYTHON": _s("text", "the Python the scripts start [python]", prefix_only=True,
                 scope="machine"),
    "MODEL": _s("text", "a model width of presets.MODELS: base, iwslt, tiny"),
    # data: "data" the prepared data depends on (prepare records and compares them; "prepare":
    # how prepare works, the same data either way)
    "SOURCE": _s("|".join(SOURCES), "where prepare.sh takes text from", "download", scope="data"),
    "DOWNLOAD_DIR": _s("path", "archives [$WORK/download]", scope="prepare", read_when="download"),
    "LOCAL_DIR": _s("path", "SOURCE=local: directory of {train,valid,test}.{SRC,TGT}[.gz]",
                    scope="data", read_when="local"),
    "LOCAL_TRAIN": _s("text", "file stem of the training text in LOCAL_DIR", "train",
                      scope="data", read_when="local"),
    "LOCAL_VALID": _s("text", "file stem of the validation text", "valid", scope="data",
                      read_when="local"),
    "LOCAL_TEST": _s("text", "file stem of the test text", "test", scope="data", read_when="local"),
    "TRAIN_TEXT": _s("path", "SOURCE=local: the training text, PATH.SRC and PATH.TGT (plain or "
                             ".gz), instead of LOCAL_DIR/LOCAL_TRAIN; e.g. /data/train for "
                             "/data/train.de and /data/train.en", scope="data",
                     read_when="local, one pair"),
    "VALID_TEXT": _s("path", "SOURCE=local: the validation text, as TRAIN_TEXT", scope="data",
                     read_when="local, one pair"),
    "TEST_TEXT": _s("path", "SOURCE=local: the test text (the references of evaluate), as "
                            "TRAIN_TEXT", scope="data", read_when="local, one pair"),
    "OPUS_URL": _s("text", "OPUS-100 release archive", scope="data",
                   read_when="its dataset's download"),
    "IWSLT_URL": _s("text", "IWSLT-14 de-en archive", scope="data",
                    read_when="its dataset's download"),
    "SRC": _s("text", "source language", pattern=LANG_CODE, scope="data"),
    "TGT": _s("text", "target language", pattern=LANG_CODE, scope="data"),
    "LANGS": _s("words", "multilingual datasets (OPUS-100): non-English languages, or all",
                pattern=LANG_CODE, scope="data", read_when="multilingual"),
    "TRAIN_LINES": _s("int", "keep the first N training pairs (0 = all)", scope="data"),
    "VALID_LINES": _s("int", "keep the first N validation pairs (0 = all)", scope="data"),
    "TEST_LINES": _s("int", "keep the first N test pairs (0 = all)", scope="data"),
    "VOCAB": _s("int", "joint sentencepiece vocabulary", bounds=AT_LEAST_ONE, scope="data"),
    # sentencepiece's own bound (trainer_interface.cc: input_sentence_size <= 0 or > 100);
    # below it, its internal check failed after the raw text and cleaning were done
    "SPM_SENTENCES": _s("int", "sentences sampled to train sentencepiece, more than 100",
                        bounds=(101, None, True), scope="data"),
    "MAX_LEN": _s("int", "drop training pairs longer than this (words)", bounds=AT_LEAST_ONE,
                  scope="data"),
    "LEN_RATIO": _s("float", "drop training pairs with a larger length ratio",
                    bounds=AT_LEAST_ONE, scope="data"),
    "ENCODING": _s("text", "encoding of the raw text (prepare reads it strictly)", "utf-8",
                   scope="data"),
    "WORKERS": _s("int", "processes of prepare's parallel stages: cleaning and encoding (a "
                         "file each), fairseq-preprocess (pairs at once x --workers); at most 4 "
                         "x this machine's cores, where prepare runs [every core this process "
                         "may use]", bounds=(1, 4 * CORES + 1, True), scope="prepare"),
    # the run
    "METHOD": _s("text", "a name of python -m deepnet_fairseq.methods", "deepnet",
                 scope="entry", affects=TRAINED),
    "LAYERS": _s("int", "layers per side", "6", bounds=AT_LEAST_ONE, scope="entry"),
    "ENC_LAYERS": _s("int", "encoder layers [LAYERS]", bounds=AT_LEAST_ONE, scope="entry",
                      affects=TRAINED),
    "DEC_LAYERS": _s("int", "decoder layers [LAYERS]", bounds=AT_LEAST_ONE, scope="entry",
                      affects=TRAINED),
    "RUN_NAME": _s("text", "run directory under $WORK/runs [METHOD-NL-ML]", scope="entry"),
    "RUN_LABEL": _s("text", "the run's label in the results table [METHOD]", scope="entry"),
    "RETRY": _s("0|1", "1: train again a run whose status is ok, diverged or source-blind", "0"),
    "STOP_DIVERGED": _s("int", "stop a run (diverged) after this many validations in a row no "
                               "better than a uniform guess after the warmup; 0 trains on", "3"),
    "SOURCE_GAIN": _s("0|1", "1: log the source gain (bits a target token gains from its own "
                             "source over another sentence's) at every validation, with the "
                             "criterion label_smoothed_cross_entropy_with_source_gain; "
                             "validation takes about twice as long", "0"),
    "STOP_SOURCE_BLIND": _s("int", "with SOURCE_GAIN=1: stop a run (source-blind) at its first "
                                   "validation from this update on whose source gain is below "
                                   f"{SOURCE_BLIND_BITS:g} bit, a model that does not read its "
                                   "source; 0 trains on", "0"),
    "SEED": _s("int", "fairseq --seed", "1", bounds=(0, 2 ** 32, True),
               affects=TRAINED),  # numpy's: 32-bit
    "LOG_INTERVAL": _s("int", "fairseq --log-interval", "100", bounds=AT_LEAST_ONE),
    # sampling divides the logits by it: 1e-300 gives inf
    "TEMPERATURE": _s("float", "multilingual datasets: sampling temperature over pairs",
                      bounds=(1e-3, None, True), affects=TRAINED, read_when="multilingual"),
    # model width
    "EMBED_DIM": _s("int", "model width", bounds=AT_LEAST_ONE, affects=TRAINED),
    "FFN_DIM": _s("int", "feed-forward width", bounds=AT_LEAST_ONE, affects=TRAINED),
    "HEADS": _s("int", "attention heads", bounds=AT_LEAST_ONE, affects=TRAINED),
    # optimisation
    "LR": _s("float", "peak learning rate", bounds=(0, None, False), affects=TRAINED),
    # docs/methods.md's rule for going deeper with plain DeepNet, as settings so that the
    # runs of one depth series share LR (one row of the report, one fit of the depth law)
    "LR_BASE_LAYERS": _s("int", "the depth LR was tuned at, in layers per side: each run's "
                                "peak rate is LR x (LR_BASE_LAYERS / L)^LR_DEPTH_POWER, L its "
                                "layers per side (the mean of ENC_LAYERS and DEC_LAYERS); 0 = "
                                "LR at every depth", "0", bounds=(0, None, True),
                         affects=TRAINED),
    "LR_DEPTH_POWER": _s("float", "the exponent of LR_BASE_LAYERS's rule; 2/3 is what plain "
                                  "DeepNet measured (docs/methods.md)", "0.667",
                         bounds=(0, None, True), affects=TRAINED),
    "LR_DEPTH_SCOPE": _s("all|layers", "what LR_BASE_LAYERS's rule moves: all (fairseq's --lr, every "
                                 "parameter) or layers (the layers' parameters alone, by "
                                 "--layers-lr-multiplier; the embeddings, output projection and "
                                 "final LayerNorms keep LR, as CompleteP and Depth-muP do)",
                         "all", affects=TRAINED),
    # fairseq's inverse_sqrt schedule divides by the warmup
    "WARMUP": _s("int", "inverse_sqrt warmup updates", bounds=AT_LEAST_ONE, affects=TRAINED),
    "WARMUP_INIT_LR": _s("float", "learning rate at update 0 of the warmup",
                         bounds=(0, None, True), affects=TRAINED),
    "ADAM_BETAS": _s("betas", "Adam betas, as (0.9, 0.98)", affects=TRAINED),
    "CLIP_NORM": _s("float", "gradient clipping (0 = none)", bounds=(0, None, True),
                    affects=TRAINED),
    "WEIGHT_DECAY": _s("float", "weight decay", bounds=(0, None, True), affects=TRAINED),
    "DROPOUT": _s("float", "dropout", bounds=(0, 1, True), affects=TRAINED),
    "LABEL_SMOOTHING": _s("float", "label smoothing", bounds=(0, 1, True), affects=TRAINED),
    "TOKENS_PER_UPDATE": _s("int", "effective batch in tokens, kept by --update-freq",
                            bounds=AT_LEAST_ONE, affects=TRAINED),
    "MAX_UPDATE": _s("int", "updates per run (0 = MAX_EPOCH decides)"),
    "MAX_EPOCH": _s("int", "epochs per run (0 = MAX_UPDATE decides)"),
    "SAVE_INTERVAL_UPDATES": _s("int", "checkpoint every N updates", bounds=AT_LEAST_ONE),
    "AVERAGE_LAST": _s("int", "checkpoints averaged for evaluation", bounds=AT_LEAST_ONE),
    "TRAIN_ARGS": _s("text", "more fairseq-train options, appended last (split as a shell "
                             "would), e.g. --no-save-optimizer-state; read by fairseq-train's "
                             "parser, so that an option the recipe or a setting decides "
                             "(--arch or -a, --lr, --save-dir, ...) is refused, naming the "
                             "setting to use, and so is one that reads or writes outside the "
                             "run (--restore-file, --tensorboard-logdir, ...)", affects=TRAINED),
    # machine
    # fairseq drops every training pair longer than it (a pair is at least one piece and </s>):
    # at 1 no batch was left, and training ended in an IndexError
    "MAX_TOKENS": _s("int", "tokens per process per step, at least 2 (and at least the longest "
                            "validation or test pair, which train checks against the data)",
                     bounds=(2, None, True)),
    "PRECISION": _s("fp16|bf16|fp32", "training precision", affects=TRAINED),
    "FP16_INIT_SCALE": _s("float", "fp16 initial loss scale", bounds=(0, None, False)),
    "FP16_SCALE_WINDOW": _s("int", "fp16: clean steps before the loss scale grows",
                            bounds=AT_LEAST_ONE),
    "MIN_LOSS_SCALE": _s("float", "fp16: stop (diverged) below this loss scale",
                         bounds=(0, None, False)),
    "CHECKPOINT_ACTIVATIONS": _s("auto|0|1", "auto: the memory plan's choice on CUDA; on CPU, "
                                 "on only when the run would not fit 90% of the machine's memory "
                                 "without it", "auto"),
    "CHECKPOINT_ACTIVATIONS_FROM": _s("int", "CUDA without a memory plan (GPU size unknown): "
                                      "activation checkpointing when N+M >= this",
                                      bounds=AT_LEAST_ONE),
    "GPU_MEMORY_GB": _s("float", "memory per GPU in GB (1e9 bytes) for the memory plan "
                                 "(activation checkpointing, ZeRO-1, MAX_TOKENS; DEVICE=cuda); "
                                 "set it where torch sees no GPU (a dry run on a login node), "
                                 "which otherwise gets no plan [torch's device properties]",
                                 bounds=(0, None, False), scope="machine"),
    "DDP_BACKEND": _s("text", "fairseq --ddp-backend"),
    "NUM_WORKERS": _s("int", f"data-loader workers per process, at most "
                             f"{PROCESSES_PER_NODE} (the training machine may not be this one)",
                      bounds=(0, PROCESSES_PER_NODE + 1, True)),
    # processes
    "NPROC": _s("int|auto", f"processes per node, at most {PROCESSES_PER_NODE} (a GPU each on "
                            "CUDA, a core each on CPU, checked where the run starts) [auto: "
                            "every visible GPU; 1 on CPU]", "auto",
                bounds=(1, PROCESSES_PER_NODE + 1, True), scope="machine"),
    "NNODES": _s("int", "nodes [SLURM_NNODES inside a SLURM job, else 1]", bounds=AT_LEAST_ONE,
                 scope="machine"),
    "NODE_RANK": _s("int", "this node's rank (torchrun, NNODES > 1: required)", scope="machine"),
    "MASTER_ADDR": _s("text", "first node's address (NNODES > 1: required with torchrun)",
                      scope="machine"),
    "MASTER_PORT": _s("int", "rendezvous port (several nodes)", "29500", bounds=(1, 65536, True),
                      scope="machine"),
    "LAUNCHER": _s("auto|none|torchrun|srun", "how processes are started", "auto", scope="machine"),
    # evaluation
    "BEAM": _s("int", "beam size", bounds=AT_LEAST_ONE),
    "LENPEN": _s("float", "length penalty"),
    "MAX_LEN_A": _s("float", "hypotheses at most A x source + B tokens", bounds=(0, None, True)),
    "MAX_LEN_B": _s("int", "see MAX_LEN_A", bounds=(0, None, True)),
    "TOKENIZED_BLEU": _s("0|1", "also report tokenized BLEU", "0"),
    "COMPOUND_SPLIT": _s("0|1", "split compounds for tokenized BLEU", "0"),
    # sweeps
    "METHODS": _s("words", "methods of a sweep", scope="sweep"),
    "DEPTHS": _s("ints", "layers per side of a sweep", scope="sweep"),
    "RUNS": _s("text", "METHOD:ENC:DEC[:KEY=VALUE...] entries instead of METHODS x DEPTHS; a "
                       "KEY may be any setting of scope run (not METHOD, the layers, the run's "
                       "name, the data's, the machine's or the sweep's own)", scope="sweep"),
}

GROUPS = (("what to run, where", "where", "SIZE"), ("data", "data", "SOURCE"),
          ("the run", "run", "METHOD"), ("model width", "model", "EMBED_DIM"),
          ("optimisation", "optim", "LR"), ("machine", "machine", "MAX_TOKENS"),
          ("processes", "processes", "NPROC"), ("evaluation", "eval", "BEAM"),
          ("sweeps", "sweep", "METHODS"))
"""The sections of the settings, in SETTINGS' order: each one's heading in ``help_text``, its
attribute on the resolved settings (``cfg.optim``) and the first setting in it."""


def _sections() -> Dict[str, Tuple[str, ...]]:
    """{section attribute: its settings}, cut from SETTINGS' order at each group's first."""
    firsts = {first: section for _, section, first in GROUPS}
    sections: Dict[str, List[str]] = {}
    current = firsts[next(iter(SETTINGS))]  # the first setting opens the first group
    for name in SETTINGS:
        current = firsts.get(name, current)
        sections.setdefault(current, []).append(name)
    return {section: tuple(names) for section, names in sections.items()}


SECTIONS = _sections()
SECTION_OF = {name: section for section, names in SECTIONS.items() for name in names}


def help_text(width: int = 100) -> str:
    """The datasets and every setting, from their declarations: the list the recipes'
    ``--help`` prints (``python -m deepnet_fairseq.recipes --help``, ``bash
    scripts/DATASET/STEP.sh --help``), so that each is documented where it is declared."""
    import textwrap

    lines = ["Datasets (deepnet_fairseq/recipes/datasets/, one file each):"]
    column = max(map(len, DATASETS)) + 2
    for dataset in DATASETS.values():
        lines.extend(textwrap.wrap(f"{dataset.about}; {dataset.languages}", width,
                                   initial_indent=f"   {dataset.name:<{column}}",
                                   subsequent_indent=" " * (3 + column)))
    names = list(SETTINGS)
    starts = {first: heading for heading, _, first in GROUPS}
    shown = {name: (PREFIX if SETTINGS[name].prefix_only else "") + name for name in names}
    lines += textwrap.wrap(f"Settings ({PREFIX}<NAME> or <NAME> in the environment; [default]; "
                           "the presets' values: --dry-run, docs/presets.md):", width)
    column = max(map(len, shown.values())) + 2
    for name in names:
        if name in starts:
            lines.append(f" {starts[name]}:")
        setting = SETTINGS[name]
        text = setting.help
        if "|" in setting.kind:  # the choices, unless the help names them
            text += "" if setting.kind in text else f" ({setting.kind})"
        if setting.default is not None:
            text += f" [{setting.default}]"
        lines.extend(textwrap.wrap(text, width, initial_indent=f"   {shown[name]:<{column}}",
                                   subsequent_indent=" " * (3 + column)))
    return "\n".join(lines)


# Common variables of shells, schedulers and torch that sit close to a setting's name.
NOT_SETTINGS = {"LANG", "LANGUAGE", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                "GROUP_RANK", "ROLE_RANK", "LINES", "COLUMNS", "TERM", "MASTER"}


def typed(name: str, text: str):
    """TEXT, a value of setting NAME that passed its check, as its declared kind's type: int,
    float, bool for 0|1, a tuple for words and ints; the text itself for the other kinds."""
    kind = SETTINGS[name].kind
    if kind == "int" or (kind == "int|auto" and text != "auto"):
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "0|1":
        return text == "1"
    if kind == "words":
        return tuple(text.split())
    if kind == "ints":
        return tuple(int(n) for n in text.split())
    return text


def affecting(*what: str) -> Tuple[str, ...]:
    """The settings declared to affect WHAT (``DATA``, ``TRAINED``): read from the
    declarations, so that a new setting is compared once it is tagged there."""
    return tuple(name for name, setting in SETTINGS.items() if setting.affects in what)


def changed(names, before: Mapping[str, str], now: Mapping[str, str]) -> List[str]:
    """``NAME=<before> before, <now> now`` for each of NAMES whose value differs, compared as
    its kind reads it (LR 1e-3 is 0.001, ``recorded_value``); an unset one is ``(unset)``. The
    corpus shipped in the package (SOURCE=multi30k both times) is the same text wherever the
    package is: its LOCAL_DIR, derived from the package's folder (another checkout, worktree
    or installation), is no difference."""
    shipped = before.get("SOURCE") == now.get("SOURCE") == "multi30k"
    return [f"{name}={before.get(name, '(unset)')} before, {now.get(name, '(unset)')} now"
            for name in names if recorded_value(before, name) != recorded_value(now, name)
            and not (shipped and name == "LOCAL_DIR")]


def recorded_value(values: Mapping[str, str], name: str):
    """Setting NAME of a record's resolved VALUES as its kind reads it (LR 1e-3 is 0.001).
    Resolving fills every default, so a name a record lacks did not exist when it was made:
    it ran as the setting's default (None where there is none); a value edited by hand that
    its kind no longer reads is compared as its text."""
    text = values.get(name, SETTINGS[name].default if name in SETTINGS else None)
    if text is None:
        return None
    try:
        return typed(name, str(text))
    except ValueError:
        return str(text)


@dataclass
class Settings:
    """Resolved settings: validated string values and where each came from, read as typed
    attributes by section (``cfg.optim.lr``, ``cfg.text.optim.lr``: ``Section``)."""
    dataset: str
    repo: str
    values: Dict[str, str] = field(default_factory=dict)
    sources: Dict[str, str] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    # settings given by a config file (name -> (value, source)), below the environment; kept
    # so that a sweep resolves each of its runs from the same file
    given: Mapping[str, Tuple[str, str]] = field(default_factory=dict)
    # the names one run of a sweep sets (its RUNS entry's KEY=VALUE): refused where unread,
    # as a config file's are, since the entry would name a run by a value nothing reads
    per_run: frozenset = frozenset()
    frozen: bool = False

    @property
    def declaration(self):
        """The dataset's declaration (``datasets.Dataset``): what the steps ask of a dataset."""
        return DATASETS[self.dataset]

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def __getitem__(self, name: str) -> str:
        if name not in SETTINGS:
            raise KeyError(name)  # a programming error, not a user's
        if name not in self.values:
            raise SettingError(f"{name} is not set and dataset {self.dataset} has no default for "
                               f"it: set it in the environment ({name}=... or {PREFIX}{name}=...)")
        return self.values[name]

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        return self.values.get(name, default)

    def freeze(self) -> None:
        self.frozen = True
        self.values, self.sources = MappingProxyType(self.values), MappingProxyType(self.sources)

    def set(self, name: str, value: str, source: str) -> None:
        if self.frozen:
            raise TypeError(f"{name}: settings are frozen once resolved; resolve() again with "
                            "the new value instead")  # a programming error, not a user's
        self.values[name] = _check(name, value, source)
        self.sources[name] = source

    def as_json(self) -> Dict:
        return {name: {"value": self.values[name], "from": self.sources[name]}
                for name in sorted(self.values)}

    def describe(self) -> str:
        width = max(map(len, self.values))
        # one line per setting: a value written over lines (RUNS in a config file) is joined
        lines = [f"  {name:<{width}} = {' '.join(self.values[name].split()):<28} "
                 f"({self.sources[name]})" for name in sorted(self.values)]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])


class Section:
    """One section of resolved settings as attributes, one per setting (its name in lower
    case), generated from the declarations: ``cfg.optim.lr`` is LR as its kind reads it (a
    float; ``typed``), ``cfg.text.optim.lr`` its text as resolved (what command lines and
    records carry, written as it was given: 1e-7 stays 1e-7). Reading a setting that is unset
    raises the ``SettingError`` that names it; nothing can be assigned."""
    __slots__ = ("_settings", "_typed", "_optional")

    def __init__(self, settings: "Settings", as_typed: bool, optional: bool = False):
        object.__setattr__(self, "_settings", settings)
        object.__setattr__(self, "_typed", as_typed)
        object.__setattr__(self, "_optional", optional)

    def __setattr__(self, attr, value):
        raise AttributeError(f"settings are read-only: {type(self).__name__}.{attr}")

    def __repr__(self) -> str:
        shown = {name.lower(): self._settings.values[name] for name in self.NAMES
                 if name in self._settings.values}
        return f"{type(self).__name__}({shown})"


def _reader(name: str) -> property:
    def read(section: Section):
        if section._optional and name not in section._settings:
            return None
        text = section._settings[name]  # SettingError when unset, naming it
        return typed(name, text) if section._typed else text
    read.__doc__ = f"{name}: {SETTINGS[name].help} (kind {SETTINGS[name].kind})"
    return property(read)


SECTION_TYPES = {
    section: type(f"{section.capitalize()}Settings", (Section,),
                  {"__slots__": (), "NAMES": names,
                   **{name.lower(): _reader(name) for name in names}})
    for section, names in SECTIONS.items()}
"""{section: its class}: a property per setting, so that ``dir()``, help() and a misspelt
name (AttributeError) say what a section holds."""


class TextView:
    """The resolved settings' text, by section: ``cfg.text.optim.lr == "0.002"``; with
    OPTIONAL (``cfg.optional``), None for a setting that is unset, where unset is a value
    (no RUNS, no TRAIN_ARGS), instead of the error."""
    __slots__ = ("_settings", "_optional")

    def __init__(self, settings: "Settings", optional: bool = False):
        object.__setattr__(self, "_settings", settings)
        object.__setattr__(self, "_optional", optional)

    def __getattr__(self, section: str) -> Section:
        if section not in SECTION_TYPES:
            raise AttributeError(f"no section {section!r} of the settings: "
                                 f"{', '.join(SECTION_TYPES)}")
        return SECTION_TYPES[section](self._settings, False, self._optional)

    def __setattr__(self, attr, value):
        raise AttributeError("settings are read-only")


def _add_sections(cls):
    """Give the resolved settings a typed view of each section (``cfg.optim``) and the
    text view (``cfg.text``)."""
    for section, section_type in SECTION_TYPES.items():
        setattr(cls, section, property(lambda self, kind=section_type: kind(self, True),
                                       doc=f"the {section} settings, typed"))
    cls.text = property(TextView, doc="the settings' text as resolved, by section")
    cls.optional = property(lambda self: TextView(self, optional=True),
                            doc="as ``text``, None for an unset setting")


_add_sections(Settings)


# kinds whose value is a list: line ends and tabs separate its items (RUNS, TRAIN_ARGS and
# METHODS written over several lines of a TOML file)
LIST_SETTINGS = ("RUNS", "TRAIN_ARGS")
_SEPARATORS = "\n\r\t"


def _control(value: str, separators: str) -> Optional[str]:
    """The first control character of VALUE (a NUL, a line end, an escape ...) other than
    SEPARATORS, or None: a value goes into file names, fairseq's command line and the one-line
    records and logs that the recipes read back, where a line end would forge a line."""
    for char in value:
        if unicodedata.category(char) == "Cc" and char not in separators:
            return char
    return None


def _check(name: str, value: str, source: str) -> str:
    kind = SETTINGS[name].kind
    where = f"{name}={value!r} (from {source})"
    value = value.strip()
    listed = kind in ("words", "ints") or name in LIST_SETTINGS
    char = _control(value, _SEPARATORS if listed else "")
    if char is not None:
        raise SettingError(f"{where}: holds the control character {char!r}; " + (
            "only line ends and tabs may separate its items" if listed
            else "a setting is one line of printable text"))
    if kind in ("int", "int|auto", "float", "ints", "betas") and not value.isascii():
        # Python's int() and float() read other scripts' digits (LAYERS=٣); fairseq and the
        # shell scripts do not
        raise SettingError(f"{where}: expected ASCII digits (0-9)")
    if kind == "int":
        if not re.fullmatch(r"[0-9]+", value):
            raise SettingError(f"{where}: expected a whole number >= 0")
    elif kind == "int|auto":  # before the choices: "|" here is not a list of them
        if value != "auto" and not re.fullmatch(r"[0-9]+", value):
            raise SettingError(f"{where}: expected a whole number >= 0, or auto")
    elif kind == "float":
        try:  # as fairseq and the shell read a number: float() would also take "1_0"
            ok = bool(re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", value)) \
                and math.isfinite(float(value))
        except ValueError:
            ok = False
        if not ok:
            raise SettingError(f"{where}: expected a number")
    elif kind == "ints":
        if not re.fullmatch(r"[0-9]+( +[0-9]+)*", value):
            raise SettingError(f"{where}: expected whole numbers separated by spaces")
    elif kind == "betas":
        if not re.fullmatch(r"\(\s*[0-9.eE+-]+\s*,\s*[0-9.eE+-]+\s*\)", value):
            raise SettingError(f"{where}: expected two numbers as (0.9, 0.98)")
    elif "|" in kind:
        if value not in kind.split("|"):
            raise SettingError(f"{where}: expected one of {', '.join(kind.split('|'))}")
    elif not value:
        raise SettingError(f"{where}: empty")
    pattern = SETTINGS[name].pattern
    if pattern and not all(re.fullmatch(pattern[0], word) for word in value.split()):
        raise SettingError(f"{where}: expected {pattern[1]}")
    return value


# ---- the environment ------------------------------------------------------------------------

def _suggest(name: str) -> str:
    close = difflib.get_close_matches(name, SETTINGS, n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_names(env: Mapping[str, str]) -> List[str]:
    """Messages for variables that look like settings but are not (typos)."""
    problems = []
    for name in sorted(env):
        upper = name.upper()
        if name != upper and (upper in SETTINGS or upper.startswith(PREFIX)):
            problems.append(f"{name}={env[name]}: setting names are upper case; did you mean "
                            f"{upper}?")
        elif name.startswith(PREFIX):
            bare = name[len(PREFIX):]
            if bare not in SETTINGS:
                problems.append(f"{name} is not a recipe setting{_suggest(bare)}")
        elif (name not in SETTINGS and name not in NOT_SETTINGS
              and re.fullmatch(r"[A-Z][A-Z0-9_]*", name)
              and difflib.get_close_matches(name, SETTINGS, n=1, cutoff=0.8)):
            problems.append(f"{name}={env[name]} is not a recipe setting{_suggest(name)}; "
                            f"rename it, or run without it (env -u {name} ...) if it is "
                            "meant for another program")
    return problems


def from_env(env: Mapping[str, str], name: str) -> Optional[Tuple[str, str]]:
    """(value, source) of NAME in the environment, or None."""
    if PREFIX + name in env:
        return env[PREFIX + name], f"environment {PREFIX}{name}"
    if name in env and not SETTINGS[name].prefix_only:
        return env[name], f"environment {name}"
    return None


def home() -> str:
    """Where ``runs/`` goes by default: the checkout this package is in (beside scripts/), or
    the current directory for an installed copy."""
    from ... import USER_DIR

    checkout = os.path.dirname(USER_DIR)
    return checkout if os.path.isdir(os.path.join(checkout, "scripts")) else os.getcwd()


def resolve(dataset: str, env: Mapping[str, str], repo: str,
            probe: Optional[Callable[[], int]] = None,
            given: Optional[Mapping[str, Tuple[str, str]]] = None,
            run: Optional[Mapping[str, Tuple[str, str]]] = None) -> Settings:
    """Every setting of DATASET from ENV and the presets (see the module docstring); REPO is
    where ``runs/`` goes unless ``DEEPNET_WORK`` says.

    ``probe`` counts GPUs when DEVICE=auto and no variable says (devices.count_gpus).
    ``given``: name -> (value, source) of a config file (configfile.py), applied after the
    environment, which wins (with a note saying so), before the presets.
    ``run``: name -> (value, source) of one run of a sweep (its RUNS entry, its name), above
    everything: a sweep derives each run's settings from its own inputs plus these, not from
    an environment rewritten for the run.
    """
    if dataset not in DATASETS:
        raise SettingError(f"unknown dataset {dataset!r}: one of {', '.join(DATASETS)} (a new "
                           "one is a file in deepnet_fairseq/recipes/datasets/)")
    problems = unknown_names(env)
    if problems:
        raise SettingError("\n".join(problems))
    cfg = Settings(dataset, repo, given=dict(given or {}), per_run=frozenset(run or ()))
    _set_given(cfg, env, run or {})
    _default(cfg, "SIZE")
    _default(cfg, "DEVICE")
    _set_device(cfg, env, probe)
    deferred = _method_training(cfg)
    _load_presets(cfg)
    for setting, template, source in deferred:  # over the presets' value: the method's own
        cfg.set(setting, template.format(**cfg.values), source)
    _derive(cfg, env)
    check_ranges(cfg)
    check_read(cfg)
    cfg.freeze()  # resolved once: the steps read it, nothing changes it
    return cfg


def _set_given(cfg: Settings, env: Mapping[str, str], run: Mapping[str, Tuple[str, str]]):
    """What was given, first match first: the environment, the sweep's run entry, the config
    file (below the environment, with a note where the environment wins)."""
    for name in SETTINGS:
        found = from_env(env, name)
        if found:
            cfg.set(name, *found)
    for name, (value, source) in run.items():
        cfg.set(name, value, source)
    for name, (value, source) in cfg.given.items():
        if name not in cfg:
            cfg.set(name, value, source)
        elif cfg[name] != value.strip():
            cfg.notes.append(f"{name}: the {cfg.sources[name]} ({cfg[name]}) wins over "
                             f"{source} ({value})")
    for name in ("WORK", "PYTHON"):
        if name in env and PREFIX + name not in env:
            cfg.notes.append(f"{name} is set in the environment but not read (systems predefine "
                             f"it); the recipes read {PREFIX}{name}")


def _default(cfg: Settings, name: str) -> None:
    if name not in cfg and SETTINGS[name].default is not None:
        cfg.set(name, SETTINGS[name].default, "default")


def _set_device(cfg: Settings, env: Mapping[str, str], probe) -> None:
    """DEVICE=auto as the GPUs visible decide; DEVICE=cuda without one refused."""
    if cfg.text.where.device == "cpu":
        return
    gpus, said = count_gpus(env, probe)
    if cfg.text.where.device == "cuda" and gpus == 0:
        raise SettingError(f"DEVICE=cuda but no GPU is visible ({said}); use DEVICE=cpu "
                           "(smoke size) or run where a GPU is")
    if cfg.text.where.device == "auto":
        cfg.set("DEVICE", "cuda" if gpus else "cpu", f"derived: {gpus} GPU(s), {said}")


def _size_picks_the_source(dataset, source: str) -> bool:
    """A size's SOURCE (the shipped corpus, for the small sizes) is for the datasets that would
    otherwise download: one whose own preset names its text (generated, the user's files) or
    that cannot read it keeps its own."""
    return "SOURCE" not in dataset.preset.values and source in dataset.sources


def _load_presets(cfg: Settings) -> None:
    """The presets below what was given, first to set a name wins: the size, the dataset,
    the model width, the machine; then the declared defaults."""
    dataset = DATASETS[cfg.dataset]

    def load(preset):
        for name, value in preset.values.items():
            if name not in cfg and not (name == "SOURCE" and preset.kind == "size"
                                        and not _size_picks_the_source(dataset, value.value)):
                cfg.set(name, value.value, preset.source(name))

    def choose(table, setting):
        if cfg[setting] not in table:
            raise SettingError(f"{setting}={cfg[setting]}: one of {', '.join(table)}"
                               + (" or full" if setting == "SIZE" else ""))
        return table[cfg[setting]]

    if cfg.text.where.size != "full":
        load(choose(presets.SIZES, "SIZE"))
    load(dataset.preset)
    load(choose(presets.MODELS, "MODEL"))
    load(presets.MACHINES[cfg.text.where.device])
    for name in SETTINGS:
        _default(cfg, name)


RANGES: Dict[str, Tuple[Optional[float], Optional[float], bool]] = {
    name: setting.bounds for name, setting in SETTINGS.items() if setting.bounds}
"""The declared ranges, by name (``Setting.bounds``)."""


def _in_range(value: float, lowest, highest, inclusive: bool) -> bool:
    if lowest is not None and (value < lowest or (value == lowest and not inclusive)):
        return False
    return highest is None or value < highest


def check_ranges(cfg: "Settings") -> None:
    """Every numeric setting within its range, and the settings that must agree, agree."""
    problems = []

    def bad(name, rule):
        problems.append(f"{name}={cfg[name]} (from {cfg.sources[name]}): {rule}")

    for name, (lowest, highest, inclusive) in RANGES.items():
        value = typed(name, cfg[name]) if name in cfg else "auto"
        if value != "auto" and not _in_range(float(value), lowest, highest, inclusive):
            rule = ("must be " + (f">= {lowest}" if inclusive else f"> {lowest}")
                    + (f" and < {highest}" if highest is not None else ""))
            bad(name, rule)
    _check_training(cfg, bad)
    if "BEAM" in cfg and "VOCAB" in cfg and cfg.eval.beam >= cfg.data.vocab:
        # fairseq's SequenceGenerator would quietly search with a beam of its vocabulary - 1
        bad("BEAM", f"must be smaller than VOCAB={cfg.text.data.vocab} (a beam that wide would be "
                    "cut to the vocabulary without a word)")
    if "EMBED_DIM" in cfg and "HEADS" in cfg and cfg.model.heads > 0 and \
            cfg.model.embed_dim % cfg.model.heads:
        bad("EMBED_DIM", f"must be a multiple of HEADS={cfg.text.model.heads}")
    declaration = cfg.declaration
    if "SOURCE" in cfg and cfg.text.data.source not in declaration.sources:
        bad("SOURCE", f"dataset {cfg.dataset} reads its text from SOURCE="
                      f"{' or '.join(declaration.sources)} only")
    if {"SRC", "TGT"} <= set(declaration.task.settings) and "SRC" in cfg and "TGT" in cfg \
            and cfg.text.data.src == cfg.text.data.tgt:
        bad("TGT", f"the target language equals the source ({cfg.text.data.src}): that is a copy "
                   "task, not translation; set SRC and TGT to two languages")
    if "RUN_NAME" in cfg and run_name_problem(cfg.text.run.run_name):
        bad("RUN_NAME", run_name_problem(cfg.text.run.run_name))
    if cfg.optional.optim.train_args:
        import shlex

        try:
            shlex.split(cfg.text.optim.train_args)
        except ValueError as err:
            bad("TRAIN_ARGS", f"{err}; quote it as in a shell")
    if "ENCODING" in cfg:
        import codecs

        try:
            # a text encoding: codecs also knows bytes-to-bytes ones (base64, rot13 ...)
            text = codecs.lookup(cfg.text.data.encoding)._is_text_encoding
        except (LookupError, ValueError):  # ValueError: a NUL in the name
            text = False
        if not text:
            bad("ENCODING", "not a text encoding Python knows (e.g. utf-8, latin-1, cp1252)")
    if problems:
        raise SettingError("\n".join(problems))


def _check_training(cfg: "Settings", bad: Callable[[str, str], None]) -> None:
    """The training settings that must agree (check_ranges): BAD(name, rule) for each that
    does not."""
    if "ADAM_BETAS" in cfg:
        betas = [float(b) for b in cfg.text.optim.adam_betas.strip("() ").split(",")]
        if not all(0 <= b < 1 for b in betas):
            bad("ADAM_BETAS", "both betas must lie in [0, 1)")
    if "MAX_UPDATE" in cfg and "MAX_EPOCH" in cfg and \
            cfg.optim.max_update == 0 and cfg.optim.max_epoch == 0:
        bad("MAX_UPDATE", "MAX_UPDATE and MAX_EPOCH are both 0, so training would never end; "
                          "set one of them above 0")
    if "STOP_SOURCE_BLIND" in cfg and cfg.run.stop_source_blind:
        if not cfg.run.source_gain:
            bad("STOP_SOURCE_BLIND", "it reads the source gain, which only SOURCE_GAIN=1 logs; "
                                     "set SOURCE_GAIN=1 too, or STOP_SOURCE_BLIND=0")
        elif "MAX_UPDATE" in cfg and 0 < cfg.optim.max_update < cfg.run.stop_source_blind:
            bad("STOP_SOURCE_BLIND", f"beyond MAX_UPDATE={cfg.text.optim.max_update}: the watch "
                                     "would never look; set it lower, or 0")


def unread(cfg: "Settings") -> Dict[str, str]:
    """name -> why, for each setting these resolved settings do not read (READ_WHEN)."""
    return {name: READ_WHEN[setting.read_when][1] for name, setting in SETTINGS.items()
            if setting.read_when and not READ_WHEN[setting.read_when][0](cfg, name)}


def check_read(cfg: "Settings") -> None:
    """A config file or a RUNS entry sets only what its dataset reads: a value the steps would
    not read (LANGS for a dataset of one pair, TRAIN_TEXT with SOURCE=download, TEMPERATURE in
    the entry of a one-pair sweep) is refused, naming where it came from, rather than dropped
    without a word. The environment, shared by every dataset's commands, gets a note instead."""
    problems = []
    for name, why in unread(cfg).items():
        if name in cfg.given or name in cfg.per_run:
            value, source = cfg.given.get(name) or (cfg.values[name], cfg.sources[name])
            problems.append(f"{name}={value} (from {source}) is not read by dataset {cfg.dataset} "
                            f"with SOURCE={cfg.text.data.source}: {why}; remove it from the file, "
                            "or set what reads it")
        elif cfg.sources.get(name, "").startswith("environment"):
            cfg.notes.append(f"{name} ({cfg.sources[name]}) is not read by dataset "
                             f"{cfg.dataset} with SOURCE={cfg.text.data.source}: {why}")
    if problems:
        raise SettingError("\n".join(problems))


def _method_training(cfg: Settings) -> List[Tuple[str, str, str]]:
    """The training settings the method's paper prescribes (its declaration in ``methods``,
    e.g. T-Fixup's warmup): above the presets, below the environment. A value naming another
    setting (``"{LR}"``) is returned as (setting, template, source), to be filled in once every
    other value is known (``resolve``, once the presets are loaded)."""
    from ... import methods

    name = cfg.text.run.method if "METHOD" in cfg else SETTINGS["METHOD"].default
    try:
        method = methods.get(name)
    except ValueError as err:
        raise SettingError(f"METHOD={name}: {err}") from None
    deferred = []
    for setting, value in method.training:
        if setting in cfg:
            continue
        source = f"method {name}: its paper's training setting"
        if "{" in value:
            deferred.append((setting, value, f"{source} ({value})"))
        else:
            cfg.set(setting, value, source)
    return deferred


def _derive(cfg: Settings, env: Mapping[str, str]) -> None:
    """Settings whose default follows from others (or from the scheduler)."""
    def derive(name, value, why):
        if name not in cfg:
            cfg.set(name, value, f"derived: {why}")

    if env.get("SLURM_JOB_ID") and env.get("SLURM_NNODES"):
        derive("NNODES", env["SLURM_NNODES"], f"SLURM_NNODES, in SLURM job {env['SLURM_JOB_ID']}")
    derive("NNODES", "1", "one node")

    suffix = "" if cfg.text.where.size == "full" else f"-{cfg.text.where.size}"
    derive("WORK", os.path.join(cfg.repo, "runs", cfg.dataset + suffix), "runs/<dataset>[-SIZE]")
    derive("DOWNLOAD_DIR", os.path.join(cfg.text.where.work, "download"), "$WORK/download")
    from ..base.machine import cores

    derive("WORKERS", str(cores()), "the cores this process may use")
    derive("ENC_LAYERS", cfg.text.run.layers, "LAYERS")
    derive("DEC_LAYERS", cfg.text.run.layers, "LAYERS")
    derive("RUN_NAME", run_name(cfg.text.run.method, cfg.text.run.enc_layers,
                                cfg.text.run.dec_layers),
           "METHOD-ENC_LAYERSL-DEC_LAYERSL")
    derive("RUN_LABEL", cfg.text.run.method, "METHOD")
    if cfg.text.data.source == "multi30k":
        from ...corpora import MULTI30K_LANGS, multi30k_dir

        # the shipped corpus: its own file names, and every language it has for OPUS-100
        for name, value in (("LOCAL_DIR", multi30k_dir()), ("LOCAL_TRAIN", "train"),
                            ("LOCAL_VALID", "val"), ("LOCAL_TEST", "test_2016_flickr")):
            if not cfg.sources.get(name, "").startswith("environment"):
                cfg.set(name, value, "derived: SOURCE=multi30k")
        if cfg.optional.data.langs == "all":
            cfg.set("LANGS", " ".join(x for x in MULTI30K_LANGS if x != "en"),
                    "derived: SOURCE=multi30k, LANGS=all")


def run_name_problem(name: str) -> Optional[str]:
    """Why NAME cannot be a run directory under $WORK/runs, or None."""
    if "/" in name or "\\" in name or "\0" in name or name.startswith(".") or len(name) > 200:
        return ("must be a plain directory name under $WORK/runs (no '/', not starting with "
                "'.', at most 200 characters)")
    return None


# Why a RUNS entry may not set a setting of each scope but "run", and what to do instead: a
# value the run could not honour would still name its directory and its records
NOT_PER_RUN = {
    "entry": "the entry's own fields METHOD:ENC:DEC set it (and the run's name follows from "
             "them); write it there",
    "sweep": "it says what the sweep is, one value for all its runs; set it for the sweep",
    "data": "the prepared data depends on it, and every run of the sweep trains on the same data; "
            "set it for the sweep (and prepare), or sweep other data in another DEEPNET_WORK",
    "prepare": "it says how the shared data is prepared, once for every run; set it for prepare",
    "machine": "it belongs to the machine the sweep runs on, the same for every run; set it in "
               "the environment for the sweep",
}


def check_run_entry(entry: str, where: str = "") -> Tuple[str, str, str, List[str]]:
    """(method, encoder layers, decoder layers, KEY=VALUE overrides) of one ``RUNS`` entry
    METHOD:ENC:DEC[:KEY=VALUE...], each field checked as the setting it names, and the run
    name it makes a plain directory name, before anything is written. WHERE: what the error
    names as its origin [the RUNS entry]."""
    fields = entry.split(":")
    where = where or f"RUNS entry {entry!r}"
    if len(fields) < 3:
        raise SettingError(f"{where}: expected METHOD:ENC:DEC[:KEY=VALUE...]")
    method, enc, dec, overrides = fields[0], fields[1], fields[2], fields[3:]
    from ... import methods

    try:
        methods.get(method)
    except ValueError as err:
        raise SettingError(f"{where}: {err}") from None
    for name, value in (("ENC_LAYERS", enc), ("DEC_LAYERS", dec)):
        _check(name, value, where)
        if int(value) < 1:
            raise SettingError(f"{where}: {name} must be at least 1")
    for override in overrides:
        key, equals, value = override.partition("=")
        if not equals or key not in SETTINGS:
            raise SettingError(f"{where}: {override!r} is not KEY=VALUE with KEY a recipe setting")
        if SETTINGS[key].scope != "run":
            raise SettingError(f"{where}: {key} cannot differ between runs: "
                               f"{NOT_PER_RUN[SETTINGS[key].scope]}")
        _check(key, value, where)
    problem = run_name_problem(run_name(method, enc, dec, overrides))
    if problem:
        raise SettingError(f"{where}: its run name {run_name(method, enc, dec, overrides)!r} "
                           f"{problem}")
    return method, enc, dec, overrides


def run_name(method: str, enc: str, dec: str, overrides=()) -> str:
    """The directory name of one run: METHOD-NL-ML[+KEY=VALUE...]."""
    return f"{method}-{enc}L-{dec}L" + "".join(f"+{kv}" for kv in overrides)


def run_label(method: str, overrides=()) -> str:
    """The row of one run in the results table: METHOD [(KEY=VALUE ...)]. A seed is not a
    variant of the method: runs that differ only in SEED share a row (and a cell per depth,
    where the report gives their mean and spread)."""
    variant = [kv for kv in overrides if kv.partition("=")[0] != "SEED"]
    return method + (f" ({' '.join(variant)})" if variant else "")


if __name__ == "__main__":  # the list of settings, for the shell scripts' --help
    try:
        print(help_text(), flush=True)
    except BrokenPipeError:  # --help | head: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)


def print_settings(cfg: Settings, step: str, out=None) -> None:
    # sys.stderr looked up at the call: a default bound at import misses a redirected stderr
    print(f"[{cfg.dataset}/{step}] settings ({PREFIX}<NAME> or <NAME> in the environment win "
          f"over the presets):\n{cfg.describe()}", file=out or sys.stderr)
