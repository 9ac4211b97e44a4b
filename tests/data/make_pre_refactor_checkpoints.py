"""Writes tests/data/pre_refactor/*.pt.gz: tiny checkpoints saved by the plugin as it was before
DeepNet became one layer rule among the methods (commit 7b65d0f), with the outputs
that code computed on a fixed input. tests/test_checkpoint_names.py loads them with today's
code. Run once, from a checkout of that commit (the files are kept, not regenerated):

    python tests/data/make_pre_refactor_checkpoints.py TOY_BIN MONO_BIN

TOY_BIN / MONO_BIN: the conftest fixtures' toy_data and mono_data (same corpus, same
dictionaries). Model tensors are stored in fp16 to keep the files small; the outputs are
computed from those rounded weights.
"""

import gzip
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from conftest import build  # noqa: E402

from fairseq.trainer import Trainer  # noqa: E402

NARROW = ["--encoder-embed-dim", 16, "--encoder-ffn-embed-dim", 32,
          "--encoder-attention-heads", 2, "--decoder-attention-heads", 2]
LM_NARROW = ["--decoder-embed-dim", 16, "--decoder-ffn-embed-dim", 32]
# name -> (data: toy or mono, arch, options)
MODELS = {
    "deepnet_transformer": ("toy", "deepnet_transformer_tiny", ["--encoder-layers", 3, *NARROW]),
    "deepnet_roberta": ("mono", "deepnet_roberta_tiny",
                        ["--task", "masked_lm", "--tokens-per-sample", 32, "--encoder-layers", 3,
                         *NARROW[:6]]),
    "deepnet_lm": ("mono", "deepnet_lm_tiny",
                   ["--task", "language_modeling", "--tokens-per-sample", 32, *LM_NARROW]),
    "admin": ("toy", "admin_transformer_tiny", NARROW),
}


def net_input(kind):
    """A fixed input of token ids (4..39: the toy dictionaries' words), eos = 2 at the end."""
    tokens = torch.tensor([[5, 9, 14, 22, 7, 2], [31, 12, 8, 19, 25, 2]])
    if kind == "toy":
        prev = torch.cat([torch.full((2, 1), 2), tokens[:, :-1]], dim=1)
        return {"src_tokens": tokens, "src_lengths": torch.tensor([6, 6]),
                "prev_output_tokens": prev}
    return {"src_tokens": tokens}


def outputs(model, kind):
    model.eval()
    with torch.no_grad():
        return model(**net_input(kind))[0]


def main(toy, mono, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for name, (kind, arch, extra) in MODELS.items():
        model, task, cfg = build(toy if kind == "toy" else mono, arch, *extra, "--optimizer",
                                 "sgd", "--lr", 0.1)
        if name == "admin":  # profiled: the data_initialised buffer is set
            model.initialise_from_batch(net_input(kind))
        model.load_state_dict({k: v.half() if v.is_floating_point() else v
                               for k, v in model.state_dict().items()})
        path = os.path.join(out_dir, f"{name}.pt")
        trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
        trainer.consolidate_optimizer()
        trainer.save_checkpoint(path, {})
        state = torch.load(path, weights_only=False)
        state["model"] = {k: v.half() if v.is_floating_point() else v
                          for k, v in state["model"].items()}
        state["last_optimizer_state"] = None
        state["reference_output"] = outputs(model, kind).half()
        torch.save(state, path)
        with open(path, "rb") as raw, gzip.open(path + ".gz", "wb") as packed:
            packed.write(raw.read())  # the zip's padding compresses: about half the size
        os.remove(path)
        print(path + ".gz", os.path.getsize(path + ".gz"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                "pre_refactor"))
