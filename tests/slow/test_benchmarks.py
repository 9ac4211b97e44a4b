"""The benchmark scripts at tiny size: each runs the real code it measures and prints its tables
(figures are not asserted: they are measurements)."""

import json
import math
import os
import re
import subprocess
import sys

from support import PY, REPO, run


def test_the_scale_benchmark_prints_its_tables_and_every_stage(tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "prepare_scale.py"), "--pairs", "3",
         "--lines", "400", "--vocab", "600", "--spm-samples", "400,800", "--workers", "2",
         "--root", str(tmp_path), "--json", str(tmp_path / "figures.json")],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "corpus: pair 3 of 3 (es-en) written" in proc.stderr  # progress
    assert "| clean " in proc.stdout and "| binarise " in proc.stdout
    assert "sampled sentences" in proc.stdout and "EXTRAPOLATION (not measured)" in proc.stdout
    figures = json.loads((tmp_path / "figures.json").read_text())
    stages = json.loads(open(os.path.join(figures["work"], "data", "stages.json")).read())
    assert set(stages) == {"raw text", "clean", "sentencepiece", "encode", "binarise"}
    assert [e["stage"] for e in figures["extrapolated"]] == [
        "raw text", "clean", "sentencepiece", "encode", "binarise"]
    assert [p["sentences"] for p in figures["spm_probes"]] == [400, 800]
    assert figures["workers"] == 2 and figures["training_pairs"] == 1200


def test_throughput_benchmark_prints_both_models(tmp_path):
    proc = run([PY, os.path.join(REPO, "benchmarks", "throughput.py"), "--depths", "2",
                "--checkpoint", "on", "--rounds", "1", "--sentences", "4", "--length", "6"])
    row = [line for line in proc.stdout.splitlines() if line.strip().startswith("2L-2L")]
    assert row, proc.stdout
    fields = row[0].split()
    fairseq_tps, deepnet_tps = float(fields[2]), float(fields[3])
    assert fairseq_tps > 0 and deepnet_tps > 0
    assert float(fields[5]) > 0 and float(fields[6]) > 0  # peak GB of each

    proc = run([PY, os.path.join(REPO, "benchmarks", "throughput.py"), "--max-depth",
                "--depths", "1", "--limit-depth", "1", "--checkpoint", "on",
                "--sentences", "4", "--length", "6", "--budget-gb", "100"])
    assert re.search(r"largest depth within 100 GB, checkpointing on: 1L-1L", proc.stdout), proc.stdout


SCRIPT = os.path.join(REPO, "benchmarks", "gpu_check.sh")


def test_tiny_cpu_run_through_the_real_clis(tmp_path):
    out = tmp_path / "out"
    cmd = ["bash", SCRIPT, "--device", "cpu", "--tiny", "--depths", "2", "--checkpoint-depth", "2",
           "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "pass"  # fp16 too runs on CPU (fairseq_train_compat)
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks) == ["data", "train-fp16-2L", "generate-fp32-2L", "train-bf16-2L",
                            "throughput-2L"]
    fp16 = checks["train-fp16-2L"]
    assert fp16["status"] == "pass", fp16["reason"]
    # the fp16 verdict's figures come from a real fp16 run: the loss scale and its overflows
    assert fp16["figures"]["loss_scale"] >= 1 and fp16["figures"]["overflows"] >= 0
    assert fp16["figures"]["updates"] == 20
    assert checks["train-bf16-2L"]["folder"] == os.path.join("cases", "train-bf16-2L")
    assert "--checkpoint-activations" in (out / "cases" / "train-bf16-2L" / "train.log").read_text()
    train = checks["train-bf16-2L"]
    assert train["status"] == "pass", train["reason"]
    assert train["figures"]["updates"] == 20
    assert train["figures"]["loss_end"] < 0.9 * train["figures"]["loss_start"]
    assert train["figures"]["words_per_s"] > 0 and "overflows" not in train["figures"]
    generate = checks["generate-fp32-2L"]
    assert generate["status"] == "pass", generate["reason"]
    assert generate["figures"]["sentences"] == generate["figures"]["references"] == 100
    assert math.isfinite(generate["figures"]["bleu"])
    bench = checks["throughput-2L"]
    assert bench["status"] == "pass", bench["reason"]
    assert bench["figures"]["throughput_ratio"] > 0 and bench["figures"]["memory_ratio"] > 0
    assert report["environment"]["device"].startswith("cpu: ")
    text = (out / "report.md").read_text()
    assert text.startswith("# GPU check: PASS")
    assert "| train-bf16-2L | pass | loss " in text and "| throughput-2L | pass | tokens/s" in text
    # a re-run reuses every check that passed and reports the same verdict
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    rerun = json.loads((out / "report.json").read_text())
    assert [c["reused"] for c in rerun["checks"] if c["status"] == "pass"][1:] == [True] * 4
    assert rerun["verdict"] == "pass"


def test_the_benchmark_measures_cpu_modes_beside_the_estimate(tmp_path):
    """benchmarks/memory_plan.py at a tiny size on CPU: one fp32 and one ZeRO-1 (2 processes)
    row, each with its measured peak, the CPU estimate and their ratio."""
    import subprocess
    import sys

    out = tmp_path / "rows.jsonl"
    proc = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "memory_plan.py"),
                           "--json", str(out)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "VOCAB": "96",
                               "CONFIGS": "1:fp32:0:2 1:zero:0:2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["precision"], r["tokens"], r["vocab"]) for r in rows] == [("fp32", 64, 100),
                                                                         ("zero", 64, 100)]
    for row in rows:
        assert row["resident"] > 14 * row["params"]  # weights, Adam's state, ...
        assert row["peak"] > row["resident"]
        line = next(l for l in proc.stdout.splitlines() if l.startswith(row["precision"]))
        assert line.split()[-1] == f"{row['peak'] / row['estimate']:.3f}"
    assert len(rows[1]["peaks"]) == 2  # both processes measured
