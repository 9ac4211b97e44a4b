"""The recipes' reports on hand-made inputs: run classification, validation curves, scoring,
the results table, CSV, plot and log fit. The shell scripts themselves:
integration/test_recipe_scripts.py."""

import csv
import json
import math
import os

import pytest

from deepnet_fairseq import fairseq_log
from deepnet_fairseq.recipes.evaluation import score
from deepnet_fairseq.recipes.reporting import curves, report
from deepnet_fairseq.storage.records import write_record
from deepnet_fairseq.recipes.run import runlog


# ---- run classification --------------------------------------------------------------------

VALID = "2026-01-01 10:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss {} | nll_loss 3 | num_updates {}\n"


def test_classify_ok_diverged_failed():
    ok = runlog.classify(VALID.format(9.1, 10) + VALID.format(6.5, 20), 0, vocab_size=1024)
    assert ok["status"] == "ok" and ok["last_valid_loss"] == 6.5 and ok["num_updates"] == 20
    # worse than a uniform guess over 1024 types (10 bits): diverged even though fairseq exited 0
    flat = runlog.classify(VALID.format(10.2, 20), 0, vocab_size=1024)
    assert flat["status"] == "diverged" and "uniform" in flat["reason"]
    assert runlog.classify(VALID.format(10.2, 4), 0, 1024, min_updates=5)["status"] == "ok"
    nan = runlog.classify(VALID.format("nan", 20), 0, vocab_size=1024)
    assert nan["status"] == "diverged"
    fpe = runlog.classify("FloatingPointError: Minimum loss scale reached (0.0001).\n", 1, 1024)
    assert fpe["status"] == "diverged" and "Minimum loss scale" in fpe["reason"]
    oom = runlog.classify(VALID.format(7.0, 5) + "RuntimeError: CUDA out of memory.\n", 1, 1024)
    assert oom["status"] == "failed" and "out of memory" in oom["reason"]


def test_valid_curve_reads_every_validation_and_a_resumed_run_keeps_the_later_one():
    log = (VALID.format(9.1, 10) + "2026-01-01 10:00:00 | INFO | train_inner | epoch 001: "
           "loss=7.2, num_updates=15\n"
           + VALID.format(8.0, 20) + VALID.format(7.9, 20) + VALID.format("nan", 30))
    curve = fairseq_log.valid_curve(log)
    assert list(curve) == [10, 20, 30] and curve[10] == 9.1 and curve[20] == 7.9
    assert math.isnan(curve[30])


def test_curves_refuses_a_directory_without_a_curve_and_writes_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(SystemExit):
        curves.main([str(run), "--export", str(tmp_path / "out")])
    assert "neither train.log nor valid_loss.csv" in capsys.readouterr().err
    (run / "train.log").write_text("no validation yet\n")
    with pytest.raises(SystemExit):
        curves.main([str(run), "--export", str(tmp_path / "out")])
    assert "no validation record yet" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ---- scoring --------------------------------------------------------------------------------

def test_score_reads_generate_output_in_order_and_splits_compounds(tmp_path):
    gen = tmp_path / "generate-test.txt"
    gen.write_text("S-1\tx\nD-1\t-0.1\tEin Rot-Wein-Glas .\nD-0\t-0.2\tDas ist gut .\n")
    assert score.hypotheses(str(gen)) == ["Das ist gut .", "Ein Rot-Wein-Glas ."]
    assert score.tokenize(["Rot-Wein-Glas."], "de", True) == ["Rot ##AT##-##AT## Wein ##AT##-##AT## Glas ."]
    ref = tmp_path / "ref.de"
    ref.write_text("Das ist gut .\nEin Rot-Wein-Glas .\n")
    result = score.score_direction(str(gen), str(ref), "de", tokenized=True, compound_split=True)
    assert result["sacrebleu"] == 100.0 and result["tok_bleu"] == 100.0
    assert result["signature"].startswith("nrefs:1|case:mixed")
    ref.write_text("Das ist gut .\n")
    with pytest.raises(ValueError, match="hypotheses"):
        score.score_direction(str(gen), str(ref), "de", tokenized=False, compound_split=False)
    summary = score.summarise({"de-en": {"sacrebleu": 30.0}, "fr-en": {"sacrebleu": 20.0},
                               "en-de": {"sacrebleu": 10.0}})
    assert (summary["x_en"], summary["en_x"], summary["sacrebleu_avg"]) == (25.0, 10.0, 20.0)


# ---- table, CSV, plot, fit ------------------------------------------------------------------

def _fake_run(runs, name, method, n, status, bleu=None, directions=None, distinct_share=0.99,
              seed=None):
    os.makedirs(runs / name / "eval", exist_ok=True)
    # the report reads a run's seed from its records (status.json), never from its command
    (runs / name / "command.sh").write_text("fairseq-train data --arch x --seed 99\n")
    (runs / name / "status.json").write_text(json.dumps(
        {"method": method, "encoder_layers": n, "decoder_layers": n, "status": status,
         "label": method, "reason": "" if status == "ok" else "fairseq reported: nan",
         **({} if seed is None else {"seed": seed})}))
    if status == "ok":
        dirs = directions or {"en-de": {"sacrebleu": bleu, "tok_bleu": bleu, "signature": "sig",
                                        "distinct_share": distinct_share}}
        (runs / name / "eval" / "eval.json").write_text(json.dumps(score.summarise(dirs)))


def test_wmt_table_has_paper_shape(tmp_path):
    runs = tmp_path / "runs"
    _fake_run(runs, "deepnet-6L-6L", "deepnet", 6, "ok", 27.5)
    _fake_run(runs, "deepnet-18L-18L", "deepnet", 18, "ok", 28.4)
    _fake_run(runs, "post_ln-6L-6L", "post_ln", 6, "ok", 28.0)
    _fake_run(runs, "post_ln-18L-18L", "post_ln", 18, "diverged")
    report.main(["--dataset", "wmt17", "--runs", str(runs), "--out", str(tmp_path / "out")])
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| method | 6L-6L | 18L-18L |" in table
    assert "| deepnet | 27.5 (paper 27.8) | 28.4 (paper 28.8) |" in table
    assert "| post_ln | 28.0 (paper 28.1) | diverged (paper diverged) |" in table
    rows = (tmp_path / "out" / "results.csv").read_text().splitlines()
    assert rows[0].startswith("dataset,run,method") and len(rows) == 5
    assert (tmp_path / "out" / "bleu_vs_depth.png").read_bytes()[:4] == b"\x89PNG"
    assert "fewer than 50% distinct" not in table
    # two groups of methods: a figure with a column for each, in the paper's order
    assert (tmp_path / "out" / "by_group.png").read_bytes()[:4] == b"\x89PNG"
    assert report.plot_groups(str(tmp_path / "g.png"), "wmt17",
                              report.collect("wmt17", str(runs))) == ["Post-LN", "DeepNet"]
    # one group only: the single plot says it all, no second figure
    assert report.plot_groups(str(tmp_path / "one.png"), "wmt17", [
        r for r in report.collect("wmt17", str(runs)) if r["method"] == "deepnet"]) == []
    assert not (tmp_path / "one.png").exists()


def test_results_csv_gives_chrf_beside_sacrebleu(tmp_path):
    """chrF in results.csv: the mean over a run's directions ((50.0 + 61.0) / 2 by hand), and
    empty for an evaluation made before chrF was scored."""
    runs = tmp_path / "runs"
    _fake_run(runs, "two-ways", "deepnet", 6, "ok", directions={
        "de-en": {"sacrebleu": 20.0, "chrf": 50.0, "signature": "s", "distinct_share": 0.9},
        "en-de": {"sacrebleu": 30.0, "chrf": 61.0, "signature": "s", "distinct_share": 0.9}})
    _fake_run(runs, "before-chrf", "deepnet", 12, "ok", 25.0)
    report.main(["--dataset", "wmt17", "--runs", str(runs), "--out", str(tmp_path / "out")])
    rows = {r["run"]: r for r in csv.DictReader(open(tmp_path / "out" / "results.csv"))}
    assert (rows["two-ways"]["sacrebleu"], rows["two-ways"]["chrf"]) == ("25.0", "55.5")
    assert (rows["before-chrf"]["sacrebleu"], rows["before-chrf"]["chrf"]) == ("25.0", "")


def test_table_names_runs_that_ignore_their_source(tmp_path):
    runs = tmp_path / "runs"
    _fake_run(runs, "deepnet-6L-6L", "deepnet", 6, "ok", 27.5, distinct_share=0.973)
    _fake_run(runs, "pre_ln-50L-50L", "pre_ln", 50, "ok", 5.3, distinct_share=0.442)
    _fake_run(runs, "opus-like", "deepnet", 12, "ok", directions={  # worst direction counts
        "de-en": {"sacrebleu": 20.0, "signature": "s", "distinct_share": 0.9},
        "en-de": {"sacrebleu": 3.0, "signature": "s", "distinct_share": 0.01}})
    rows = {r["run"]: r for r in report.collect("wmt17", str(runs))}
    assert (rows["deepnet-6L-6L"]["distinct_share"], rows["opus-like"]["distinct_share"]) == (0.973, 0.01)
    table = report.markdown("wmt17", list(rows.values()))
    listed = table.split("fewer than 50% distinct")[1].split("\n\n")[1].splitlines()
    assert listed == ["- opus-like: 1.0% distinct", "- pre_ln-50L-50L: 44.2% distinct"]


def test_opus_fit_recovers_a_log_law(tmp_path):
    runs = tmp_path / "runs"
    for n in (6, 12, 50, 100):
        d = 2 * n
        bleu = round(1.5 * math.log(d) + 20.0, 6)
        _fake_run(runs, f"deepnet-{n}L-{n}L", "deepnet", n, "ok", directions={
            "de-en": {"sacrebleu": bleu + 1, "signature": "s"},
            "en-de": {"sacrebleu": bleu - 1, "signature": "s"}})
    _fake_run(runs, "post_ln-100L-100L", "post_ln", 100, "diverged")
    (a, b, r2, points), = report.fits(report.collect("opus100", str(runs))).values()
    assert r2 == pytest.approx(1.0) and points == 4
    assert a == pytest.approx(1.5, abs=0.01) and b == pytest.approx(20.0, abs=0.05)
    report.main(["--dataset", "opus100", "--runs", str(runs), "--out", str(tmp_path / "out")])
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| model | layers | X->En | En->X | Avg |" in table
    assert "deepnet: BLEU(d) = 1.50" in table and " ln d + 2" in table
    assert "(paper 31.1)" in table and "post_ln-100L-100L: diverged" in table


def test_a_table_of_many_methods_is_grouped_as_the_paper_groups_them():
    def row(label, bleu, share=0.99, status="ok"):
        return {"dataset": "wmt17", "run": f"{label}-6L-6L", "method": label, "label": label,
                "encoder_layers": 6, "decoder_layers": 6, "layers": 12, "status": status,
                "bleu": bleu, "sacrebleu": bleu, "tok_bleu": bleu, "paper_bleu": "",
                "distinct_share": share, "reason": "", "signature": ""}

    rows = [row("subln", 11.0), row("deepnet", 11.5), row("pre_ln", 11.8), row("rezero", 5.5),
            row("admin", 2.6, share=0.03), row("post_ln", "", status="diverged")]
    table = report.markdown("wmt17", rows)
    order = [line for line in table.splitlines() if line.startswith("| **")]
    assert order == ["| **Post-LN** | |", "| **No-LN** | |", "| **Pre-LN** | |",
                     "| **DeepNet** | |", "| **after 2022** | |"]
    assert "| admin | 2.6 (ignores its source) |" in table
    assert "| post_ln | diverged |" in table
    assert table.index("| post_ln |") < table.index("| rezero |") < table.index("| subln |")


def test_seeds_of_a_cell_give_its_mean_and_spread(tmp_path):
    """Three seeds of DeepNet 6L-6L: the cell is the mean and the sample standard deviation,
    worked out here by hand; Pre-LN with a diverged seed and one that ignores its source says
    so; a single run keeps the plain cell; the CSV keeps every run with its seed."""
    runs = tmp_path / "runs"
    for seed, bleu in ((1, 11.5), (2, 12.1), (3, 10.9)):
        _fake_run(runs, f"deepnet-6L-6L-seed{seed}", "deepnet", 6, "ok", bleu, seed=seed)
    _fake_run(runs, "pre_ln-6L-6L", "pre_ln", 6, "ok", 11.0, seed=1)
    _fake_run(runs, "pre_ln-6L-6L-seed2", "pre_ln", 6, "diverged", seed=2)
    _fake_run(runs, "pre_ln-6L-6L-seed3", "pre_ln", 6, "ok", 3.0, distinct_share=0.1, seed=3)
    _fake_run(runs, "post_ln-6L-6L", "post_ln", 6, "ok", 9.25, seed=1)
    report.main(["--dataset", "wmt17", "--runs", str(runs), "--out", str(tmp_path / "out")])
    table = (tmp_path / "out" / "table.md").read_text()
    mean = (11.5 + 12.1 + 10.9) / 3
    sd = math.sqrt(((11.5 - mean) ** 2 + (12.1 - mean) ** 2 + (10.9 - mean) ** 2) / 2)
    assert f"| deepnet | {mean:.2f} ± {sd:.2f} (3 seeds) (paper 27.8) |" in table
    assert (f"| pre_ln | {(11.0 + 3.0) / 2:.2f} ± {math.sqrt(2 * 4.0 ** 2):.2f} "
            "(3 seeds, 1 diverged, 1 ignores its source) |") in table
    assert "| post_ln | 9.25 (paper 28.1) |" in table
    rows = {r["run"]: r for r in report.collect("wmt17", str(runs))}
    assert rows["deepnet-6L-6L-seed3"]["seed"] == "3" and rows["pre_ln-6L-6L"]["seed"] == "1"
    csv_rows = (tmp_path / "out" / "results.csv").read_text().splitlines()
    assert len(csv_rows) == 1 + 7 and ",seed," in csv_rows[0]
    points = report.depth_points(list(rows.values()), "deepnet")
    assert [(p["layers"], round(p["bleu"], 6), round(p["spread"], 6), p["bad"]) for p in points] \
        == [(12, round(mean, 6), round(sd, 6), False)]
    assert report.depth_points(list(rows.values()), "pre_ln")[0]["bad"]


def test_runs_at_the_source_blind_loss_are_marked_stalled(tmp_path, toy_data):
    """--data: the baseline is the unigram entropy of the validation targets, counted here by
    hand from the raw text (</s> once per line); a trained run whose last validation loss is
    not below baseline - margin is marked stalled, one below it is not."""
    lines = (toy_data.parent / "valid.tgt").read_text().splitlines()
    counts = {}
    for line in lines:
        for token in line.split() + ["</s>"]:
            counts[token] = counts.get(token, 0) + 1
    total = sum(counts.values())
    by_hand = -sum(c / total * math.log2(c / total) for c in counts.values())
    assert report.source_blind_baseline(str(toy_data)) == pytest.approx(by_hand, rel=1e-9)

    runs = tmp_path / "runs"
    _fake_run(runs, "deepnet-6L-6L", "deepnet", 6, "ok", 20.0)
    _fake_run(runs, "admin-18L-18L", "admin", 18, "ok", 1.0)
    _fake_run(runs, "pre_ln-6L-6L", "pre_ln", 6, "ok", 12.0)
    # the nll decides where the record has it: pre_ln's label-smoothed loss is above the line,
    # its nll (what the baseline is comparable with) below it
    for name, loss, nll in (("deepnet-6L-6L", by_hand - 0.6, None),
                            ("admin-18L-18L", by_hand - 0.4, None),
                            ("pre_ln-6L-6L", by_hand - 0.2, by_hand - 0.7)):
        status = json.loads((runs / name / "status.json").read_text())
        (runs / name / "status.json").write_text(json.dumps(
            {**status, "last_valid_loss": loss, "last_valid_nll": nll}))
    report.main(["--dataset", "wmt17", "--runs", str(runs), "--out", str(tmp_path / "out"),
                 "--data", str(toy_data)])
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| admin |  | 1.0 (stalled) |" in table and "| deepnet | 20.0 (paper 27.8) |  |" in table
    rows = {r["method"]: r for r in csv.DictReader(open(tmp_path / "out" / "results.csv"))}
    assert rows["pre_ln"]["stalled"] == "False" and rows["admin"]["stalled"] == "True"
    with pytest.raises(SystemExit):  # not one pair's binarised data: said, nothing written
        report.main(["--dataset", "wmt17", "--runs", str(runs), "--out", str(tmp_path / "o2"),
                     "--data", str(tmp_path)])
    assert not (tmp_path / "o2").exists()


# What each of fairseq_log's patterns looks for, as text a user may put in a run's name, its
# work directory or TRAIN_ARGS; and the ways that text comes back in a training log: the
# runner's attempt header, fairseq's dump of its options (one line, both log formats) and a
# line of its own naming a path.
TRIGGERS = ["FloatingPointError: gradients are Nan/Inf", "| train | loss=nan",
            "| train_inner | epoch 001: loss=inf, num_updates=999999",
            "| valid | epoch 001 | valid on 'valid' subset | loss 0.01 | nll_loss 0.01 | "
            "num_updates 999999", "num_updates=999999", "num_updates 999999", "loss=nan",
            "INFO:train_inner:loss=nan, num_updates=999999", "\\n| train | loss=nan",
            "| fairseq.trainer | Loaded checkpoint x (epoch 1 @ 999999 updates)"]
ECHOES = {
    "header": lambda text: f"{fairseq_log.HEADER}1, 2026-11-25, host: fairseq-train {text}",
    "options dump": lambda text: "2026-11-25 10:00:00 | INFO | fairseq_cli.train | "
                                 + repr({"_name": None, "checkpoint": {"save_dir": text}}),
    "options dump, compat": lambda text: "INFO:fairseq_cli.train:" + repr({"save_dir": text}),
    "a path": lambda text: f"2026-11-25 10:00:00 | INFO | fairseq.checkpoint_utils | saved "
                           f"checkpoint {text}/checkpoint_1_20.pt",
    # a line end in the command (a path around the settings, which refuse one) stays on the
    # header's line: the runner writes it through one_line
    "header, after a line end": lambda text: f"{fairseq_log.HEADER}1, 2026-11-25, host: "
                                             + fairseq_log.one_line(f"fairseq-train x\n{text}"),
}
TRAINED = ("2026-11-25 10:00:00 | INFO | train_inner | epoch 001:     20 / 40 loss=6.9, "
           "nll_loss=6.1, num_updates=20\n" + VALID.format(6.5, 20))


@pytest.mark.parametrize("echo", sorted(ECHOES))
@pytest.mark.parametrize("where", ["RUN_NAME", "DEEPNET_WORK", "TRAIN_ARGS"])
def test_the_command_echoed_is_never_read_as_fairseqs_output(echo, where):
    """A run whose name, work path or TRAIN_ARGS holds what any pattern looks for (a
    divergence, a loss, an update count) trained fine: its verdict and figures are those of
    fairseq's own lines, however the text is echoed."""
    for text in TRIGGERS:
        value = {"RUN_NAME": text, "DEEPNET_WORK": f"/tmp/w {text}",
                 "TRAIN_ARGS": f"--user-dir '{text}'"}[where]
        log = ECHOES[echo](value) + "\n" + TRAINED
        result = runlog.classify(log, 0, vocab_size=1024)
        assert (result["status"], result["num_updates"], result["last_valid_loss"],
                result["last_valid_nll"]) == ("ok", 20, 6.5, 3.0), (text, result)
        assert fairseq_log.valid_curve(log) == {20: 6.5}, text
        assert fairseq_log.last_train_loss(log) == 6.9, text
        progress = runlog.Progress(40)
        for line in log.splitlines():
            progress.feed(line)
        assert progress.update == 20, text


def test_fairseqs_own_reports_of_divergence_count():
    for reported in ("FloatingPointError: gradients are Nan/Inf\n",
                     "[rank1]: FloatingPointError: Minimum loss scale reached (0.0001).\n",
                     "2026-11-25 10:00:00 | INFO | train_inner | epoch 001: loss=nan, "
                     "num_updates=3\n",
                     "[rank0]: 2026-11-25 10:00:00 | INFO | train | epoch 001 | loss inf | "
                     "num_updates 3\n",
                     "INFO:train_inner:epoch 001:      3 / 101 loss=nan, num_updates=3\n"):
        assert runlog.classify(reported, 1, 1024)["status"] == "diverged", reported


# ---- a quickstart run in the report; the loss the reports draw -------------------------------

def _quickstart_run(runs, refs, with_decode=True):
    """A run as the quickstart leaves it: the wmt17 recipe evaluated with TOKENIZED_BLEU=0 (its
    eval.json has sacreBLEU only), its decoded test set and the evaluation's command."""
    run = runs / "deepnet-6L-6L"
    (run / "eval" / "en-de").mkdir(parents=True)
    (run / "status.json").write_text(json.dumps(
        {"method": "deepnet", "encoder_layers": 6, "decoder_layers": 6, "status": "ok",
         "label": "deepnet", "reason": "", "last_valid_loss": 4.74, "last_valid_nll": 3.51}))
    hyps = ["Ein Mann fährt Fahrrad .", "Zwei Hunde spielen im Schnee-Feld .",
            "Eine Frau liest ein Buch ."]
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "test.en-de.de").write_text("Ein Mann fährt Rad .\nZwei Hunde spielen im "
                                        "Schnee-Feld .\nEine Frau liest ein Buch .\n")
    if with_decode:
        (run / "eval" / "en-de" / "generate-test.txt").write_text("".join(
            f"S-{i}\tx\nH-{i}\t-0.1\t{h}\nD-{i}\t-0.1\t{h}\n" for i, h in enumerate(hyps)))
    scores = score.score_direction(str(run / "eval" / "en-de" / "generate-test.txt"),
                                   str(refs / "test.en-de.de"), "de", False, False) \
        if with_decode else {"sacrebleu": 60.0, "signature": "sig", "sentences": 3}
    # the reference file is a field of the evaluation's record; the command text is not read
    # (here it names another directory)
    write_record(str(run / "eval" / "eval.json"), "eval", score.summarise(
        {"en-de": {**scores, "reference": str(refs / "test.en-de.de")}}))
    (run / "evaluate.config.json").write_text(json.dumps(
        {"step": "evaluate", "command": ["python", "-m",
                                         "deepnet_fairseq.recipes.evaluation.evaluate",
                                         "--run-dir", str(run), "--references", "/nowhere",
                                         "--", "bin", "--beam", "5"]}))
    return run, hyps


def test_a_quickstart_run_gets_its_tokenized_bleu_cell(tmp_path):
    """The quickstart evaluates with TOKENIZED_BLEU=0, so the wmt17 table's metric (tokenized
    BLEU, compound-split) was blank for it; the report scores it from the run's decode."""
    runs, refs = tmp_path / "runs", tmp_path / "raw"
    _, hyps = _quickstart_run(runs, refs)
    expected = score.score_direction(str(runs / "deepnet-6L-6L" / "eval" / "en-de" /
                                         "generate-test.txt"), str(refs / "test.en-de.de"),
                                     "de", True, True)["tok_bleu"]
    (row,) = report.collect("wmt17", str(runs))
    assert row["tok_bleu"] == expected and row["bleu"] == expected
    table = report.markdown("wmt17", [row])
    assert f"| deepnet | {expected}" in table
    # decode gone (exported run): the cell says it was not scored, not blank
    runs2 = tmp_path / "runs2"
    _quickstart_run(runs2, tmp_path / "raw2", with_decode=False)
    (row,) = report.collect("wmt17", str(runs2))
    assert row["bleu"] == "" and "| deepnet | not scored (sacreBLEU 60.0)" in \
        report.markdown("wmt17", [row])


def test_the_report_keeps_the_nll_and_plots_it_where_every_run_has_it(tmp_path):
    runs = tmp_path / "runs"
    _quickstart_run(runs, tmp_path / "raw")
    rows = report.collect("wmt17", str(runs))
    assert rows[0]["last_valid_nll"] == 3.51 and rows[0]["last_valid_loss"] == 4.74
    assert report.loss_measure(rows) == ("last_valid_nll", "last validation nll (bits)")
    assert report.depth_points(rows, "deepnet")[0]["loss"] == 3.51
    report.write_csv(str(tmp_path / "results.csv"), rows)
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert "last_valid_nll" in header
    # a run recorded before the nll was (its status has the label-smoothed loss only)
    older = [{**rows[0], "last_valid_nll": ""}, {**rows[0], "run": "x"}]
    column, label = report.loss_measure(older)
    assert column == "last_valid_loss" and "label-smoothed" in label


@pytest.mark.parametrize("broken,why", [
    ('{"method": "deepnet", "encoder_la', "unreadable record"),  # a truncated write
    ("[1, 2]", "not a record"),                                   # another program's JSON
    ('{"method": "deepnet", "status": "ok"}', "no 'encoder_layers' in its records"),
    ("\xff\xfe", "unreadable record"),                            # not UTF-8
    ('{"status": "ok", "schema": {"kind": "status", "version": 99}}', "schema version 99"),
    ('{"status": "ok", "schema": {"kind": "eval", "version": 1}}', "a record of kind eval where"),
    ('{"status": "ok", "schema": "1"}', "malformed schema field"),
    ('{"status": "ok", "method": "deepnet", "encoder_layers": "six"}',
     "its field 'encoder_layers'"),  # a hand edit
])
def test_a_broken_record_leaves_its_run_out_not_the_report(tmp_path, capsys, broken, why):
    """A run under runs/ whose status.json cannot be read: the report of the others is written,
    and a warning names the run left out and why."""
    runs = tmp_path / "runs"
    _fake_run(runs, "deepnet-6L-6L", "deepnet", 6, "ok", 27.5)
    (runs / "deepnet-18L-18L").mkdir()
    (runs / "deepnet-18L-18L" / "status.json").write_bytes(broken.encode("latin-1"))
    report.main(["--dataset", "wmt17", "--runs", str(runs), "--out", str(tmp_path / "out")])
    assert "| deepnet | 27.5 (paper 27.8) |" in (tmp_path / "out" / "table.md").read_text()
    err = capsys.readouterr().err
    assert "WARNING: run deepnet-18L-18L left out of the report" in err and why in err
    # the table says so too, naming the file
    shown = (tmp_path / "out" / "table.md").read_text().split("cannot be read")[1]
    assert "- deepnet-18L-18L: " in shown and why in shown
    if "schema" in broken:
        assert str(runs / "deepnet-18L-18L" / "status.json") in shown


def test_a_legacy_evaluation_is_not_scored_again_from_command_text(tmp_path):
    """An eval.json written before it recorded its reference files (schema version 1): the
    report does not go looking for them in the evaluation's command."""
    runs, refs = tmp_path / "runs", tmp_path / "raw"
    run, _ = _quickstart_run(runs, refs)
    legacy = json.loads((run / "eval" / "eval.json").read_text())
    del legacy["schema"], legacy["directions"]["en-de"]["reference"]
    (run / "eval" / "eval.json").write_text(json.dumps(legacy))
    (run / "evaluate.config.json").write_text(json.dumps({"command": [
        "python", "-m", "x", "--references", str(refs), "--", "bin"]}))
    (row,) = report.collect("wmt17", str(runs))
    assert row["status"] == "ok" and row["tok_bleu"] == "" and row["sacrebleu"] != ""


def test_an_evaluation_of_earlier_checkpoints_is_not_the_runs_score(tmp_path):
    """Trained again (RETRY=1), its new evaluation failed: eval/ holds the score of the old
    checkpoints, which the report does not show as the run's (evaluate's own check)."""
    from deepnet_fairseq.storage.evaluations import PURPOSE, purpose

    runs = tmp_path / "runs"
    run, _ = _quickstart_run(runs, tmp_path / "raw")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "checkpoint_1_10.pt").write_bytes(b"old")
    write_record(str(run / "eval" / PURPOSE), "purpose", purpose(str(run), ["--beam", "5"]))
    (row,) = report.collect("wmt17", str(runs))
    assert row["status"] == "ok" and row["sacrebleu"] != ""
    (run / "checkpoints" / "checkpoint_1_20.pt").write_bytes(b"new")
    (row,) = report.collect("wmt17", str(runs))
    assert row["status"] == "not evaluated" and row["sacrebleu"] == "" and row["bleu"] == ""
    assert "earlier checkpoints" in row["reason"]


def test_the_results_export_leaves_out_an_evaluation_of_earlier_checkpoints(tmp_path, capsys):
    """curves --export, the few kilobytes committed as a result, keeps eval.json only while it
    is the evaluation of the checkpoints the run holds (issue 60), and an export made again
    after the run trained on does not keep the earlier export's."""
    from deepnet_fairseq.recipes.reporting import curves
    from deepnet_fairseq.storage.evaluations import PURPOSE, purpose

    runs = tmp_path / "runs"
    run, _ = _quickstart_run(runs, tmp_path / "raw")
    (run / "train.log").write_text("2026-01-01 00:00:00 | INFO | valid | epoch 001 | valid on "
                                   "'valid' subset | loss 9.5 | nll_loss 9.1 | num_updates 10\n")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "checkpoint_1_10.pt").write_bytes(b"old")
    write_record(str(run / "eval" / PURPOSE), "purpose", purpose(str(run), ["--beam", "5"]))
    kept = tmp_path / "kept"
    kept.mkdir()
    exported = curves.export(str(run), str(kept))
    assert os.path.isfile(os.path.join(exported, "eval.json"))
    (run / "checkpoints" / "checkpoint_1_20.pt").write_bytes(b"new")  # trained on
    curves.export(str(run), str(kept))
    assert not os.path.exists(os.path.join(exported, "eval.json"))
    assert "eval.json left out" in capsys.readouterr().err
    (row,) = report.collect("wmt17", str(kept))  # the export's report: no stale score
    assert row["sacrebleu"] == ""


def test_a_runs_seed_comes_from_its_records(tmp_path):
    """status.json's seed, else config.json's resolved SEED (runs trained before status.json
    held it); never the command text (``_fake_run``'s says --seed 99)."""
    runs = tmp_path / "runs"
    _fake_run(runs, "deepnet-6L-6L", "deepnet", 6, "ok", 20.0, seed=3)
    _fake_run(runs, "deepnet-6L-6L-old", "deepnet", 6, "ok", 20.0)

    def seeds():
        return {row["run"]: row["seed"] for row in report.collect("wmt17", str(runs))}

    assert seeds() == {"deepnet-6L-6L": "3", "deepnet-6L-6L-old": ""}
    (runs / "deepnet-6L-6L-old" / "config.json").write_text(
        json.dumps({"settings": {"SEED": {"value": "2"}}}))
    assert seeds() == {"deepnet-6L-6L": "3", "deepnet-6L-6L-old": "2"}


def test_a_label_is_one_cell_of_the_table(tmp_path):
    """RUN_LABEL is free text: a "|" in it opened a column (a forged cell) in table.md."""
    runs = tmp_path / "runs"
    _fake_run(runs, "a-6L-6L", "deepnet", 6, "ok", 20.0)
    status = json.loads((runs / "a-6L-6L" / "status.json").read_text())
    (runs / "a-6L-6L" / "status.json").write_text(json.dumps({**status, "label": "x|1 | y"}))
    report.main(["--dataset", "wmt17", "--runs", str(runs), "--out", str(tmp_path / "out")])
    rows = [line for line in (tmp_path / "out" / "table.md").read_text().splitlines()
            if line.startswith("| x")]
    assert rows == ["| x\\|1 \\| y | 20.0 |"] * 2, rows  # tokenized BLEU, then sacreBLEU


def test_a_hand_edited_score_leaves_its_run_out_not_the_report(tmp_path, capsys):
    runs = tmp_path / "runs"
    _fake_run(runs, "deepnet-6L-6L", "deepnet", 6, "ok", 27.5)
    _fake_run(runs, "deepnet-18L-18L", "deepnet", 18, "ok", 28.4)
    edited = runs / "deepnet-18L-18L" / "eval" / "eval.json"
    edited.write_text(edited.read_text().replace("28.4", '"abc"', 1))
    report.main(["--dataset", "wmt17", "--runs", str(runs), "--out", str(tmp_path / "out")])
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| deepnet | 27.5 (paper 27.8) |" in table
    assert "deepnet-18L-18L" in table.split("cannot be read")[1]
    assert "its field 'directions'" in capsys.readouterr().err


def _with_settings(runs, name, **values):
    """Give the fake run NAME a config.json whose settings hold VALUES (as the runner writes)."""
    from deepnet_fairseq.storage.records import write_record

    write_record(str(runs / name / "config.json"), "run-config", {"dataset": "wmt17", "settings": {
        key: {"value": value, "from": "a test"} for key, value in values.items()}})


def test_runs_that_trained_differently_are_not_seeds_of_one_cell(tmp_path, capsys):
    """Ad-hoc runs in the same work directory at another LR (or TRAIN_ARGS) were counted as
    seeds of the cell; a repeated run (the same settings and seed, SEED=1 beside SEED=01) as a
    second seed."""
    runs = tmp_path / "runs"
    for name, bleu, values in [("a", 20.0, {"SEED": "1", "LR": "1e-3"}),
                               ("b", 22.0, {"SEED": "2", "LR": "0.001"}),
                               ("c", 30.0, {"SEED": "1", "LR": "2e-3"}),
                               ("d", 21.0, {"SEED": "01", "LR": "0.001"})]:
        _fake_run(runs, name, "deepnet", 6, "ok", bleu)
        _with_settings(runs, name, METHOD="deepnet", ENC_LAYERS="6", DEC_LAYERS="6", **values)
    rows = report.collect("wmt17", str(runs))
    cells = {label: sorted(r["run"] for r in members)
             for (label, _, _), members in report.by_cell(rows).items()}
    # 1e-3 and 0.001 are one LR: a and b are two seeds of it; d (SEED=01) is a again
    assert cells == {"deepnet (LR=1e-3)": ["a", "b"], "deepnet (LR=2e-3)": ["c"]}
    assert "run d: the same training as" in capsys.readouterr().err


def test_the_report_writes_nowhere_it_reads_and_replaces_only_with_force(tmp_path, toy_data,
                                                                         capsys):
    """--out in the runs directory, a run, its eval/, or the --data directory: refused in one
    line, even with --force, nothing added (a later report would list what it wrote as an
    unreadable run); --out onto a file: one line; its existing tables replaced only with
    --force, also in a results directory the recipes made and marked (the sweep's); --out may
    hold the runs (it is written into, not replaced)."""
    from deepnet_fairseq.storage.directories import make_dirs

    runs = tmp_path / "runs"
    _fake_run(runs, "deepnet-6L-6L", "deepnet", 6, "ok", 27.5)
    run = runs / "deepnet-6L-6L"
    snapshot = lambda: sorted(p for d in (runs, toy_data) for p in d.rglob("*"))  # noqa: E731
    before = snapshot()
    for out in (runs, run, run / "eval", run / "new", toy_data):
        for force in ([], ["--force"]):
            with pytest.raises(SystemExit) as stopped:
                report.main(["--dataset", "wmt17", "--runs", str(runs), "--out", str(out),
                             "--data", str(toy_data), *force])
            err = capsys.readouterr().err
            assert stopped.value.code == 2 and "the input" in err, err
            assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert snapshot() == before
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(SystemExit) as stopped:
        report.main(["--dataset", "wmt17", "--runs", str(runs), "--out", str(tmp_path / "afile")])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "is not a directory" in err and "Traceback" not in err
    assert (tmp_path / "afile").read_text() == "mine"
    results = make_dirs(str(tmp_path / "results"))  # the sweep's: made and marked
    argv = ["--dataset", "wmt17", "--runs", str(runs), "--out", results]
    report.main(argv)
    (tmp_path / "results" / "table.md").write_text("old")
    with pytest.raises(SystemExit) as stopped:
        report.main(argv)
    assert "pass --force to replace it" in capsys.readouterr().err
    assert (tmp_path / "results" / "table.md").read_text() == "old"
    report.main(argv + ["--force"])
    assert "| deepnet |" in (tmp_path / "results" / "table.md").read_text()
    # a directory holding the runs is not replaced, only written into: allowed
    report.main(["--dataset", "wmt17", "--runs", str(runs), "--out", str(tmp_path)])
    assert (tmp_path / "table.md").is_file() and snapshot() == before


def test_the_curves_legend_names_what_tells_the_runs_apart():
    from deepnet_fairseq.recipes.reporting import curves

    labels, shared = curves.short_labels([
        "deepnet-6L-6L+LR=0.004+WARMUP=400",
        "deepnet-6L-6L+LR=0.004+WARMUP=400+SEED=2",
        "deepnet-18L-18L+LR=0.004+LR_DEPTH_SCOPE=layers+WARMUP=400"])
    assert shared == "LR=0.004 WARMUP=400"
    assert labels == {"deepnet-6L-6L+LR=0.004+WARMUP=400": "deepnet-6L-6L",
                      "deepnet-6L-6L+LR=0.004+WARMUP=400+SEED=2": "deepnet-6L-6L SEED=2",
                      "deepnet-18L-18L+LR=0.004+LR_DEPTH_SCOPE=layers+WARMUP=400":
                          "deepnet-18L-18L LR_DEPTH_SCOPE=layers"}
    # a setting one run lacks is not shared, and stays on the runs that have it
    labels, shared = curves.short_labels(["post_ln-2L-2L", "post_ln-2L-2L+LR=1"])
    assert shared == "" and labels["post_ln-2L-2L+LR=1"] == "post_ln-2L-2L LR=1"
