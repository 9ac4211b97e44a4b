"""The depth-law report of a multilingual sweep (recipes.reporting.depth_law): its parameter count
against fairseq's own model, its fit against numpy's, its cost from fairseq's log records, and
its table, CSV and plot on hand-made runs."""

import json
import math

import numpy
import pytest

from deepnet_fairseq import fairseq_log
from deepnet_fairseq.recipes.datasets import DATASETS
from deepnet_fairseq.recipes.evaluation import score
from deepnet_fairseq.recipes.reporting import curves, depth_law, report
from support import assert_png, build, read_csv


@pytest.mark.parametrize("enc, dec, width, ffn", [(2, 3, 64, 256), (1, 1, 32, 48)])
def test_non_embedding_parameters_are_those_of_fairseqs_own_post_ln_model(toy_data, enc, dec,
                                                                          width, ffn):
    model, _, _ = build(toy_data, "transformer", "--share-all-embeddings",
                        "--encoder-layers", enc, "--decoder-layers", dec,
                        "--encoder-embed-dim", width, "--decoder-embed-dim", width,
                        "--encoder-ffn-embed-dim", ffn, "--decoder-ffn-embed-dim", ffn,
                        "--encoder-attention-heads", 4, "--decoder-attention-heads", 4)
    counted = sum(p.numel() for name, p in model.named_parameters() if "embed_tokens" not in name)
    assert depth_law.layer_parameters(width, ffn, enc, dec) == counted


def test_the_fit_and_its_r2_agree_with_numpy():
    points = [(12, 20.1), (20, 21.5), (100, 23.0), (200, 24.9), (1000, 24.2)]
    fit = report.fit_log(points)
    xs, ys = numpy.log([d for d, _ in points]), numpy.array([b for _, b in points])
    a, b = numpy.polyfit(xs, ys, 1)
    r2 = 1 - ((ys - (a * xs + b)) ** 2).sum() / ((ys - ys.mean()) ** 2).sum()
    assert (fit.a, fit.b, fit.r2, fit.points) == pytest.approx((a, b, r2, 5))
    two = report.fit_log(points[:2])
    assert two.r2 is None and two.a == pytest.approx((21.5 - 20.1) / math.log(20 / 12))
    assert report.fit_log([(12, 20.0), (12, 21.0)]) is None  # one depth: no law


def test_the_papers_table_2_rows_are_fitted_as_ours():
    fits = depth_law.paper_fits("opus100")
    baseline = [(12, 24.5), (24, 26.2), (48, 27.7)]  # Table 2, as the issue quotes it
    a, b = numpy.polyfit(numpy.log([d for d, _ in baseline]), [v for _, v in baseline], 1)
    assert (fits["ds_init"].a, fits["ds_init"].b) == pytest.approx((a, b))
    assert fits["ds_init"].r2 > 0.99
    assert fits["deepnet"].a == pytest.approx((32.1 - 31.1) / math.log(1000 / 200))
    assert fits["deepnet"].r2 is None  # two rows fix the line


def test_training_seconds_count_each_logged_interval_once():
    line = ("2026-01-01 10:00:00 | INFO | train_inner | epoch 001:     50 / 99 loss=7.2, "
            "num_updates={}, lr=0.001, gnorm=1.0, train_wall={}, wall=99\n")
    # resumed from update 100: the interval to 150 is trained again, and counts once
    log = "".join(line.format(u, s) for u, s in [(50, 9), (100, 8), (150, 10), (150, 11),
                                                 (200, 9)])
    log += "| INFO | train_inner | num_updates=250, train_wall=99\n"  # not fairseq's line
    assert fairseq_log.train_seconds(log) == {50: 9, 100: 17, 150: 28, 200: 37}


def test_the_nll_curve_is_each_validations_nll_beside_its_loss():
    """The label-smoothed loss and the nll of each validation, read from fairseq's valid lines;
    a criterion without label smoothing logs no nll_loss, and its loss is the nll."""
    valid = ("2026-01-01 10:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | "
             "loss {} {}| ppl 9 | num_updates {}\n")
    log = (valid.format("5.3", "| nll_loss 4.1 ", 200) + valid.format("4.9", "| nll_loss 3.7 ", 400)
           + valid.format("4.8", "| nll_loss 3.6 ", 400)  # resumed: the later record wins
           + valid.format("3.2", "", 600))
    assert fairseq_log.valid_curve(log) == {200: 5.3, 400: 4.8, 600: 3.2}
    assert fairseq_log.valid_nll_curve(log) == {200: 4.1, 400: 3.6, 600: 3.2}


def _run(runs, name, method, enc, dec, width, bleu, lr="1e-3", updates=1000, seconds=None,
         distinct=1.0, label=None, extra=()):
    run = runs / name
    (run / "eval").mkdir(parents=True)
    (run / "status.json").write_text(json.dumps(
        {"method": method, "label": label or method, "encoder_layers": enc, "decoder_layers": dec,
         "status": "ok" if bleu is not None else "diverged", "num_updates": updates,
         "reason": ""}))
    settings = {"EMBED_DIM": width, "FFN_DIM": 4 * width, "TOKENS_PER_UPDATE": 1024,
                "VOCAB": 8000, "LR": lr, **dict(extra)}
    (run / "config.json").write_text(json.dumps(
        {"settings": {k: {"value": str(v), "from": "test"} for k, v in settings.items()},
         "command": ["fairseq-train", "bin", "--lr", lr, "--arch", "x"]}))
    if bleu is not None:
        (run / "eval" / "eval.json").write_text(json.dumps(score.summarise({
            "de-en": {"sacrebleu": bleu + 2, "signature": "s", "distinct_share": distinct},
            "en-de": {"sacrebleu": bleu - 2, "signature": "s", "distinct_share": 1.0}})))
    if seconds:
        (run / "train.log").write_text("".join(
            f"2026-01-01 10:00:00 | INFO | train_inner | epoch 001: num_updates={u}, "
            f"train_wall={s}, wall=1\n" for u, s in seconds))


def test_the_report_tables_size_cost_and_the_law_beside_the_papers(tmp_path):
    runs = tmp_path / "runs"
    for n in (6, 10, 50, 100):
        _run(runs, f"deepnet-{n}L-{n}L", "deepnet", n, n, 64, 2.0 * math.log(2 * n) + 10,
             seconds=[(500, 1800), (1000, 1800)] if n == 6 else None)
    _run(runs, "deepnet-6L-6L+EMBED_DIM=256", "deepnet", 6, 6, 256, 19.0)
    _run(runs, "ds_init-24L-24L", "ds_init", 24, 24, 64, None)
    # trained, but one sentence for every input: a language model's BLEU, not on the law
    _run(runs, "deepnet-200L-200L", "deepnet", 200, 200, 64, 3.0, distinct=0.001)
    report_dir = tmp_path / "out"
    depth_law.main([str(runs), "--out", str(report_dir)])
    rows = {r["run"]: r for r in read_csv(report_dir / "depth_law.csv")}
    six = rows["deepnet-6L-6L"]
    # 6 x (params + width x vocab) x tokens, tokens = 1,024 x 1,000 updates
    params = depth_law.layer_parameters(64, 256, 6, 6)
    assert float(six["params_m"]) == pytest.approx(params / 1e6, abs=1e-3)
    assert float(six["train_pflops"]) == pytest.approx(6 * (params + 64 * 8000) * 1024e3 / 1e15,
                                                       abs=1e-4)
    assert float(six["train_hours"]) == 1.0 and six["peak_lr"] == "1e-3"
    assert (six["x_en"], six["en_x"]) == (str(float(six["avg"]) + 2), str(float(six["avg"]) - 2))
    # the wide control: about the parameters of 100L-100L at 64 wide, its own series
    assert float(rows["deepnet-6L-6L+EMBED_DIM=256"]["params_m"]) == pytest.approx(
        float(rows["deepnet-100L-100L"]["params_m"]), rel=0.1)
    table = (report_dir / "depth_law.md").read_text()
    assert "| deepnet (EMBED_DIM=64, FFN_DIM=256) | 2.00 | 10.00 | 1.000 | 4 |" in table
    assert "| paper: ds_init | 2.31 | 18.80 | 0.999 | 3 |" in table
    assert "| paper: deepnet | 0.62 | 27.81 | 2 points: exact | 2 |" in table
    assert "| ds_init | 24L-24L |" in table and "| diverged |" in table
    assert "| ignores its source (0.1% distinct) |" in table
    assert_png(report_dir / "depth_law.png")
    with pytest.raises(SystemExit):  # the report is not replaced without --force
        depth_law.main([str(runs), "--out", str(report_dir)])
    depth_law.main([str(runs), "--out", str(report_dir), "--force"])


def test_a_series_moved_by_the_depth_rule_starts_from_its_base_depths_run(tmp_path):
    """The rule LR x (K / L)^p leaves the rate alone at K layers a side: the run without the
    rule there is the rule series' first point, and no other run joins it."""
    runs = tmp_path / "runs"
    law = lambda n: 1.5 * math.log(2 * n) + 20  # noqa: E731 (the hand-written law)
    for n in (10, 50):
        _run(runs, f"deepnet-{n}L-{n}L+LR=0.002+LR_BASE_LAYERS=6", "deepnet", n, n, 64, law(n),
             lr="0.002", label="deepnet (LR=0.002 LR_BASE_LAYERS=6)",
             extra={"LR_BASE_LAYERS": 6})
    _run(runs, "deepnet-6L-6L+LR=0.002", "deepnet", 6, 6, 64, law(6), lr="0.002",
         label="deepnet (LR=0.002)")
    # the same label's other rate and another depth: neither is the rule's base run
    _run(runs, "deepnet-6L-6L+LR=0.001", "deepnet", 6, 6, 64, 5.0, lr="0.001",
         label="deepnet (LR=0.001)")
    _run(runs, "deepnet-10L-10L+LR=0.002", "deepnet", 10, 10, 64, 40.0, lr="0.002",
         label="deepnet (LR=0.002)")
    report_dir = tmp_path / "out"
    depth_law.main([str(runs), "--out", str(report_dir)])
    table = (report_dir / "depth_law.md").read_text()
    assert "| deepnet (LR=0.002 LR_BASE_LAYERS=6) | 1.50 | 20.00 | 1.000 | 3 |" in table
    # the run without the rule keeps its own series too (its BLEU as scored: to 2 decimals)
    six = round(law(6), 2)
    a = (40.0 - six) / math.log(20 / 12)
    assert f"| deepnet (LR=0.002) | {a:.2f} | {six - a * math.log(12):.2f} | 2 points" in table


def test_exported_runs_keep_their_training_seconds(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "deepnet-6L-6L", "deepnet", 6, 6, 64, 20.0,
         seconds=[(100, 30), (200, 31), (300, 29)])
    log = runs / "deepnet-6L-6L" / "train.log"
    log.write_text(log.read_text() + "2026-01-01 10:00:00 | INFO | valid | epoch 001 | valid on "
                   "'valid' subset | loss 7.5 | nll_loss 7 | num_updates 250\n")
    curves.main([str(runs / "deepnet-6L-6L"), "--export", str(tmp_path / "kept")])
    kept = tmp_path / "kept" / "deepnet-6L-6L"
    assert read_csv(kept / "valid_loss.csv") == [
        {"num_updates": "250", "valid_loss_bits": "7.5", "valid_nll_bits": "7",
         "train_seconds": "61"}]
    assert curves.training_seconds(str(kept)) == {250: 61.0}
    assert DATASETS["opus100"].task.depth_law


def test_figure_7s_panels_are_the_settings_each_run_changes_from_the_base(tmp_path, capsys):
    base = "deepnet-18L-18L"
    others = ["deepnet-18L-18L+LR=0.002", "deepnet-18L-18L+LR=0.004",
              "deepnet-18L-18L+TOKENS_PER_UPDATE=2048",
              "deepnet-18L-18L+EMBED_DIM=128+FFN_DIM=512"]
    assert curves.factor_panels(base, others) == {
        "LR": others[:2], "TOKENS_PER_UPDATE": [others[2]], "EMBED_DIM and FFN_DIM": [others[3]]}
    # a base that carries a setting: only what differs from it is the factor
    assert curves.factor_panels("deepnet-18L-18L+LR=0.001", ["deepnet-18L-18L+LR=0.001+HEADS=8"]) \
        == {"HEADS": ["deepnet-18L-18L+LR=0.001+HEADS=8"]}
    for wrong in ("deepnet-6L-6L+LR=0.002", base):  # another depth; nothing changed
        with pytest.raises(ValueError, match="is not deepnet-18L-18L with some settings"):
            curves.factor_panels(base, [wrong])
    for name in [base, *others]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "valid_loss.csv").write_text(
            "num_updates,valid_loss_bits\n200,8.0\n400,7.0\n")
    curves.main([str(tmp_path / n) for n in [base, *others]] + ["--factors", str(tmp_path / "f.png")])
    assert_png(tmp_path / "f.png")
    with pytest.raises(SystemExit):
        curves.main([str(tmp_path / base), str(tmp_path / "deepnet-18L-18L+LR=0.002"),
                     str(tmp_path / base), "--factors", str(tmp_path / "g.png")])
    assert "is not deepnet-18L-18L with some settings changed" in capsys.readouterr().err
    assert not (tmp_path / "g.png").exists()


def test_curves_against_tokens_scale_each_run_by_its_own_batch(tmp_path, capsys):
    for name, tokens in (("small", 1024), ("large", 4096)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "valid_loss.csv").write_text("num_updates,valid_loss_bits\n200,8\n")
        (tmp_path / name / "status.json").write_text(json.dumps({"tokens_per_update": tokens}))
    assert [curves.tokens_per_update(str(tmp_path / n)) for n in ("small", "large")] == [1024, 4096]
    curves.main([str(tmp_path / "small"), str(tmp_path / "large"), "--tokens",
                 "--plot", str(tmp_path / "t.png")])
    assert_png(tmp_path / "t.png")
    (tmp_path / "large" / "status.json").write_text("{}")  # a run that does not record it
    with pytest.raises(SystemExit):
        curves.main([str(tmp_path / "large"), "--tokens", "--plot", str(tmp_path / "u.png")])
    assert "does not record its tokens per update" in capsys.readouterr().err


def test_the_size_panel_places_every_scored_run_at_its_parameters(tmp_path):
    """Depth or size: each series' scored runs at (parameters without embeddings, average
    BLEU), the wide control among them; a run that diverged is not a point."""
    runs = tmp_path / "runs"
    for n, bleu in ((6, 26.0), (50, 13.5)):
        _run(runs, f"deepnet-{n}L-{n}L", "deepnet", n, n, 64, bleu)
    _run(runs, "deepnet-6L-6L+EMBED_DIM=256", "deepnet", 6, 6, 256, 32.5,
         label="deepnet (EMBED_DIM=256)")
    _run(runs, "deepnet-100L-100L", "deepnet", 100, 100, 64, None)  # diverged
    sizes = depth_law.size_points(depth_law.rows_of(str(runs), "opus100"))
    # a 6L-6L Post-LN layer stack by hand: per layer 4 d^2 + 4 d attention weights, 2 d f + d
    # + f feed-forward ones, LayerNorms 2 d each; the decoder's cross-attention once more
    d, f = 64, 256
    encoder_layer = (4 * d * d + 4 * d) + (2 * d * f + d + f) + 2 * 2 * d
    decoder_layer = encoder_layer + (4 * d * d + 4 * d) + 2 * d
    six = 6 * (encoder_layer + decoder_layer) / 1e6
    assert [x for x, _ in sizes["deepnet"]] == pytest.approx([six, six * 50 / 6], abs=1e-3)
    assert [y for _, y in sizes["deepnet"]] == [26.0, 13.5]
    assert len(sizes["deepnet (EMBED_DIM=256)"]) == 1
    (wide, bleu), = sizes["deepnet (EMBED_DIM=256)"]
    assert bleu == 32.5 and wide == pytest.approx(
        float(depth_law.layer_parameters(256, 1024, 6, 6)) / 1e6, abs=1e-3)
    assert wide > sizes["deepnet"][-1][0]  # wider at 6L-6L than 50L-50L at 64
