"""deepnet-export on a trained model: stock fairseq-generate without the plugin and CTranslate2
give the DeepNet's translations; the quickstart's model exports and benchmarks."""

import os
import re
import subprocess

import pytest

from support import (
    EXPORT_TOLERANCE, PY, USER_DIR, decoder_outputs, fairseq_train, load_model, run, sample_batch,
)


TRAIN = ["--arch", "deepnet_transformer_tiny", "--encoder-layers", "3", "--decoder-layers", "2",
         "--share-all-embeddings", "--cpu", "--optimizer", "adam", "--lr", "1e-3",
         "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10", "--max-tokens", "2000",
         "--criterion", "label_smoothed_cross_entropy", "--seed", "1", "--max-update", "20",
         "--no-epoch-checkpoints", "--disable-validation"]


# toy targets have at most 9 words; a 20-update model may not stop by itself
MAX_LEN = 12


DECODE = ["--gen-subset", "test", "--batch-size", "40", "--required-batch-size-multiple", "1",
          "--cpu", "--max-len-a", "0", "--max-len-b", str(MAX_LEN)]


# stock fairseq-generate, and proof that it ran without this plugin: nothing imported it
STOCK_GENERATE = ("import sys\nfrom fairseq_cli.generate import cli_main\n"
                  "sys.argv[0] = 'fairseq-generate'\ncli_main()\n"
                  "assert 'deepnet_fairseq' not in sys.modules, 'the plugin was imported'\n")


@pytest.fixture(scope="module")
def trained(toy_data, tmp_path_factory):
    """A tiny DeepNet (3 encoder, 2 decoder layers) trained by fairseq-train, exported by the
    deepnet-export CLI as a checkpoint and as a CTranslate2 model (fp32 and int8)."""
    root = tmp_path_factory.mktemp("export")
    fairseq_train([toy_data, "--user-dir", USER_DIR, "--save-dir", root / "checkpoints", *TRAIN])
    original = root / "checkpoints" / "checkpoint_last.pt"
    run([PY, "-m", "deepnet_fairseq.export", str(original), "--output", str(root / "exported.pt"),
         "--ctranslate2", str(root / "ct2")])
    run([PY, "-m", "deepnet_fairseq.export", str(original), "--ctranslate2",
         str(root / "ct2-int8"), "--quantization", "int8"])
    return {"original": original, "exported": root / "exported.pt", "data": toy_data,
            "ct2": root / "ct2", "ct2_int8": root / "ct2-int8"}


def nbest(stdout):
    """fairseq-generate's H- lines as (id, tokens), in test-set order; the scores are left out
    (they differ in the last float32 digits)."""
    found = re.findall(r"^H-(\d+)\t\S+\t(.*)$", stdout, flags=re.M)
    return sorted(found, key=lambda line: int(line[0]))  # stable: n-best order kept


def generate(trained, beam, plugin):
    options = ["--path", str(trained["original" if plugin else "exported"]), *DECODE,
               "--beam", str(beam), "--nbest", str(beam)]
    if plugin:
        return nbest(run(["fairseq-generate", str(trained["data"]), "--user-dir", USER_DIR,
                          *options]).stdout)
    return nbest(run([PY, "-c", STOCK_GENERATE, str(trained["data"]), *options]).stdout)


@pytest.mark.parametrize("beam", [5, 1])
def test_stock_fairseq_generate_without_plugin_gives_the_same_hypotheses(trained, beam):
    ours = generate(trained, beam, plugin=True)
    assert len(ours) == 40 * beam
    assert generate(trained, beam, plugin=False) == ours  # every n-best list, in order


def test_trained_exported_decoder_outputs_equal_the_deepnets(trained):
    from fairseq import checkpoint_utils

    [original], _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(trained["original"])])
    exported = load_model(trained["exported"])
    batch = sample_batch(task, size=40)
    difference = (decoder_outputs(original, batch) - decoder_outputs(exported, batch)).abs()
    assert difference.max() < EXPORT_TOLERANCE


def translate_ctranslate2(model_dir, data_dir):
    """CTranslate2's greedy translations of the toy test set, as fairseq's H- tokens."""
    import ctranslate2

    sources = (data_dir.parent / "test.src").read_text().splitlines()
    translator = ctranslate2.Translator(str(model_dir), device="cpu", inter_threads=1,
                                        intra_threads=1)
    # fairseq's limits: at least one token (--min-len 1), at most --max-len-b
    results = translator.translate_batch([line.split() for line in sources], beam_size=1,
                                         max_decoding_length=MAX_LEN, min_decoding_length=1)
    return [(str(i), " ".join(result.hypotheses[0])) for i, result in enumerate(results)]


def test_ctranslate2_greedy_translations_equal_fairseqs(trained):
    directory = trained["ct2"]
    assert sorted(os.listdir(directory)) == ["config.json", "model.bin", "shared_vocabulary.json"]
    assert not [name for name in os.listdir(directory.parent) if name.startswith(".tmp")]
    expected = generate(trained, 1, plugin=True)
    assert translate_ctranslate2(directory, trained["data"]) == expected
    # int8 converts and translates every sentence (its words may differ: not compared)
    assert len(translate_ctranslate2(trained["ct2_int8"], trained["data"])) == 40


def test_a_quickstart_model_exports_decodes_without_the_plugin_and_benchmarks(tmp_path):
    """docs/deploying.md's commands on a quickstart run (SIZE=smoke, the same chain as the
    full size): deepnet-export to a checkpoint and to CTranslate2 int8, stock fairseq-generate
    on the export without --user-dir giving the plugin's translations, and the decode-speed
    and transformers-parity benchmarks printing their tables."""
    repo = os.path.dirname(USER_DIR)
    work = tmp_path / "quickstart"
    env = dict(os.environ, SIZE="smoke", DEEPNET_WORK=str(work))
    quickstart = subprocess.run(["bash", os.path.join(repo, "scripts", "quickstart.sh")],
                                env=env, capture_output=True, text=True)
    assert quickstart.returncode == 0, quickstart.stderr[-2000:]
    run_dir, data = work / "runs" / "deepnet-6L-6L", work / "data"
    checkpoint = str(run_dir / "checkpoints" / "checkpoint_last.pt")
    run(["deepnet-export", checkpoint, "--output", str(tmp_path / "plain.pt")])
    run(["deepnet-export", checkpoint, "--ctranslate2", str(tmp_path / "ct2"),
         "--quantization", "int8", "--sentencepiece-model", str(data / "spm.model")])
    assert (tmp_path / "ct2" / "model.bin").exists()
    # fairseq 0.12 drops a last batch whose size is not a multiple of 8 without the option
    decode = ["--gen-subset", "test", "--beam", "5", "--max-len-b", "20", "--batch-size", "100",
              "--required-batch-size-multiple", "1", "--cpu"]
    ours = nbest(run(["fairseq-generate", str(data / "bin"), "--user-dir", USER_DIR,
                      "--path", checkpoint, *decode]).stdout)
    stock = nbest(run([PY, "-c", STOCK_GENERATE, str(data / "bin"),
                       "--path", str(tmp_path / "plain.pt"), *decode]).stdout)
    assert len(ours) == 60 and stock == ours  # the smoke size's test sentences
    bench = run([PY, os.path.join(repo, "benchmarks", "decode_speed.py"), "--run-dir",
                 str(run_dir), "--threads", "1", "--max-len", "20", "--out",
                 str(tmp_path / "speed")])
    for decoder in ("fairseq", "CTranslate2"):
        assert decoder in bench.stdout
    assert re.search(r"sentences/s", bench.stdout)
    # the transformers export against the recipe's own translations (docs/deploying.md), with
    # the run's own search (beam 2 and its length limit at this size): every one identical
    parity = run([PY, os.path.join(repo, "benchmarks", "hf_parity.py"), str(run_dir),
                  "--sentencepiece-model", str(data / "spm.model")])
    count = re.search(r"^\| (\d+) \| (\d+) \| [\d.]+ s \|$", parity.stdout, flags=re.M)
    assert count and count.groups() == ("60", "60"), parity.stdout[-2000:]
