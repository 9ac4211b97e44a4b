"""deepnet-source-use: how much a translation model's output depends on its source.

Each measurement is checked against an independent route: the NLL against fairseq's own
cross-entropy criterion, a branch share against the sub-layer recomputed by hand from the
layer's modules, and the source gain against a model that provably cannot see its source.
"""

import math

import pytest
import torch

from deepnet_fairseq.diagnostics.source_use import distinct_greedy, main, measure
from support import build, sample_batch


@pytest.fixture(params=["deepnet_transformer_tiny", "post_ln_transformer_tiny"])
def model_and_batch(request, toy_data):
    model, task, _cfg = build(toy_data, request.param, "--share-all-embeddings")
    return model, task, sample_batch(task, size=8)


def test_nll_agrees_with_fairseq_cross_entropy(model_and_batch):
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    model, task, batch = model_and_batch
    result = measure(model, batch, task.target_dictionary.pad())
    model.eval()
    with torch.no_grad():
        loss, sample_size, _ = CrossEntropyCriterion(task, sentence_avg=False)(model, batch)
    assert result["nll_true"] == pytest.approx(loss.item() / sample_size / math.log(2), rel=1e-5)


def test_first_self_attention_share_recomputed_by_hand(model_and_batch):
    model, task, batch = model_and_batch
    layer = model.decoder.layers[0]
    captured = {}
    handle = layer.register_forward_pre_hook(lambda _m, args: captured.setdefault("x", args[0]))
    try:
        result = measure(model, batch, task.target_dictionary.pad())
    finally:
        handle.remove()
    x = captured["x"]  # T x B x C, the decoder's embedded input
    alpha = getattr(layer, "alpha", 1.0)
    with torch.no_grad():
        mask = model.decoder.buffered_future_mask(x)
        pad_mask = batch["net_input"]["prev_output_tokens"].eq(task.target_dictionary.pad())
        branch, _ = layer.self_attn(query=x, key=x, value=x, key_padding_mask=pad_mask,
                                    attn_mask=mask, need_weights=False)
        ratio = branch.norm(dim=-1) / (alpha * x + branch).norm(dim=-1)
    positions = batch["target"].ne(task.target_dictionary.pad()).t()
    assert result["share.self.0"] == pytest.approx(ratio[positions].mean().item(), rel=1e-4)


def test_a_decoder_blind_to_its_source_has_zero_gain(toy_data):
    model, task, _cfg = build(toy_data, "deepnet_transformer_tiny", "--share-all-embeddings")
    batch = sample_batch(task, size=8)
    pad = task.target_dictionary.pad()
    seeing = measure(model, batch, pad)
    assert abs(seeing["source_gain"]) > 1e-4 and seeing["share.cross"] > 0
    with torch.no_grad():  # the cross-attention's output map is the source's only way in
        for layer in model.decoder.layers:
            layer.encoder_attn.out_proj.weight.zero_()
            layer.encoder_attn.out_proj.bias.zero_()
    blind = measure(model, batch, pad)
    assert blind["source_gain"] == pytest.approx(0.0, abs=1e-6)
    assert blind["share.cross"] == 0.0
    # and it writes one and the same greedy translation for all 8 sources
    assert distinct_greedy(model, task, batch) == 1


def test_cli_rejects_missing_checkpoints(toy_data, capsys):
    with pytest.raises(SystemExit) as stop:
        main([str(toy_data), "--checkpoints", "no/such/checkpoint.pt"])
    assert stop.value.code == 2
    assert "checkpoint(s) not found: no/such/checkpoint.pt" in capsys.readouterr().err


def test_a_collapsed_encoder_has_zero_spread_and_no_gain(toy_data):
    model, task, _cfg = build(toy_data, "deepnet_transformer_tiny", "--share-all-embeddings")
    batch = sample_batch(task, size=8)
    pad = task.target_dictionary.pad()
    working = measure(model, batch, pad)
    assert working["encoder_spread"] > 0.1
    with torch.no_grad():  # Post-LN: the last layer ends in its LayerNorm, now its bias alone
        model.encoder.layers[-1].final_layer_norm.weight.zero_()
        model.encoder.layers[-1].final_layer_norm.bias.normal_()
    collapsed = measure(model, batch, pad)
    # one and the same vector for every token of every sentence: nothing of the source is left
    assert collapsed["encoder_spread"] == pytest.approx(0.0, abs=1e-6)
    assert collapsed["source_gain"] == pytest.approx(0.0, abs=1e-6)
    # while the cross-attention still adds to the decoder's state: a blind decoder looks alike
    # in the gain, the spread tells the two apart
    assert collapsed["share.cross"] > 0
