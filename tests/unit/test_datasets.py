"""Datasets as declarations (deepnet_fairseq/recipes/datasets/): every step asks the declaration,
no module outside it names a dataset, and adding a dataset is one file (docs/running.md's
example, declared here from the page)."""

import ast
import glob
import os
import re
import sys

import pytest

from deepnet_fairseq import methods
from deepnet_fairseq.recipes import datasets
from deepnet_fairseq.recipes.data import prepare
from deepnet_fairseq.recipes.datasets import DATASETS, MANY_PAIRS, ONE_PAIR, Dataset
from deepnet_fairseq.recipes.reporting import report
from deepnet_fairseq.recipes.spec import presets, settings
from deepnet_fairseq.recipes.spec.settings import SettingError
from deepnet_fairseq.recipes.evaluation.step import evaluate as evaluate_step
from deepnet_fairseq.recipes.pipeline.sweeps import sweep as run_sweep
from deepnet_fairseq.recipes.run.commands import task_args
from deepnet_fairseq.recipes.run.layout import dictionary_size
from support import REPO

PACKAGE = os.path.join(REPO, "deepnet_fairseq")
DECLARATIONS = os.path.join(PACKAGE, "recipes", "datasets")


def names_outside(package: str, declarations: str, names) -> list:
    """Every string constant in a .py file of PACKAGE, outside DECLARATIONS, that is one of
    NAMES, as "path:line: 'name'"."""
    found = []
    for path in sorted(glob.glob(os.path.join(package, "**", "*.py"), recursive=True)):
        if os.path.commonpath([path, declarations]) == declarations:
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        found += [f"{os.path.relpath(path, package)}:{node.lineno}: {node.value!r}"
                  for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in names]
    return found


def test_no_module_outside_the_declarations_names_a_dataset():
    """A dataset's name as a string anywhere in the package but its declaration (a comparison
    such as ``cfg.dataset == "opus100"``, a dict keyed by name, a default) is what the
    declarations replace: ask ``cfg.declaration`` (``.task``, ``.metric``, ...)."""
    found = names_outside(PACKAGE, DECLARATIONS, DATASETS)
    assert not found, ("dataset names outside deepnet_fairseq/recipes/datasets/ (make it a "
                       "property of the Dataset declaration):\n" + "\n".join(found))


def test_the_scan_finds_a_comparison_by_name_and_spares_the_declarations(tmp_path):
    """The scan above, on a package of two files: it reports the comparison by name in a step
    and passes over the same name in the declarations' directory."""
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "opus100.py").write_text('NAME = "opus100"\n')
    (tmp_path / "step.py").write_text('import os\n\nif cfg.dataset == "opus100":\n    pass\n')
    assert names_outside(str(tmp_path), str(tmp_path / "datasets"), DATASETS) == [
        "step.py:3: 'opus100'"]


@pytest.mark.parametrize("name", list(DATASETS))
def test_every_declaration_is_complete_and_resolves(name):
    declared = DATASETS[name]
    assert os.path.isfile(os.path.join(DECLARATIONS, f"{name}.py"))
    assert declared.preset.kind == "dataset" and declared.preset.name == name
    assert declared.metric in datasets.METRICS and declared.about and declared.languages
    source = "multi30k" if "multi30k" in declared.sources else declared.sources[0]
    cfg = settings.resolve(name, {"DEVICE": "cpu", "SIZE": "smoke", "SRC": "en", "TGT": "de",
                                  "SOURCE": source}, REPO)
    assert cfg.declaration is declared
    # what train and evaluate need of every dataset is set by its preset or the size
    for setting in ("MODEL", "VOCAB", "LR", "WARMUP", "TOKENS_PER_UPDATE", "BEAM", "MAX_LEN_A",
                    "METHODS", "DEPTHS", "TOKENIZED_BLEU"):
        assert setting in cfg, (name, setting)
    for ref in declared.paper:
        assert ref.method is None or ref.method in methods.METHODS  # a method of the registry


def test_the_declarations_carry_what_the_steps_used_to_test_by_name():
    """The values the modules once chose by name, now each declaration's: the paper's metric
    and task of the shipped datasets (a dataset added later is not listed here)."""
    shipped = {"wmt17": ("tok_bleu", ONE_PAIR), "opus100": ("sacrebleu_avg", MANY_PAIRS),
               "iwslt14": ("sacrebleu", ONE_PAIR), "reverse_copy": ("sacrebleu", ONE_PAIR),
               "parallel": ("sacrebleu", ONE_PAIR)}
    assert {n: (DATASETS[n].metric, DATASETS[n].task) for n in shipped} == shipped
    assert list(DATASETS)[:3] == ["wmt17", "opus100", "iwslt14"]  # the paper's order
    assert len(DATASETS["wmt17"].paper) == 8 and len(DATASETS["opus100"].paper) == 5
    env = {"DEVICE": "cpu", "SOURCE": "multi30k", "VOCAB": "1000"}
    opus = settings.resolve("opus100", env, REPO)
    wmt = settings.resolve("wmt17", env, REPO)
    assert dictionary_size(opus) == 1104 and dictionary_size(wmt) == 1004
    assert "translation_multi_simple_epoch" in task_args(opus, dry_run=True)
    assert task_args(wmt)[:2] == ["--task", "translation"]


@pytest.mark.parametrize("name", list(DATASETS))
def test_every_declared_task_is_one_fairseq_takes(name):
    """The task a dataset names, against fairseq's own parsers: train and generate options it
    accepts, the directions evaluate scores are the ones fairseq loads, language tokens where
    its task adds them (evaluate then leaves the dictionaries' sizes to fairseq), the lists of
    a shared dictionary's binarisation where its options read them, and a source-blind
    baseline only where BIN holds one pair."""
    from fairseq import options

    task = DATASETS[name].task
    lists = {"langs.txt": "en,de,fr", "lang_pairs.txt": "de-en,en-de,fr-en,en-fr"}
    read = []
    # resolved settings of that dataset with the languages the lists above hold
    languages = {"SRC": "de", "TGT": "en"} if "SRC" in task.settings else {}
    cfg = settings.resolve(name, {"DEVICE": "cpu", "SIZE": "smoke", "DEEPNET_WORK": "/nonexistent",
                                  "SOURCE": DATASETS[name].sources[-1], **languages}, REPO)

    def lookup(list_name):
        read.append(list_name)
        return lists[list_name]

    train = options.parse_args_and_arch(options.get_training_parser(), [
        "bin", *task.train_args(cfg, lookup), "--arch", "transformer"])
    generate = options.parse_args_and_arch(options.get_generation_parser(), [
        "bin", *task.generate_args(cfg, lookup), "--path", "model.pt"])
    assert train.task == generate.task
    loaded = (generate.lang_pairs if generate.task == "translation_multi_simple_epoch"
              else f"{train.source_lang}-{train.target_lang}")
    assert task.directions(cfg, lookup) == loaded
    adds_tokens = getattr(train, "encoder_langtok", None) is not None
    assert bool(task.language_tokens) == adds_tokens
    assert task.shared_dictionary == (set(read) == set(lists))
    assert task.source_blind_baseline == ("," not in loaded)
    assert set(task.settings) <= set(settings.SETTINGS)


def test_the_generic_dataset_asks_for_what_it_cannot_guess(tmp_path):
    env = {"DEVICE": "cpu", "SIZE": "smoke", "DEEPNET_WORK": str(tmp_path)}
    cfg = settings.resolve("parallel", env, REPO)
    assert cfg["WORK"] == str(tmp_path) and cfg.sources["SOURCE"] == "dataset parallel [chosen]"
    with pytest.raises(SettingError, match=r"SRC is not set .*SRC=\.\.\. or DEEPNET_SRC"):
        task_args(cfg)
    with pytest.raises(SettingError, match="SOURCE=local or multi30k only"):
        settings.resolve("parallel", {**env, "SOURCE": "download"}, REPO)
    with pytest.raises(SettingError, match="copy task"):
        settings.resolve("parallel", {**env, "SRC": "de", "TGT": "de"}, REPO)
    with pytest.raises(SettingError, match="unknown dataset 'wmt18'.*parallel.*datasets/"):
        settings.resolve("wmt18", env, REPO)


def test_text_paths_are_read_plain_or_gzipped_and_a_missing_one_is_named(tmp_path):
    import gzip

    (tmp_path / "train.de").write_bytes(b"a\nb\n")
    with gzip.open(tmp_path / "train.en.gz", "wb") as f:
        f.write(b"A\nB")
    for split in ("valid", "test"):
        for lang in ("de", "en"):
            (tmp_path / f"{split}.{lang}").write_bytes(b"x\n")
    env = {"DEVICE": "cpu", "SRC": "de", "TGT": "en", "DEEPNET_WORK": str(tmp_path / "w"),
           **{f"{s}_TEXT": str(tmp_path / s.lower()) for s in ("TRAIN", "VALID", "TEST")}}
    cfg = settings.resolve("parallel", env, REPO)
    out = tmp_path / "raw"
    out.mkdir()
    assert prepare.raw_text(cfg, str(out), print) == ["de-en"]
    assert (out / "train.de-en.en").read_bytes() == b"A\nB\n"
    cfg = settings.resolve("parallel", {**env, "TEST_TEXT": str(tmp_path / "nowhere")}, REPO)
    with pytest.raises(prepare.PrepareError, match=r"nowhere\.de\[\.gz\] not found: set "
                                                   "TEST_TEXT"):
        prepare.raw_text(cfg, str(out), print)


def test_help_and_the_docs_table_list_every_dataset():
    text = settings.help_text()
    for name, declared in DATASETS.items():
        assert re.search(rf"^   {name} +{re.escape(declared.about[:20])}", text, re.M), name
        assert f"| `{name}` |" in datasets.markdown_table()
        assert f"## dataset `{name}`" in presets.markdown()


def _example():
    with open(os.path.join(REPO, "docs", "running.md"), encoding="utf-8") as f:
        section = f.read().split("## Adding a dataset\n")[1].split("\n## ")[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


def test_the_docs_example_is_one_file_that_runs_every_step(tmp_path, monkeypatch, capsys):
    """docs/running.md's example, as the file it says to add: discovered beside the shipped
    declarations, it resolves, and train, evaluate and sweep build their commands."""
    from deepnet_fairseq.recipes.run import runner

    (tmp_path / "clinical.py").write_text(_example())
    monkeypatch.setattr(datasets, "__path__", [*datasets.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, f"{datasets.__name__}.clinical", raising=False)
    found = datasets.discover(datasets.__path__)
    for module in (datasets, settings, report):  # as a process started with the file there
        monkeypatch.setattr(module, "DATASETS", found)
    assert isinstance(found["clinical"], Dataset) and set(found) == {*DATASETS, "clinical"}
    assert "clinical" in settings.help_text()

    env = {"DEVICE": "cpu", "SIZE": "smoke", "DEEPNET_WORK": str(tmp_path / "work")}
    cfg = settings.resolve("clinical", env, REPO)
    assert (cfg["SRC"], cfg["TGT"], cfg["DEPTHS"]) == ("de", "en", "1 2")  # the size wins
    assert cfg["TRAIN_TEXT"] == "/data/clinical/train"
    assert cfg.sources["TGT"] == "dataset clinical [chosen]"
    assert cfg.sources["MAX_LEN"] == "dataset clinical [chosen]"  # from parallel's preset
    for step in (runner.train, evaluate_step, run_sweep):
        assert step(cfg, env, dry_run=True) == 0
    out = capsys.readouterr().out
    assert "--source-lang de --target-lang en" in out
    # no scripts/clinical/: a step without prepared data names the program, not a script
    with pytest.raises(SettingError, match=r"run python -m deepnet_fairseq\.recipes clinical "
                                           r"prepare first \(same SIZE"):
        runner.train(cfg, env)
    table = report.markdown("clinical", [])
    assert "detokenised sacreBLEU" in table and "paper's numbers" not in table
    monkeypatch.delitem(sys.modules, f"{datasets.__name__}.clinical")


def test_a_file_in_the_directory_without_a_declaration_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "notes.py").write_text("X = 1\n")
    monkeypatch.setattr(datasets, "__path__", [*datasets.__path__, str(tmp_path)])
    with pytest.raises(TypeError, match=r"datasets\.notes must declare DATASET = Dataset\("):
        datasets.discover(datasets.__path__)
    monkeypatch.delitem(sys.modules, f"{datasets.__name__}.notes", raising=False)


def test_a_declaration_that_cannot_work_is_refused_when_declared():
    parallel = DATASETS["parallel"]
    with pytest.raises(ValueError, match="metric 'bleu' is not one of tok_bleu"):
        Dataset(name="parallel", about="", languages="", preset=parallel.preset,
                raw_text=parallel.raw_text, metric="bleu")
    with pytest.raises(ValueError, match="its preset is dataset 'parallel', not dataset 'x'"):
        Dataset(name="x", about="", languages="", preset=parallel.preset,
                raw_text=parallel.raw_text)
    bare = parallel.preset.extend("y", "no sweep", [])
    bare.values.pop("DEPTHS")
    with pytest.raises(ValueError, match="does not set DEPTHS"):
        Dataset(name="y", about="", languages="", preset=bare, raw_text=parallel.raw_text)
