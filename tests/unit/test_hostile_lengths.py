"""Limits only fairseq knows (issue 43): a valid or test pair longer than the model's positions,
or than the step's --max-tokens, is refused by fairseq only when fairseq-train first validates
(after an epoch of training) or when evaluation's fairseq-generate starts (after the whole run).
The train step refuses it before it launches fairseq, and evaluate before it decodes
(``recipes/run/lengths.py``), in one line naming the split, the direction, the pair's line,
its length, the limit and what to do.

The cases are generated around each boundary: for a dataset of one pair (``parallel``) and the
multilingual one (``opus100``, whose task adds a language token to each side), each split
(valid, test) and each limit (source positions, target positions, --max-tokens), one pair
exactly at the limit and one a token over. Each is binarised by fairseq-preprocess's own main
with prepare's own options (``prepare.preprocess_command``), and fairseq itself decides it:
the task, model and batch iterator fairseq-train's validation and fairseq-generate build, on
the same data. The recipe's check must agree with fairseq on every case, and fairseq must
accept the pair at the limit and refuse the one over it (the cases are on the boundary)."""

import os
import re

import pytest

from deepnet_fairseq.recipes.data import prepare
from deepnet_fairseq.storage.records import write_record
from deepnet_fairseq.recipes.run import lengths, runner
from deepnet_fairseq.recipes.spec import settings
from deepnet_fairseq.recipes.spec.settings import SettingError
from deepnet_fairseq.storage.directories import make_dirs
from deepnet_fairseq.recipes.evaluation.step import evaluate as evaluate_step
from deepnet_fairseq.recipes.run.commands import evaluate_command, method_args, task_args, train_command
from deepnet_fairseq.recipes.run.layout import plan_layout
from deepnet_fairseq.recipes.spec.paths import paths
from support import REPO, fairseq_preprocess

POSITIONS = 1024  # fairseq's default positions of the task and the model, each side
SHORT = 3  # words of an ordinary line
LONG_AT = 2  # the index of the long pair in its split (line 3)
DATASETS = ("parallel", "opus100")
SPLITS = ("valid", "test")
LIMITS = ("source positions", "target positions", "max tokens")
CASES = [(dataset, split, limit, over) for dataset in DATASETS for split in SPLITS
         for limit in LIMITS for over in (0, 1)]


def _cfg(tmp_path, dataset, **env):
    base = {"DEEPNET_WORK": str(tmp_path / "work"), "DEVICE": "cpu", "SIZE": "smoke"}
    if dataset == "parallel":
        base.update(SRC="de", TGT="en", **{f"{split.upper()}_TEXT": str(tmp_path / split)
                                           for split in ("train", "valid", "test")})
    else:
        base.update(SOURCE="local", LOCAL_DIR=str(tmp_path), LANGS="de")
    return settings.resolve(dataset, {**base, **env}, REPO, lambda: 0)


def _binarise(cfg, long_pairs=None):
    """DATA/bin of CFG as prepare makes it from pieces (one pair de-en: ``--joined-dictionary``;
    multilingual: one shared dictionary and its langs.txt / lang_pairs.txt), by
    fairseq-preprocess's own main with prepare's options. Every split holds four short pairs;
    LONG_PAIRS: {split: (source words, target words)} puts one such pair at index LONG_AT."""
    where = paths(cfg)
    pieces = make_dirs(os.path.join(where.data_dir, "spm"))
    for split in ("train", "valid", "test"):
        pairs = [(SHORT, SHORT)] * 4
        if split in (long_pairs or {}):
            pairs[LONG_AT] = long_pairs[split]
        for side, lang, word in ((0, "de", "a"), (1, "en", "b")):
            with open(os.path.join(pieces, f"{split}.de-en.{lang}"), "w") as out:
                out.writelines(" ".join([word] * pair[side]) + "\n" for pair in pairs)
    options = ["--joined-dictionary"]
    if cfg.declaration.task.shared_dictionary:
        dictionary = os.path.join(where.data_dir, "dict.txt")
        with open(dictionary, "w") as out:
            out.write("a 1\nb 1\n")
        options = ["--srcdict", dictionary, "--tgtdict", dictionary]
    fairseq_preprocess(*prepare.preprocess_command(cfg, "de", "en", where.bin, 1,
                                                   *options)[1:])
    if cfg.declaration.task.shared_dictionary:
        for name, text in (("langs.txt", "en,de"), ("lang_pairs.txt", "de-en,en-de")):
            with open(os.path.join(where.bin, name), "w") as out:
                out.write(text + "\n")
    open(os.path.join(where.bin, ".done"), "w").close()
    return where


def _train_command(cfg):
    return train_command(cfg, plan_layout(cfg, {}), method_args(cfg),
                                task_args(cfg))


def _fairseq_refuses(cfg, command, split) -> bool:
    """Whether fairseq itself refuses a pair of SPLIT: the task and model fairseq-train builds
    from COMMAND, and the batch iterator its validation (``Trainer.get_valid_iterator``) or
    fairseq-generate (every direction of the evaluation's command) asks for, its batches made."""
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    bin_dir = paths(cfg).bin
    trained = convert_namespace_to_omegaconf(options.parse_args_and_arch(
        options.get_training_parser(), command[command.index(bin_dir):]))
    task = tasks.setup_task(trained.task)
    model = task.build_model(trained.model)
    runs = []
    if split == "valid":
        task.load_dataset("valid", combine=False, epoch=1)
        runs.append((task, trained, trained.dataset.max_tokens_valid,
                     trained.dataset.batch_size_valid))
    else:
        evaluate = evaluate_command(cfg)
        generate = evaluate[evaluate.index("--") + 1:]
        for src, tgt in lengths.directions(evaluate):
            gen = convert_namespace_to_omegaconf(options.parse_args_and_arch(
                options.get_generation_parser(),
                [*generate, "--path", "model.pt", "--source-lang", src, "--target-lang", tgt]))
            gen_task = tasks.setup_task(gen.task)
            gen_task.load_dataset("test", task_cfg=gen.task)
            runs.append((gen_task, gen, gen.dataset.max_tokens, gen.dataset.batch_size))
    for step_task, step, max_tokens, max_sentences in runs:
        split_name = "valid" if split == "valid" else "test"
        try:
            step_task.get_batch_iterator(
                dataset=step_task.dataset(split_name), max_tokens=max_tokens,
                max_sentences=max_sentences,
                max_positions=utils.resolve_max_positions(step_task.max_positions(),
                                                          model.max_positions()),
                ignore_invalid_inputs=step.dataset.skip_invalid_size_inputs_valid_test,
                required_batch_size_multiple=step.dataset.required_batch_size_multiple,
                seed=1, num_workers=0).next_epoch_itr(shuffle=False)
        except Exception:  # fairseq's own refusal: an Exception, or batch_by_size's assertion
            return True
    return False


def _case(dataset, split, limit, over):
    """(settings, {split: (source words, target words)}) of a case: the long pair's tokens
    (its words, </s>, and the multilingual task's language token) at the limit plus OVER."""
    langtok = 1 if dataset == "opus100" else 0
    if limit == "max tokens":
        max_tokens = 50
        tokens = max_tokens * (1 if split == "valid" else 2)  # evaluation decodes with twice it
        return {"MAX_TOKENS": str(max_tokens)}, {split: (tokens + over - 1 - langtok, SHORT)}
    words = POSITIONS + over - 1 - langtok
    pair = (words, SHORT) if limit == "source positions" else (SHORT, words)
    return {"MAX_TOKENS": "4096"}, {split: pair}


@pytest.mark.parametrize("dataset,split,limit,over", CASES,
                         ids=[f"{d}-{s}-{l.replace(' ', '_')}-{'over' if o else 'at'}"
                              for d, s, l, o in CASES])
def test_a_pair_fairseq_would_refuse_is_refused_before_training(tmp_path, dataset, split,
                                                                   limit, over):
    env, long_pairs = _case(dataset, split, limit, over)
    cfg = _cfg(tmp_path, dataset, **env)
    where = _binarise(cfg, long_pairs)
    command = _train_command(cfg)
    fairseq = _fairseq_refuses(cfg, command, split)
    assert fairseq == bool(over), "the case is not on fairseq's boundary"
    if not over:
        lengths.refuse_too_long(cfg, command)
        return
    with pytest.raises(SettingError) as refused:
        lengths.refuse_too_long(cfg, command)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{split} de-en"), message
    assert f"pair {LONG_AT} (line {LONG_AT + 1} of {where.raw}/{split}.de-en." in message
    if limit == "max tokens":
        tokens = 50 * (1 if split == "valid" else 2)
        assert f"--max-tokens {tokens} (from MAX_TOKENS=50)" in message
        assert f"has {tokens + 1} tokens" in message
        # the fix it names is the least MAX_TOKENS that fairseq accepts
        assert f"Raise MAX_TOKENS to at least {51 if split == 'valid' else 51}" in message
    else:
        assert f"the model's positions ({POSITIONS} source, {POSITIONS} target tokens)" in message
        side = "source" if limit == "source positions" else "target"
        assert f"{POSITIONS + 1} {side}" in message
        assert "Shorten or drop those lines" in message
    if dataset == "opus100":
        assert "a language token added to each side" in message


def test_the_fix_the_message_names_is_accepted_by_fairseq(tmp_path):
    """The MAX_TOKENS the message asks for: fairseq accepts the data with it, both for
    validation (MAX_TOKENS itself) and evaluation (twice it, so half the pair's tokens)."""
    for split, tokens in (("valid", 73), ("test", 73)):
        cfg = _cfg(tmp_path / split, "parallel", MAX_TOKENS="20")
        _binarise(cfg, {split: (tokens - 1, SHORT)})
        with pytest.raises(SettingError, match=r"Raise MAX_TOKENS to at least (\d+)") as refused:
            lengths.refuse_too_long(cfg, _train_command(cfg))
        least = re.search(r"at least (\d+)", str(refused.value)).group(1)
        for value, refuses in ((least, False), (str(int(least) - 1), True)):
            fixed = _cfg(tmp_path / split, "parallel", MAX_TOKENS=value)
            assert _fairseq_refuses(fixed, _train_command(fixed), split) == refuses, value
            if not refuses:
                lengths.refuse_too_long(fixed, _train_command(fixed))


def test_train_refuses_before_it_writes_anything(tmp_path):
    """The train step itself: refused before the run directory exists (nothing to clean up,
    nothing trained)."""
    cfg = _cfg(tmp_path, "parallel", MAX_TOKENS="4096")
    where = _binarise(cfg, {"test": (POSITIONS, SHORT)})
    with pytest.raises(SettingError, match="^test de-en: 1 pair"):
        runner.train(cfg, {})
    assert not os.path.exists(where.run_dir)


def test_evaluate_refuses_before_it_decodes(tmp_path):
    """Evaluate of a trained run whose test text (or MAX_TOKENS) changed since: refused before
    it takes the run's lock or writes a record, with the positions the run trained with."""
    cfg = _cfg(tmp_path, "parallel", MAX_TOKENS="30")
    where = _binarise(cfg, {"test": (60, SHORT)})
    run = make_dirs(where.run_dir)
    write_record(os.path.join(run, "status.json"), "status", {"status": "ok"})
    write_record(os.path.join(run, "config.json"), "run-config",
                 {"step": "train", "dataset": cfg.dataset, "settings": cfg.as_json(),
                  "command": _train_command(cfg)})
    before = sorted(os.listdir(run))
    with pytest.raises(SettingError, match="^test de-en: 1 pair.* --max-tokens 60 "):
        evaluate_step(cfg, {})
    assert sorted(os.listdir(run)) == before
    lengths.refuse_too_long_to_evaluate(_cfg(tmp_path, "parallel", MAX_TOKENS="31"))


# fairseq-train options (TRAIN_ARGS) that move fairseq's own limits, the long pair tried under
# each, and the splits fairseq then refuses it in: the check reads the limits from the steps'
# command lines, not from the settings
MOVED = [("--max-source-positions 2000 --max-target-positions 2000", (1499, SHORT), {"test"}),
         ("--encoder-learned-pos --decoder-learned-pos", (1499, SHORT), {"valid", "test"}),
         ("--truncate-source", (1499, SHORT), {"test"}),
         ("--skip-invalid-size-inputs-valid-test", (1499, SHORT), {"test"}),
         ("--max-tokens-valid 20", (29, SHORT), {"valid"})]
MOVED_CASES = [(options, pair, split, split in refused) for options, pair, refused in MOVED
               for split in SPLITS]


@pytest.mark.parametrize("train_args,pair,split,refused", MOVED_CASES,
                         ids=[f"{o.split()[0]}-{s}" for o, _, s, _ in MOVED_CASES])
def test_the_limits_are_fairseqs_under_options_that_move_them(tmp_path, train_args, pair,
                                                               split, refused):
    """Validation sees what fairseq-train's options say (positions raised, learned, the source
    truncated, long pairs skipped, its own --max-tokens-valid); evaluation's fairseq-generate
    sees its own task's positions (1024 whatever the training said) and the model's. The check
    refuses exactly what fairseq refuses."""
    cfg = _cfg(tmp_path, "parallel", MAX_TOKENS="4096", TRAIN_ARGS=train_args)
    _binarise(cfg, {split: pair})
    command = _train_command(cfg)
    fairseq = _fairseq_refuses(cfg, command, split)
    assert fairseq == refused
    try:
        lengths.refuse_too_long(cfg, command)
    except SettingError as err:
        assert fairseq, f"refused what fairseq accepts: {err}"
        assert str(err).startswith(f"{split} de-en"), err
        if "--max-tokens-valid" in train_args:
            assert "Raise --max-tokens-valid in TRAIN_ARGS to at least 30" in str(err)
    else:
        assert not fairseq, "accepted what fairseq refuses"
