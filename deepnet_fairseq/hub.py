"""Translate from Python with a checkpoint of this plugin.

    import deepnet_fairseq
    model = deepnet_fairseq.load("runs/quickstart/runs/deepnet-6L-6L/checkpoints/checkpoint_last.pt")
    print(model.translate("A man in an orange hat.", beam=5))

``load`` reads the one file it is given with the plugin's own loader (weights-only, whatever
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` says), checks the dictionaries it will binarise with
against the model as ``deepnet-export`` and the recipes' evaluation do, and hands the model to
fairseq's ``GeneratorHubInterface`` (sentencepiece applied, binarised with the model's
dictionary, decoded by fairseq's ``SequenceGenerator``, sentencepiece removed). None of
fairseq's hub name conventions applies: a ``:`` in a path is a character of it (not a list of
checkpoints to ensemble), and files that happen to lie beside the checkpoint (fairseq's
``sentencepiece.bpe.model``, ``code``, ...) are never picked up.

What it takes, and what it refuses with a ``LoadError`` (a ``ValueError``) saying what to do:

* ``checkpoint``: a regular file that reads as a fairseq checkpoint (a directory, a FIFO or a
  device is refused before it is opened; a file that is no checkpoint with the cause);
* ``data``: the fairseq-preprocess directory of the model's dictionaries [the one the
  checkpoint records]; refused when its dictionaries are not the model's (another size than
  the embeddings, or, where the recorded directory still exists, other tokens);
* ``sentencepiece_model``: [the checkpoint's own ``--sentencepiece-model``, else ``spm.model``
  beside the data directory, as the recipes write it]; the one given is the one used; refused
  when the dictionary holds a token that is not one of its pieces (another model's pieces);
  where none is found, refused unless ``pieces=True`` says the text will come already split
  into the model's pieces, separated by spaces;
* ``source_lang``, ``target_lang``: the direction, for a multilingual model (the OPUS-100
  recipe's; refused without them, or with a language the model was not trained on); its
  output's language token is removed;
* ``verbose``: fairseq's INFO lines (loading, generation) on stderr [none: the plugin leaves
  logging as the program configured it];
* ``overrides``: more of fairseq's options (generation: ``beam=5``, ``lenpen=1.0``, ...).

The model it returns refuses, naming the sentence: text that is not ``str`` (bytes: decode
them first), text holding lone surrogates (not Unicode text), and a sentence longer than the
model's source positions (``InputError``, a ``ValueError``).
"""

import functools
import inspect
import logging
import os
import re
import stat
from typing import Optional, Sequence

_LANGUAGE_TOKEN = re.compile(r"^__[\w-]+__$")


def show_fairseq_log() -> None:
    """fairseq's INFO lines (loading, generation) on stderr, as fairseq's own commands show
    them; by default the plugin leaves logging as the program configured it
    (deepnet_fairseq._KeepTheRootLogger), which shows none."""
    logger = logging.getLogger("fairseq")
    logger.setLevel(logging.INFO)
    if not any(getattr(handler, "_deepnet_verbose", False) for handler in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | "
                                               "%(message)s", "%Y-%m-%d %H:%M:%S"))
        handler._deepnet_verbose = True
        logger.addHandler(handler)
        logger.propagate = False  # once, not again through a handler the program has


def is_multilingual(task) -> bool:
    """Whether TASK is fairseq's translation_multi_simple_epoch (the OPUS-100 recipe's)."""
    return type(task).__name__ == "TranslationMultiSimpleEpochTask"


class LoadError(ValueError):
    """A checkpoint, data directory or sentencepiece model ``load`` will not use; the message
    says which and what to do."""


class InputError(ValueError):
    """Text the loaded model will not translate; the message says which sentence and why."""


def _regular_file(path: str, what: str) -> str:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"no {what} file {path}") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise LoadError(f"{path} is {kind}: give the path of the {what} file itself")
    return path


def _stored_sentencepiece(cfg) -> Optional[str]:
    bpe = (cfg or {}).get("bpe") or {}
    return bpe.get("sentencepiece_model") if bpe.get("_name") == "sentencepiece" else None


def check_dictionaries(state: dict, data: str, trained: Optional[str]) -> None:
    """The data directory's dictionaries are the model's (``LoadError`` if not), by
    ``deepnet-export``'s check against the directory it was trained on, TRAINED."""
    from .export import ExportError
    from .export import check_dictionaries as check_model_dictionaries

    try:
        check_model_dictionaries(state["model"], state["cfg"].get("task") or {}, data, trained)
    except ExportError as err:
        raise LoadError(str(err).replace("pass --data DIR", "pass data=DIR")) from None


def check_pieces(sentencepiece_model: str, dictionary: str) -> None:
    """The sentencepiece model is the one DICTIONARY (a dict.*.txt) was made with
    (``spm.mismatch``), or ``LoadError``."""
    from .spm import mismatch
    from .storage.checkpoint_io import load_dictionary

    problem = mismatch(sentencepiece_model, load_dictionary(dictionary).symbols)
    if problem:
        raise LoadError(f"{dictionary}: {problem}; pass sentencepiece_model=PATH, the model "
                        "the training text was cut with")


def load(checkpoint: str, data: Optional[str] = None, sentencepiece_model: Optional[str] = None,
         pieces: bool = False, verbose: bool = False, **overrides):
    """A ``Translator`` (``translator_class()``: fairseq's hub interface: ``.translate(text)``, ``.generate``, ...) for
    CHECKPOINT; the module's docstring says what each argument takes."""
    if verbose:
        show_fairseq_log()
    from fairseq import checkpoint_utils

    from . import register
    from .storage.checkpoint_io import (MULTILINGUAL_TASK, CheckpointError, read_checkpoint,
                                        read_fairseq_checkpoint, task_field, trained_on)

    register()
    _regular_file(checkpoint, "checkpoint")
    try:
        header = read_checkpoint(checkpoint, mmap=True)  # tensors mapped: the records only
    except CheckpointError as err:
        raise LoadError(f"{err}: give a checkpoint of fairseq-train or the recipes") from None
    trained = trained_on(header)  # before the options below replace it with DATA
    data = data or trained
    if not data or not os.path.isdir(data):
        raise FileNotFoundError(f"the data directory the model was trained on ({data}) is not "
                                f"there: pass data=DIR, its fairseq-preprocess output")
    data = os.path.abspath(data)
    if sentencepiece_model is not None:
        _regular_file(sentencepiece_model, "sentencepiece model")
    beside = os.path.join(os.path.dirname(data), "spm.model")
    spm = (sentencepiece_model or _stored_sentencepiece(header.get("cfg"))
           or (beside if os.path.isfile(beside) else None))
    if spm is None and not pieces:
        raise LoadError(f"no sentencepiece model found for {checkpoint} (none recorded in it, "
                        f"no spm.model beside {data}): pass sentencepiece_model=PATH, or "
                        "pieces=True if the text you translate is already split into the "
                        "model's pieces")
    options = {"data": data, **({"bpe": "sentencepiece", "sentencepiece_model": spm}
                                if spm else {}), **overrides}
    state = read_fairseq_checkpoint(checkpoint, options)
    task = state["cfg"].get("task") or {}
    if task_field(task, "_name") == MULTILINGUAL_TASK:
        langs = task_field(task, "langs") or []
        langs = langs.split(",") if isinstance(langs, str) else list(langs)
        for side in ("source_lang", "target_lang"):
            if overrides.get(side) not in langs:
                raise LoadError(f"{checkpoint} is a multilingual model: pass source_lang= and "
                                f"target_lang=, each one of {', '.join(langs)} (now {side}="
                                f"{overrides.get(side)!r})")
    check_dictionaries(state, data, trained)
    if spm:
        dictionaries = sorted(n for n in os.listdir(data) if n.startswith("dict.")
                              and n.endswith(".txt"))
        for name in dictionaries:
            check_pieces(spm, os.path.join(data, name))
    # one file, as given: fairseq's from_pretrained would split its name on ':' and look for
    # its own file names in the checkpoint's directory
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], arg_overrides=options, state=state)
    return translator_class()(cfg, task, models)


@functools.lru_cache(maxsize=None)
def translator_class():
    """The class of what ``load`` returns (defined on first use: it needs fairseq)."""
    from fairseq.hub_utils import GeneratorHubInterface

    class Translator(GeneratorHubInterface):
        """fairseq's hub interface, with its text checked before it is encoded."""

        def __init__(self, cfg, task, models):
            super().__init__(cfg, task, models)
            build = task.build_generator
            if "prefix_allowed_tokens_fn" not in inspect.signature(build).parameters:
                # the multilingual task's takes no such argument, which the hub always passes
                def build_generator(models, args, prefix_allowed_tokens_fn=None, **kwargs):
                    if prefix_allowed_tokens_fn is not None:
                        raise InputError(f"{type(task).__name__} decodes without "
                                         "prefix_allowed_tokens_fn")
                    return build(models, args, **kwargs)

                task.build_generator = build_generator
            # a multilingual model starts its output with the target's language token
            self.language_tokens = {index for index, symbol in enumerate(self.tgt_dict.symbols)
                                    if _LANGUAGE_TOKEN.match(symbol)} if is_multilingual(task) \
                else set()

        def decode(self, tokens):
            kept = [t for t in tokens.tolist() if t not in self.language_tokens]
            return super().decode(tokens.new_tensor(kept))

        def encode(self, sentence: str):
            if isinstance(sentence, (bytes, bytearray)):
                raise InputError("the text is bytes: decode it first (text.decode('utf-8'))")
            if not isinstance(sentence, str):
                raise InputError(f"the text is a {type(sentence).__name__}, not a str")
            try:
                sentence.encode("utf-8")
            except UnicodeEncodeError as err:
                raise InputError(f"character {err.start} is {sentence[err.start]!r}, a lone "
                                 "surrogate, not Unicode text (was it decoded with "
                                 "errors='surrogateescape'?)") from None
            tokens = super().encode(sentence)
            limit = self.max_positions[0] if isinstance(self.max_positions, tuple) \
                else self.max_positions
            if limit is not None and len(tokens) > limit:
                raise InputError(f"it is {len(tokens)} tokens long, end of sentence included; "
                                 f"the model reads at most {limit}: split it")
            return tokens

        def sample(self, sentences, *args, **kwargs):
            batch = [sentences] if isinstance(sentences, str) else sentences
            if isinstance(batch, (bytes, bytearray)) or not isinstance(batch, Sequence):
                raise InputError(f"translate takes a str or a list of str, not "
                                 f"{type(sentences).__name__}")
            for index, sentence in enumerate(batch):
                try:
                    self.encode(sentence)
                except InputError as err:
                    raise InputError(f"sentence {index}: {err}") from None
            # a blank sentence has nothing to translate: "" (given only </s>, the model would
            # still write its likeliest sentence)
            blank = {index for index, sentence in enumerate(batch) if not sentence.strip()}
            if not blank:
                return super().sample(sentences, *args, **kwargs)
            rest = [sentence for index, sentence in enumerate(batch) if index not in blank]
            done = iter(super().sample(rest, *args, **kwargs) if rest else [])
            out = ["" if index in blank else next(done) for index in range(len(batch))]
            return out[0] if isinstance(sentences, str) else out

    return Translator
