"""deepnet_fairseq.load: fairseq's hub interface for a checkpoint of the plugin, its arguments
found from the checkpoint. Its translation of a test sentence is fairseq-generate's (the CLI,
another path through fairseq) for the same sentence and beam."""

import os
import subprocess

import pytest

import deepnet_fairseq
from support import USER_DIR, train


@pytest.fixture(scope="module")
def trained(toy_data, tmp_path_factory):
    save = tmp_path_factory.mktemp("hub") / "checkpoints"
    train(toy_data, save, "--max-update", "60", "--encoder-layers", "3", "--decoder-layers", "2",
          "--share-all-embeddings", "--dropout", "0")
    return str(save / "checkpoint_last.pt")


def test_load_translates_as_fairseq_generate_does(toy_data, trained):
    model = deepnet_fairseq.load(trained)  # the data directory from the checkpoint
    source = open(os.path.join(os.path.dirname(toy_data), "test.src")).readline().strip()
    ours = model.translate(source, beam=5)
    generated = subprocess.run(
        ["fairseq-generate", str(toy_data), "--user-dir", USER_DIR, "--path", trained,
         "--gen-subset", "test", "--beam", "5", "--cpu", "--batch-size", "64"],
        capture_output=True, text=True, check=True).stdout
    hypotheses = {int(line.split("\t")[0][2:]): line.split("\t")[2]
                  for line in generated.splitlines() if line.startswith("H-")}
    assert ours == hypotheses[0]


def test_the_sentencepiece_model_beside_the_data_is_found(toy_data, trained, tmp_path,
                                                         monkeypatch):
    from fairseq.models.transformer import TransformerModel

    seen = {}
    monkeypatch.setattr(TransformerModel, "from_pretrained",
                        classmethod(lambda cls, *a, **kw: seen.update(kw) or "hub"))
    assert deepnet_fairseq.load(trained) == "hub" and "bpe" not in seen  # none there
    spm = os.path.join(os.path.dirname(str(toy_data)), "spm.model")
    open(spm, "wb").close()
    try:
        deepnet_fairseq.load(trained)
        assert seen["bpe"] == "sentencepiece" and seen["sentencepiece_model"] == spm
    finally:
        os.remove(spm)
    with pytest.raises(FileNotFoundError, match="pass data=DIR"):
        deepnet_fairseq.load(trained, data=str(tmp_path / "nowhere"))
