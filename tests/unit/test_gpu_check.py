"""benchmarks/gpu_check.py: its arguments, its reading of fairseq logs (hand-written excerpts,
expected values worked out by hand), its report, its reuse of passed checks (the shell
wrapper: integration/test_recipe_scripts.py; the tiny CPU run: slow/test_benchmarks.py)."""

import json
import os
import sys

import pytest

from deepnet_fairseq.recipes.run import runlog
from support import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import gpu_check  # noqa: E402

H100 = ("2026-01-01 10:00:00 | INFO | fairseq.utils | rank   0: capabilities =  9.0  ; "
        "total memory = 79.109 GB ; name = NVIDIA H100 80GB HBM3                    ")


def inner(update, loss, wps=1000.0, scale=None, gb_free=None):
    """A train_inner line as fairseq 0.12 writes it with --log-format simple."""
    fields = (f"loss={loss}, nll_loss={loss - 0.2:.3f}, ppl=100.5, wps={wps}, ups=2.5, "
              f"wpb=3800.5, bsz=130, num_updates={update}, lr=5e-05, gnorm=1.234")
    if scale is not None:
        fields += f", loss_scale={scale}"
    fields += ", train_wall=1"
    if gb_free is not None:
        fields += f", gb_free={gb_free}"
    return (f"2026-01-01 10:00:{update:02d} | INFO | train_inner | epoch 001:  {update:5d} / 115 "
            f"{fields}, wall={update + 5}")


def overflow(scale):
    return ("2026-01-01 10:00:00 | INFO | fairseq.trainer | NOTE: gradient overflow detected, "
            f"ignoring gradient, setting loss scale to: {scale}")


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize("argv,message", [
    (["--updates", "0"], "--updates: expected a positive integer, got '0'"),
    (["--updates", "ten"], "--updates: expected a positive integer, got 'ten'"),
    (["--depths", "18,-1"], "--depths: expected positive integers"),
    (["--precisions", "fp16,fp8"], "--precisions: expected a comma-separated subset of fp16,bf16"),
    (["--lr", "0"], "--lr: expected a positive number"),
    (["--min-loss-drop", "1.5"], "--min-loss-drop: expected a fraction in [0, 1)"),
    (["--overflow-run", "0"], "--overflow-run: expected a positive integer"),
    (["--device", "tpu"], "--device: invalid choice: 'tpu'"),
    (["--tiny", "extra"], "unrecognized arguments: extra"),
])
def test_bad_arguments_exit_2_with_the_reason(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        gpu_check.parse_args(["--device", "cpu", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_cuda_without_a_gpu_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        gpu_check.parse_args(["--device", "cuda"], cuda_available=False)
    assert exit_.value.code == 2
    assert "no CUDA GPU is visible" in capsys.readouterr().err


def test_out_must_be_a_folder(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as exit_:
        gpu_check.parse_args(["--device", "cpu", "--out", str(tmp_path / "file")])
    assert exit_.value.code == 2
    assert "is not a folder" in capsys.readouterr().err


def test_defaults_per_size_and_explicit_values_win():
    base = gpu_check.parse_args([], cuda_available=True)
    assert (base.device, base.updates, base.depths, base.checkpoint_depth) == (
        "cuda", 300, [18, 100], 50)
    assert base.precisions == ["fp16", "bf16"]
    assert base.out == os.path.join("runs", "gpu-check-cuda")
    tiny = gpu_check.parse_args(["--device", "cpu", "--tiny", "--updates", "7",
                                 "--precisions", "bf16,bf16"])
    assert (tiny.updates, tiny.depths, tiny.precisions) == (7, [2, 4], ["bf16"])
    assert tiny.out == os.path.join("runs", "gpu-check-cpu-tiny")


# ---------------------------------------------------------------- fairseq logs

HEALTHY_FP16 = "\n".join([
    H100,
    overflow(64.0), overflow(32.0),  # the scale settling: 2 in a row
    inner(1, 14.0, wps=900.0, scale=32, gb_free=60.1),
    inner(2, 13.0, wps=1100.0, scale=32, gb_free=58.3),
    overflow(16.0),
    inner(3, 12.0, wps=1000.0, scale=16, gb_free=59.0),
    inner(4, 11.0, wps=1200.0, scale=16, gb_free=57.9),
    inner(5, 10.0, wps=1300.0, scale=16, gb_free=60.0),
    inner(6, 9.0, wps=1250.0, scale=16, gb_free=58.0),
    inner(7, 8.0, wps=1150.0, scale=16, gb_free=58.2),
    inner(8, 7.0, wps=1050.0, scale=16, gb_free=58.5),
    "2026-01-01 10:00:20 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.2 | "
    "nll_loss 6.9 | ppl 119 | wps 5000 | wpb 1000 | bsz 40 | num_updates 8",
    "2026-01-01 10:00:21 | INFO | fairseq_cli.train | done training in 20.0 seconds",
])


def test_parse_train_log_reads_updates_overflows_and_memory():
    parsed = gpu_check.parse_train_log(HEALTHY_FP16)
    assert [u["num_updates"] for u in parsed["updates"]] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [u["loss"] for u in parsed["updates"]][:3] == [14.0, 13.0, 12.0]
    assert parsed["overflows"] == 3 and parsed["overflow_scales"] == [64.0, 32.0, 16.0]
    assert parsed["longest_overflow_run"] == 2  # 64 and 32 in a row, then 16 alone
    assert parsed["min_scale_reached"] is False
    assert parsed["total_memory_gb"] == 79.109 and parsed["gpu"] == "NVIDIA H100 80GB HBM3"


def test_parse_train_log_reads_the_compat_launchers_log_format():
    # bf16 runs through deepnet_fairseq.fairseq_train_compat, whose log lines look like this
    text = "\n".join([
        "INFO:train_inner:epoch 001:      1 / 101 loss=11.036, nll_loss=10.98, ppl=2022.3, "
        "wps=0, ups=0, wpb=592, bsz=16, num_updates=1, lr=0.0004, gnorm=1.1, train_wall=1, wall=3",
        "INFO:train_inner:epoch 001:      2 / 101 loss=10.5, nll_loss=10.4, ppl=1448.2, "
        "wps=214.6, ups=0.3, wpb=799, bsz=24, num_updates=2, lr=0.0008, gnorm=0.9, "
        "train_wall=2, wall=6",
        "INFO:train:epoch 001 | loss 10.7 | nll_loss 10.6 | num_updates 2",
    ])
    parsed = gpu_check.parse_train_log(text)
    assert [(u["num_updates"], u["loss"], u["wps"]) for u in parsed["updates"]] == [
        (1, 11.036, 0.0), (2, 10.5, 214.6)]


def test_parse_train_log_reads_fairseqs_lines_not_the_command_it_echoes():
    """A run directory or TRAIN_ARGS holding the text of an update, an overflow or the loss
    scale's floor is echoed in fairseq's dump of its options: none of it is read as such."""
    hostile = ("/tmp/w | INFO | train_inner | epoch 001: num_updates=99 loss=1 "
               "NOTE: gradient overflow detected, setting loss scale to: 1 "
               "FloatingPointError: Minimum loss scale reached")
    echoed = [f"2026-01-01 10:00:00 | INFO | fairseq_cli.train | Namespace(save_dir='{hostile}')",
              f"==== attempt 1: fairseq-train --save-dir '{hostile}'", hostile.split(" ", 1)[1]]
    parsed = gpu_check.parse_train_log("\n".join(echoed + [HEALTHY_FP16]))
    assert [u["num_updates"] for u in parsed["updates"]] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert parsed["overflow_scales"] == [64.0, 32.0, 16.0]
    assert parsed["min_scale_reached"] is False


def judge(text, precision="fp16", exit_code=0, updates=8, min_loss_drop=0.1, overflow_run=5):
    status = runlog.classify(text, exit_code, vocab_size=8000)
    return gpu_check.judge_training(gpu_check.parse_train_log(text), status, exit_code,
                                    precision, updates, min_loss_drop, overflow_run)


def test_healthy_fp16_run_passes_with_its_figures():
    result = judge(HEALTHY_FP16)
    assert result["status"] == "pass", result["reason"]
    f = result["figures"]
    # 8 logged updates: the start and end windows are 8 // 4 = 2 updates
    assert f["loss_start"] == pytest.approx(13.5)  # (14 + 13) / 2
    assert f["loss_end"] == pytest.approx(7.5)  # (8 + 7) / 2
    assert f["loss_drop"] == pytest.approx(1 - 7.5 / 13.5)
    assert f["updates"] == 8 and f["last_valid_loss"] == 7.2
    # fewer than 10 updates logged: the median over all of them
    assert f["words_per_s"] == pytest.approx(1125.0)  # (1100 + 1150) / 2
    assert f["peak_gb"] == pytest.approx(79.109 - 57.9)
    assert (f["overflows"], f["longest_overflow_run"], f["loss_scale"]) == (3, 2, 16)


VALID_PREFIX = "\n2026-01-01 10:00:20 | INFO | valid | epoch 001 | valid on 'valid' subset"


def test_bf16_run_has_no_overflow_figures_and_no_memory_on_cpu():
    text = "\n".join(inner(u, 10.0 - u) for u in range(1, 9)) + (
        VALID_PREFIX + " | loss 3.0 | num_updates 8")
    result = judge(text, precision="bf16")
    assert result["status"] == "pass", result["reason"]
    assert "overflows" not in result["figures"] and result["figures"]["peak_gb"] is None


def test_loss_that_does_not_go_down_fails():
    # 8 updates, start (9 + 9) / 2 = 9, end (8.5 + 8.3) / 2 = 8.4: 6.7% lower, 10% needed
    losses = [9.0, 9.0, 8.9, 8.8, 8.7, 8.6, 8.5, 8.3]
    text = "\n".join(inner(u, x) for u, x in enumerate(losses, 1)) + (
        VALID_PREFIX + " | loss 8.0 | num_updates 8")
    result = judge(text, precision="bf16")
    assert result["status"] == "fail"
    assert "the loss did not go down: 9.000 at the start, 8.400 at the end" in result["reason"]
    assert judge(text, precision="bf16", min_loss_drop=0.05)["status"] == "pass"


def test_five_overflows_in_a_row_are_a_cascade_and_four_are_not():
    def log(run):
        lines = [inner(1, 12.0, scale=128)]
        lines += [overflow(128 / 2 ** k) for k in range(1, run + 1)]
        lines += [inner(u, 12.0 - u, scale=128 / 2 ** run) for u in range(2, 9)]
        return "\n".join(lines) + VALID_PREFIX + " | loss 5.0 | num_updates 8"

    four, five = judge(log(4)), judge(log(5))
    assert four["status"] == "pass" and four["figures"]["longest_overflow_run"] == 4
    assert four["figures"]["loss_scale"] == 8  # 128 / 2^4
    assert five["status"] == "fail"
    assert ("overflow cascade: 5 gradient overflows in a row (a cascade is 5 or more)"
            in five["reason"])
    assert judge(log(5), overflow_run=6)["status"] == "pass"
    # bf16 has no loss scale: overflows are not judged there
    assert judge(log(5), precision="bf16")["status"] == "pass"


def test_minimum_loss_scale_is_a_cascade_and_a_stop():
    text = "\n".join([inner(1, 12.0, scale=0.001), inner(2, 11.0, scale=0.001),
                      overflow(0.0005), inner(3, 10.0, scale=0.0005), overflow(0.00025),
                      "Traceback (most recent call last):",
                      "FloatingPointError: Minimum loss scale reached (0.0001). Your loss is "
                      "probably exploding. Try lowering the learning rate, using gradient "
                      "clipping or increasing the batch size."])
    result = judge(text, exit_code=1, updates=300)
    assert result["status"] == "fail"
    assert "run diverged" in result["reason"]
    assert "stopped at update 3 of 300" in result["reason"]
    assert "overflow cascade: the loss scale reached --min-loss-scale" in result["reason"]


def test_non_finite_loss_and_empty_log_fail():
    text = "\n".join([inner(1, 12.0), inner(2, float("nan")), inner(3, 11.0)])
    assert "a logged training loss is not finite" in judge(text, "bf16", updates=3)["reason"]
    empty = judge("ModuleNotFoundError: No module named 'x'", "bf16", exit_code=1)
    assert empty["status"] == "fail" and "no training loss was logged" in empty["reason"]
    assert "stopped at update 0 of 8" in empty["reason"]


def test_generation_is_judged_on_every_sentence_and_scored():
    output = "2026-01-01 | INFO | fairseq_cli.generate | Translated 3 sentences (40 tokens) in " \
             "0.5s (6.00 sentences/s, 80.00 tokens/s)"
    refs = ["ein Hund läuft .", "zwei Männer spielen .", "eine Frau singt ."]
    good = gpu_check.judge_generation(0, output, list(refs), refs)
    assert good["status"] == "pass"
    assert good["figures"]["bleu"] == pytest.approx(100.0)
    assert good["figures"]["sentences_per_s"] == 6.0 and good["figures"]["empty"] == 0
    short = gpu_check.judge_generation(0, output, refs[:2], refs)
    assert short["status"] == "fail" and "2 of 3 test sentences were translated" in short["reason"]
    crashed = gpu_check.judge_generation(1, "RuntimeError: CUDA out of memory", [], refs)
    assert crashed["status"] == "fail"
    assert "fairseq-generate exited 1: RuntimeError: CUDA out of memory" in crashed["reason"]


def test_throughput_ratios_from_the_benchmark_rows():
    rows = {"rows": [{"layers": 18, "checkpoint_activations": False,
                      "tokens_per_s": {"transformer": 2000.0, "deepnet_transformer": 1900.0},
                      "step_peak_gb": {"transformer": 4.0, "deepnet_transformer": 4.2},
                      "resident_gb": 1.0}]}
    result = gpu_check.judge_throughput(0, rows)
    assert result["status"] == "pass"
    assert result["figures"]["throughput_ratio"] == pytest.approx(0.95)
    assert result["figures"]["memory_ratio"] == pytest.approx(1.05)
    rows["rows"][0]["step_peak_gb"]["deepnet_transformer"] = None  # its process failed
    assert gpu_check.judge_throughput(0, rows)["status"] == "fail"
    assert gpu_check.judge_throughput(1, None)["status"] == "fail"


# ---------------------------------------------------------------- checks and report


def test_a_failing_check_does_not_stop_the_next_and_passed_checks_are_reused(tmp_path):
    args = gpu_check.parse_args(["--device", "cpu", "--tiny", "--out", str(tmp_path / "out")])
    calls = []

    def passes(case):
        calls.append(case)
        return {"status": "pass", "reason": "", "figures": {}}

    def crashes(case):
        raise OSError("disk full")

    checks = gpu_check.Checks(args)
    assert checks.run("a", "train", {"x": 1}, crashes)["status"] == "fail"
    assert checks.run("b", "train", {"x": 1}, passes)["status"] == "pass"
    assert "OSError: disk full" in checks.results[0]["reason"]
    again = gpu_check.Checks(args)
    again.run("b", "train", {"x": 1}, passes)  # same settings: reused
    assert len(calls) == 1 and again.results[0]["reused"]
    again.run("b", "train", {"x": 2}, passes)  # other settings: run again
    again.run("a", "train", {"x": 1}, passes)  # failed before: run again
    assert len(calls) == 3
    stored = json.loads((tmp_path / "out" / "cases" / "a" / "result.json").read_text())
    assert stored["status"] == "pass" and stored["spec"] == {"x": 1}


def fake_step(run_dir_files, code):
    """A stand-in for pipeline.train / pipeline.evaluate: writes RUN_FILES (relative path -> text)
    into the run directory the recipes resolve for CFG, as the real step does, and exits CODE."""
    def step(cfg, dry_run=False, env=None):
        run_dir = gpu_check.paths(cfg).run_dir
        for name, text in run_dir_files.items():
            os.makedirs(os.path.dirname(os.path.join(run_dir, name)), exist_ok=True)
            with open(os.path.join(run_dir, name), "w", encoding="utf-8") as handle:
                handle.write(text)
        return code
    return step


@pytest.mark.parametrize("code,stops", [(128 + 2, True), (128 + 15, True), (1, False)])
def test_a_signal_passed_on_by_a_recipe_step_stops_the_whole_check(tmp_path, monkeypatch,
                                                                   code, stops):
    # on the H200 (2026-11-26) a SIGINT stopped train-bf16-100L and the check went on to the
    # throughput checks, recording an interruption as a failure; a failure still goes on
    args = gpu_check.parse_args(["--device", "cpu", "--tiny", "--out", str(tmp_path / "out")])
    log = "\n".join(inner(u, 10.0 - u / 10) for u in range(1, 6)) + "\n"
    monkeypatch.setattr(gpu_check.pipeline, "train", fake_step(
        {"train.log": log, "status.json": json.dumps({"status": "interrupted"})}, code))
    checks = gpu_check.Checks(args)
    if stops:
        with pytest.raises(gpu_check.Interrupted) as raised:
            checks.train("fp16", 2)
        assert raised.value.signum == code - 128 and checks.results == []
        assert not (tmp_path / "out" / "cases" / "train-fp16-2L" / "result.json").exists()
    else:
        assert checks.train("fp16", 2)["status"] == "fail"


def test_generation_speed_comes_from_the_evaluate_log(tmp_path, monkeypatch):
    # fairseq-generate's "Translated ..." line goes to its log, not to generate-test.txt: on the
    # H200 the report showed no sentences/s for that reason
    args = gpu_check.parse_args(["--device", "cpu", "--tiny", "--out", str(tmp_path / "out")])
    refs = ["ein Hund läuft .", "zwei Männer spielen ."]
    raw = gpu_check.paths(gpu_check.check_settings(args, "fp16", 2)).raw
    os.makedirs(raw)
    with open(os.path.join(raw, "test.en-de.de"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(refs) + "\n")
    generated = "".join(f"S-{i}\tx\nH-{i}\t-0.1\t{r}\nD-{i}\t-0.1\t{r}\n"
                        for i, r in enumerate(refs))
    monkeypatch.setattr(gpu_check.pipeline, "evaluate", fake_step({
        "eval/en-de/generate-test.txt": generated + "Generate test with beam=5: BLEU4 = 100\n",
        "evaluate.log": "INFO:fairseq_cli.generate:Translated 2 sentences (9 tokens) in 0.1s "
                        "(24.50 sentences/s, 110.25 tokens/s)\n"}, 0))
    result = gpu_check.Checks(args).generate({"name": "t", "status": "pass", "spec": {}}, 2, "fp16")
    assert result["status"] == "pass", result
    assert result["figures"]["sentences_per_s"] == 24.5
    assert result["figures"]["bleu"] == pytest.approx(100.0)
    assert (tmp_path / "out" / "cases" / "generate-fp16-2L" / "evaluate.log").exists()


NOT_RUN = "not run: a check this device cannot make (hand-made row)"


def hand_made_results():
    return [
        {"name": "data", "kind": "data", "status": "pass", "reason": "",
         "figures": {"vocabulary": 7992}},
        {"name": "train-fp16-18L", "kind": "train", "status": "pass", "reason": "",
         "seconds": 95.0, "figures": {
             "updates": 300, "loss_start": 13.51, "loss_end": 6.25, "loss_drop": 0.537,
             "last_valid_loss": 6.1, "words_per_s": 123456.0, "peak_gb": 12.34,
             "overflows": 3, "longest_overflow_run": 2, "loss_scale": 16.0}},
        {"name": "generate-fp16-18L", "kind": "generate", "status": "fail",
         "reason": "999 of 1000 test sentences were translated", "figures": {
             "sentences": 999, "references": 1000, "empty": 0, "bleu": None,
             "sentences_per_s": 250.0}},
        {"name": "train-fp16-2L", "kind": "train", "status": "not_run",
         "reason": NOT_RUN, "figures": {}},
        {"name": "throughput-18L", "kind": "throughput", "status": "pass", "reason": "",
         "reused": True, "figures": {
             "fairseq_tokens_per_s": 20000.0, "deepnet_tokens_per_s": 19000.0,
             "throughput_ratio": 0.95, "fairseq_step_peak_gb": 4.0,
             "deepnet_step_peak_gb": 4.2, "memory_ratio": 1.05}},
    ]


ENV = {"device": "cuda: 1 x NVIDIA H100 80GB HBM3", "torch": "2.13.0", "fairseq": "0.12.3",
       "cuda": "12.8", "python": "3.11.7"}


def test_report_json_and_markdown_from_hand_made_results(tmp_path):
    args = gpu_check.parse_args(["--depths", "18,100", "--out", str(tmp_path)],
                                cuda_available=True)
    results = hand_made_results()
    report = gpu_check.build_report(args, results, ENV, "bash benchmarks/gpu_check.sh",
                                    "2026-01-01T10:00:00+00:00", 1830.0)
    assert report["verdict"] == "fail"  # the generation failed
    assert report["environment"]["device"] == ENV["device"]
    assert report["settings"]["depths"] == [18, 100] and report["settings"]["updates"] == 300
    assert [c["name"] for c in report["checks"]] == [r["name"] for r in results]
    assert report["checks"][1]["figures"]["peak_gb"] == 12.34
    json.dumps(report)  # serialisable as it is
    text = gpu_check.markdown(report)
    assert text.startswith("# GPU check: FAIL\n")
    assert "- device: cuda: 1 x NVIDIA H100 80GB HBM3" in text
    assert "- started 2026-01-01T10:00:00+00:00, took 30.5 min" in text
    assert ("| train-fp16-18L | pass | loss 13.51 → 6.25 (54% lower) in 300 updates, "
            "123,456 words/s, peak 12.3 GB, 3 overflows (longest run 2), loss scale 16 | 95 s |  |"
            ) in text
    assert ("| generate-fp16-18L | **FAIL** | 999/1000 sentences, 0 empty, sacreBLEU –, "
            "250 sentences/s | – | 999 of 1000 test sentences were translated |") in text
    assert f"| train-fp16-2L | not run |  | – | {NOT_RUN} |" in text
    assert ("| throughput-18L | pass | tokens/s DeepNet 19,000 / fairseq Post-LN 20,000 = "
            "0.950; step peak GB 4.200 / 4.000 = 1.050 | – | passed in an earlier run, reused |"
            ) in text
    assert "| check | result | figures | time | note |" in text


@pytest.mark.parametrize("statuses,code", [(("pass", "not_run"), 0), (("pass", "fail"), 1)])
def test_main_writes_both_reports_and_exits_1_on_a_failed_check(tmp_path, monkeypatch,
                                                                 statuses, code):
    results = [{"name": f"c{i}", "kind": "data", "status": status, "reason": "",
                "figures": {"vocabulary": 10}} for i, status in enumerate(statuses)]
    monkeypatch.setattr(gpu_check.Checks, "all", lambda self: results)
    monkeypatch.setattr(gpu_check, "environment", lambda device: ENV)
    out = tmp_path / "out"
    assert gpu_check.main(["--device", "cpu", "--tiny", "--out", str(out)]) == code
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == ("incomplete" if code == 0 else "fail")
    assert report["command"] == f"bash benchmarks/gpu_check.sh --device cpu --tiny --out {out}"
    assert (out / "report.md").read_text().startswith(f"# GPU check: {report['verdict'].upper()}")
    assert sorted(p.name for p in out.iterdir()) == [".deepnet-recipes", "report.json",
                                                     "report.md"]  # no temporary file left


def test_verdict_pass_incomplete_fail():
    results = hand_made_results()
    passed = [r for r in results if r["status"] == "pass"]
    assert gpu_check.verdict(passed) == "pass"
    assert gpu_check.verdict(passed + [results[3]]) == "incomplete"
    assert gpu_check.verdict(results) == "fail"
    assert gpu_check.verdict([results[3]]) == "fail"  # nothing ran at all


# ---------------------------------------------------------------- the real chain, on CPU


def test_the_check_is_the_same_whatever_recipe_settings_the_caller_set(tmp_path, monkeypatch):
    """The check's settings are its own (given above everything, as a sweep's run entry);
    the caller's recipe settings reach neither them nor the processes' environment."""
    args = gpu_check.parse_args(["--device", "cpu", "--tiny", "--out", str(tmp_path / "out")])
    monkeypatch.setenv("DEEPNET_LR", "0.5")
    monkeypatch.setenv("LAYERS", "12")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cfg = gpu_check.check_settings(args, "fp16", 2)
    assert (cfg.optim.lr, cfg.run.enc_layers, cfg.where.work) == (args.lr, 2, args.out)
    assert cfg.sources["LR"] == "the GPU check"
    env = gpu_check.process_env(args)
    assert "DEEPNET_LR" not in env and "LAYERS" not in env and env["OMP_NUM_THREADS"] == "1"
