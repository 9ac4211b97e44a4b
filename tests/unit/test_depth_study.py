"""deepnet-depth-study is a sweep of the recipes: its options become the recipe's settings (and
are checked as those are, naming the option), its task is the reverse_copy declaration's
generated text, and its table is the report's loss table, checked here against hand-made
records. The verdicts themselves are the runner's (fairseq_log, tests/unit/test_runlog.py);
the real runs: slow/test_diagnostics_end_to_end.py."""

import os

import pytest

from deepnet_fairseq.recipes import depth_study
from deepnet_fairseq.recipes.datasets import reverse_copy
from deepnet_fairseq.recipes.reporting import report
from deepnet_fairseq.recipes.spec.settings import SettingError, resolve
from support import REPO

ENV = {"DEVICE": "cpu"}


def spec(argv, env=ENV):
    args = depth_study.get_parser().parse_args(argv)
    return resolve(args.dataset, env, REPO, given=depth_study.given_settings(args))


def test_the_options_set_the_recipe_settings_and_say_so():
    cfg = spec(["--methods", "post_ln, deepnet", "--depths", "6,18", "--updates", "40",
                "--lr", "2e-3", "--warmup", "8", "--max-tokens", "256", "--seed", "3",
                "--fairseq-args=--no-save-optimizer-state", "--output-dir", "/tmp/study",
                "--force"])
    expected = {"METHODS": "post_ln deepnet", "DEPTHS": "6 18", "MAX_UPDATE": "40",
                "LR": "2e-3", "WARMUP": "8", "TOKENS_PER_UPDATE": "256", "MAX_TOKENS": "256",
                "SEED": "3", "TRAIN_ARGS": "--no-save-optimizer-state", "WORK": "/tmp/study",
                "RETRY": "1"}
    assert {name: cfg[name] for name in expected} == expected
    assert cfg.sources["MAX_TOKENS"] == "deepnet-depth-study --max-tokens"
    assert cfg.declaration is reverse_copy.DATASET


def test_without_options_the_study_is_the_declarations():
    cfg = spec([])
    assert list(cfg.sweep.methods) == ["post_ln", "pre_ln", "deepnet"]
    assert list(cfg.sweep.depths) == [6, 18, 50, 100, 200, 500]
    assert (cfg["EMBED_DIM"], cfg["FFN_DIM"], cfg["HEADS"]) == ("64", "128", "2")
    assert cfg.optim.lr == 1e-3 and cfg.optim.max_update == 400
    assert cfg["WORK"] == os.path.join(REPO, "runs", "reverse_copy")


def test_the_environment_wins_over_an_option_with_a_note():
    cfg = spec(["--lr", "2e-3"], {**ENV, "LR": "5e-4"})
    assert cfg["LR"] == "5e-4" and any("LR" in note for note in cfg.notes)


@pytest.mark.parametrize("option, value", [
    ("--depths", "6,x"), ("--depths", "0"), ("--updates", "٣"), ("--lr", "0"),
    ("--warmup", "0"), ("--max-tokens", "-1"), ("--seed", "1" * 20),
    ("--methods", "post_ln,no_such_method"), ("--fairseq-args=", "--arch transformer")])
def test_a_bad_option_is_refused_as_its_setting_naming_the_option(option, value, tmp_path,
                                                                  capsys):
    """Through the study's whole path, as a dry run: the setting's own check (its kind, its
    bounds), the sweep's check of each run (a known method, depths of at least 1) and of each
    run's command (TRAIN_ARGS may not set what the recipe sets); one line, nothing written."""
    out = tmp_path / "study"
    argv = [option + value] if option.endswith("=") else [option, value]
    assert depth_study.main([*argv, "--output-dir", str(out), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"deepnet-depth-study {option.rstrip('=')}" in err or "--arch is set by" in err, err
    assert "Traceback" not in err and not out.exists()


def test_a_dry_run_writes_nothing(tmp_path, capsys):
    out = tmp_path / "study"
    assert depth_study.main(["--depths", "2", "--output-dir", str(out), "--dry-run"]) == 0
    assert not out.exists()
    assert "post_ln-2L-2L: new" in capsys.readouterr().out


def test_on_real_text_it_is_the_wmt17_recipe_on_the_shipped_multi30k(tmp_path, capsys,
                                                                     monkeypatch):
    from deepnet_fairseq.corpora import multi30k_dir

    cfg = spec(["--dataset", "wmt17", "--depths", "6,18"], {**ENV, "SOURCE": "multi30k"})
    assert cfg.dataset == "wmt17" and cfg["LOCAL_DIR"] == multi30k_dir()
    assert cfg["DEPTHS"] == "6 18" and cfg["MODEL"] == "base"  # the dataset's own settings
    out = tmp_path / "study"
    monkeypatch.setenv("SOURCE", "multi30k")
    assert depth_study.main(["--dataset", "wmt17", "--depths", "6", "--methods", "deepnet",
                             "--output-dir", str(out), "--dry-run"]) == 0
    assert "deepnet-6L-6L: new" in capsys.readouterr().out and not out.exists()


def test_the_task_is_each_sentence_and_its_reversal_the_same_at_every_call():
    for split, count in reverse_copy.SENTENCES.items():
        pairs = list(reverse_copy.sentences(split))
        assert len(pairs) == count and pairs == list(reverse_copy.sentences(split))
        for source, target in pairs:
            words = source.split()
            assert target.split() == words[::-1]
            assert reverse_copy.LENGTHS[0] <= len(words) <= reverse_copy.LENGTHS[1]
            assert set(words) <= set(reverse_copy.WORDS)
    assert list(reverse_copy.sentences("train"))[:5] != list(reverse_copy.sentences("valid"))[:5]
    # no word is a prefix of another: sentencepiece keeps each one a piece (the slow test checks)
    assert len({w[:3] for w in reverse_copy.WORDS}) == len(reverse_copy.WORDS) == 30


def row(label, layers, status="ok", nll=None, stalled=False):
    return {"label": label, "encoder_layers": layers, "decoder_layers": layers,
            "layers": 2 * layers, "status": status, "bleu": "", "last_valid_loss": nll,
            "last_valid_nll": nll, "stalled": stalled}


def test_the_loss_table_from_hand_made_records():
    rows = [row("post_ln", 6, nll=0.42), row("post_ln", 18, nll=4.64, stalled=True),
            row("post_ln", 50, status="diverged"),
            row("deepnet", 6, nll=1.0), row("deepnet", 6, nll=2.0),  # two seeds
            row("deepnet", 18, nll=1.5), row("deepnet", 18, status="diverged"),
            row("deepnet", 50, status="failed")]
    table = report.loss_markdown("reverse_copy", rows, baseline=4.77, margin=0.5)
    lines = table.splitlines()
    assert "Source-blind baseline 4.77 bits" in table and "not below 4.27" in table
    assert lines[lines.index("| method | 6L-6L | 18L-18L | 50L-50L |") + 2:] == [
        "| deepnet | 1.50 | 1.50 (2 seeds, 1 diverged) | failed |",
        "| post_ln | 0.42 | stalled (4.64) | diverged |"]
