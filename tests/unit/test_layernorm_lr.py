"""The LayerNorm learning-rate multiplier (--deepnorm-ln-lr-multiplier, layernorm_lr.py): its
values per --deepnorm-constants form, that one update changes only the LayerNorm parameters'
step and scales it by exactly the multiplier, and its argument checks. fairseq's training with
it across a resume: slow/test_train_generate.py."""

import pytest
import torch

from deepnet_fairseq import constants
from deepnet_fairseq.nn import layernorm_lr
from support import USER_DIR, build


# (form, N, M, encoder k, decoder k), computed by hand from constants.py's derivation:
# paper k = beta^2/alpha^2: encoder (0.87/0.81)^2 (N^4 M)^(-1/4), decoder 1/(6M);
# the optimizer-aware Post-LN forms k = 1/L, L = 2N (encoder), 3M (decoder); Pre-LN forms 1.
PINNED = [
    ("paper", 6, 6, 0.1228512, 1 / 36),
    ("paper", 100, 100, 0.0036481, 1 / 600),
    ("paper", 18, 6, 0.0409504, 1 / 36),  # encoder: (0.3776 / 1.8661)^2 of the reference table
    ("sgd", 6, 6, 1 / 12, 1 / 18),
    ("adam", 6, 6, 1 / 12, 1 / 18),
    ("adam", 100, 100, 1 / 200, 1 / 300),
    ("lamb", 50, 18, 1 / 100, 1 / 54),
    ("pre_ln_adam", 100, 100, 1.0, 1.0),
    ("pre_ln_sgd", 6, 6, 1.0, 1.0),
]


@pytest.mark.parametrize("form,n,m,k_enc,k_dec", PINNED, ids=[f"{r[0]}-{r[1]}-{r[2]}" for r in PINNED])
def test_multiplier_per_form_is_pinned(form, n, m, k_enc, k_dec):
    c = constants.encoder_decoder_for(n, m, form)
    k = layernorm_lr.stack_multipliers("auto", c, form)
    assert k["encoder"] == pytest.approx(k_enc, rel=1e-5)
    assert k["decoder"] == pytest.approx(k_dec, rel=1e-5)


def test_option_values():
    c = constants.encoder_decoder(6, 6)
    assert layernorm_lr.stack_multipliers(None, c, "paper") == {"encoder": None, "decoder": None}
    assert layernorm_lr.stack_multipliers("0.25", c, "paper") == {"encoder": 0.25, "decoder": 0.25}
    for bad in ("0", "-1", "fast", "inf", "nan"):
        with pytest.raises(ValueError, match="'auto' or a positive number"):
            layernorm_lr.parse(bad)
    with pytest.raises(ValueError, match="unknown --deepnorm-constants"):
        constants.layernorm_lr_multiplier(1.0, 1.0, "rmsprop")


def _parse(tmp_path, *extra):
    from fairseq import options

    from deepnet_fairseq.diagnostics.common import write_dictionary

    write_dictionary(str(tmp_path), 20)
    argv = [str(tmp_path), "--user-dir", USER_DIR, "--arch", "deepnet_transformer_tiny",
            "--cpu", "--source-lang", "src", "--target-lang", "tgt", *extra]
    return options.parse_args_and_arch(options.get_training_parser(), argv)


@pytest.mark.parametrize("extra,message", [
    (["--fp16"], "--fp16-no-flatten-grads"),
    (["--bf16"], "--fp16-no-flatten-grads"),
    (["--optimizer", "composite"], "composite"),
])
def test_settings_the_tags_cannot_reach_are_rejected_by_name(tmp_path, extra, message):
    with pytest.raises(ValueError, match=message):
        _parse(tmp_path, "--deepnorm-ln-lr-multiplier", "auto", *extra)


def test_unflattened_or_memory_efficient_fp16_is_accepted(tmp_path):
    for extra in (["--fp16", "--fp16-no-flatten-grads"], ["--fp16", "--memory-efficient-fp16"],
                  ["--ddp-backend", "fully_sharded"],  # torch's FSDP2: shards stay tensors
                  ["--fp16"]):  # the last: without the option nothing is checked
        option = [] if extra == ["--fp16"] else ["--deepnorm-ln-lr-multiplier", "auto"]
        _parse(tmp_path, *option, *extra)


def _one_update(data_dir, optimizer, lr, extra=(), form="paper", masters=False):
    """(model, {name: step}) after one fairseq Trainer update of a 2-2 tiny DeepNet; with
    MASTERS, the steps of the fp32 master copies of fp16 training without flattened grads."""
    from fairseq.trainer import Trainer

    from deepnet_fairseq.diagnostics.common import build_training, reverse_copy_batch

    options = ["--optimizer", optimizer, "--lr", str(lr), "--lr-scheduler", "fixed",
               "--dropout", "0", "--criterion", "cross_entropy", "--share-all-embeddings",
               "--deepnorm-constants", form, *extra]
    cfg, task, model, criterion = build_training(str(data_dir), "deepnet", 2, options, seed=1)
    trainer = Trainer(cfg, task, model, criterion)
    batch = reverse_copy_batch(task.source_dictionary, 4, 5, torch.Generator().manual_seed(0))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train_step([batch])
    if masters:  # fairseq's FP16Optimizer keeps one fp32 copy per parameter, in model order
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        after = dict(zip(names, trainer.optimizer.fp32_params))
        return model, {n: after[n].detach() - before[n].float() for n in names}
    return model, {n: p.detach() - before[n] for n, p in model.named_parameters()}


@pytest.mark.parametrize("optimizer,lr,form", [("sgd", 0.1, "paper"), ("adam", 1e-3, "adam"),
                                               ("nag", 0.1, "sgd")])
def test_one_update_scales_only_the_layernorm_steps(tmp_path, optimizer, lr, form):
    from deepnet_fairseq.diagnostics.common import write_dictionary

    write_dictionary(str(tmp_path), 30)
    _, plain = _one_update(tmp_path, optimizer, lr, form=form)
    model, scaled = _one_update(tmp_path, optimizer, lr, form=form,
                                extra=["--deepnorm-ln-lr-multiplier", "auto"])
    c = constants.encoder_decoder_for(2, 2, form)
    expected = layernorm_lr.stack_multipliers("auto", c, form)
    params = dict(model.named_parameters())
    layernorm = [n for n in params if ".layers." in n and "layer_norm" in n]
    assert len(layernorm) == 2 * (2 * 2 + 2 * 3)  # gain and bias of 2x2 encoder, 2x3 decoder LNs
    for name, step in scaled.items():
        if name in layernorm:
            k = expected[name.split(".")[0]]
            assert layernorm_lr.multiplier_of(params[name]) == k
            assert plain[name].abs().max() > 1e-5, name  # a real step to compare with
            # SGD/NAG: the step is lr * (momentum) gradient; Adam's: lr * m / (sqrt(v) + eps);
            # both proportional to lr, so the multiplied step is k times the plain one
            torch.testing.assert_close(step, k * plain[name], rtol=1e-4, atol=1e-7)
        else:
            assert layernorm_lr.multiplier_of(params[name]) is None
            assert torch.equal(step, plain[name]), f"{name} changed"


# single-stack models: paper constants alpha = (2N)^(1/4), beta = (8N)^(-1/4), so
# k = beta^2 / alpha^2 = (8N)^(-1/2) (2N)^(-1/2) = 1/(4N)
SINGLE_STACK = [
    ("deepnet_roberta_tiny", "masked_lm", "masked_lm", "encoder", 3),
    ("deepnet_lm_tiny", "language_modeling", "cross_entropy", "decoder", 4),
]


def _one_single_stack_update(data, arch, task_name, criterion_name, side, layers, extra=()):
    from fairseq.trainer import Trainer

    model, task, cfg = build(data, arch, "--task", task_name, "--criterion", criterion_name,
                             f"--{side}-layers", layers, "--tokens-per-sample", 32,
                             "--optimizer", "sgd", "--lr", 1.0, "--lr-scheduler", "fixed",
                             "--dropout", 0, "--batch-size", 4, *extra)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    task.load_dataset("train")
    batches = task.get_batch_iterator(task.dataset("train"), max_sentences=4, seed=1)
    batch = next(batches.next_epoch_itr(shuffle=False))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train_step([batch])
    return model, {n: p.detach() - before[n] for n, p in model.named_parameters()}


@pytest.mark.parametrize("arch,task_name,criterion_name,side,layers", SINGLE_STACK,
                         ids=[r[0] for r in SINGLE_STACK])
def test_encoder_only_and_decoder_only_models_take_the_option(
        mono_data, arch, task_name, criterion_name, side, layers):
    setting = (mono_data, arch, task_name, criterion_name, side, layers)
    _, plain = _one_single_stack_update(*setting)
    model, scaled = _one_single_stack_update(*setting,
                                             extra=["--deepnorm-ln-lr-multiplier", "auto"])
    k = 1 / (4 * layers)
    params = dict(model.named_parameters())
    layernorm = [n for n in params if ".layers." in n and "layer_norm" in n]
    # gain and bias of 2 (encoder) or 2 (decoder-only: no cross-attention) LNs per layer
    assert len(layernorm) == 2 * 2 * layers
    for name, step in scaled.items():
        if name in layernorm:
            assert layernorm_lr.multiplier_of(params[name]) == pytest.approx(k, rel=1e-12)
            assert plain[name].abs().max() > 1e-4, name
            # the scaled step is computed in float32 next to values near 1: 2 ulps of 1.0
            torch.testing.assert_close(step, k * plain[name], rtol=1e-4, atol=2.4e-7)
        else:
            assert layernorm_lr.multiplier_of(params[name]) is None, name
            assert torch.equal(step, plain[name]), f"{name} changed"


def test_nested_optimizer_steps_apply_the_multiplier_once():
    """An optimizer stepping inside another's step (as ZeRO's OSS does) must not scale twice."""

    class Outer(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {"lr": 0.5})
            self.inner = torch.optim.SGD(self.param_groups[0]["params"], lr=0.5)

        def step(self, closure=None):
            self.inner.step()

    w = torch.nn.Parameter(torch.ones(3))
    w.optim_overrides = {layernorm_lr.OVERRIDE_KEY: 0.1}
    w.grad = torch.full((3,), 2.0)
    Outer([w]).step()
    torch.testing.assert_close(w.detach(), torch.full((3,), 1 - 0.1 * 0.5 * 2.0))
    torch.optim.SGD([w], lr=0.5).step()  # and a plain step after it is scaled as well
    torch.testing.assert_close(w.detach(), torch.full((3,), 1 - 2 * 0.1 * 0.5 * 2.0))


@pytest.mark.parametrize("mode", ["--fp16-no-flatten-grads", "--memory-efficient-fp16"])
def test_one_fp16_update_scales_the_layernorm_steps_to_the_precision(tmp_path, monkeypatch,
                                                                     mode):
    """On CPU: fairseq's two CUDA-only calls of its fp16 path lifted for this
    test (what ``fairseq_train_compat`` does for a CPU fp16 run). With fp32 master copies
    (--fp16-no-flatten-grads) a LayerNorm step is k times the plain fp16 step as in fp32; with
    memory-efficient fp16 (no master copy) to within the parameter's fp16 rounding."""
    from deepnet_fairseq.diagnostics.common import write_dictionary

    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *args, **kwargs: self)
    write_dictionary(str(tmp_path), 30)
    masters = mode == "--fp16-no-flatten-grads"
    fp16 = ["--fp16", mode, "--fp16-init-scale", "8"]
    _, plain = _one_update(tmp_path, "adam", 1e-2, fp16, "adam", masters)
    model, scaled = _one_update(tmp_path, "adam", 1e-2,
                                [*fp16, "--deepnorm-ln-lr-multiplier", "auto"], "adam", masters)
    expected = layernorm_lr.stack_multipliers(
        "auto", constants.encoder_decoder_for(2, 2, "adam"), "adam")
    params = dict(model.named_parameters())
    assert next(iter(params.values())).dtype == torch.float16
    layernorm = [n for n in params if ".layers." in n and "layer_norm" in n]
    assert len(layernorm) == 2 * (2 * 2 + 2 * 3)
    for name in layernorm:
        k = expected[name.split(".")[0]]
        assert plain[name].abs().max() > 1e-3, name  # a real step to compare with
        # rounding: none beyond fp32's with master copies; else half an fp16 ulp of the
        # parameter, on each of the two steps compared
        ulp = torch.finfo(torch.float16).eps * (params[name].float().abs() + 1)
        atol = 1e-6 if masters else ulp
        assert ((scaled[name].float() - k * plain[name].float()).abs() <= atol).all(), name
    for name in params:
        if name not in layernorm:
            assert torch.equal(scaled[name], plain[name]), f"{name} changed"
