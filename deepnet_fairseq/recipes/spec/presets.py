"""Every default of the recipes, as data: the sizes, the model widths and the machines here,
the datasets' (their papers' settings) in their declarations (``datasets/<name>.py``), inside
the package so that an installed copy needs no checkout.

Each value carries its provenance tag and the reason for it:

- ``PAPER``: stated in the DeepNet paper (Wang et al. 2022, arXiv 2203.00555);
- ``ADMIN``: the paper's WMT-17 training setting, which the DeepNet authors shared with the
  Admin authors, published in microsoft/admin-torch (``example/README.md``,
  ``example/train_wmt_en-de_huge_batch.sh``). They report that DeepNet at 100L-100L fails with
  a regular 8 x 4,096-token batch and trains with this 128 x 4,096 one;
- ``CHOSEN``: ours, with the reason. The paper does not give its learning rate, warmup, batch
  or number of updates as text; for WMT-17 they come from admin-torch, for OPUS-100 and
  IWSLT-14 they are chosen from the usual fairseq settings and are the first thing to revisit
  if a reproduction falls short.

``settings.resolve`` takes a value from the first of: the environment (``DEEPNET_<NAME>``, then
``<NAME>``), the size (``SIZE``; ``full`` has none), the dataset, the model width (``MODEL``),
the machine (``DEVICE``), the defaults of ``settings.SETTINGS``. ``--dry-run`` prints every
value with where it came from; ``python -m deepnet_fairseq.recipes.spec.presets`` prints this file's
tables.
"""

import sys

from ...methods import TINY_SIZE
# the tags, as presets.PAPER
from ..base.provenance import ADMIN, CHOSEN, PAPER, Preset  # noqa: F401
from ..datasets import DATASETS

# The small sizes' text: the corpus shipped with the package, not a download of all of WMT-17
# or OPUS-100 to use a few thousand lines of it (SOURCE=download still takes them from there).
SHIPPED = ("the corpus shipped in deepnet_fairseq/corpora, for a dataset that would download "
           "(SOURCE=download for its own)")

MINI = Preset("size", "mini", (
    "SIZE=mini: the paper's Table 1 pattern on real text that ships with the repository. "
    'Post-LN, Pre-LN and DeepNet at 6, 18 and 50 layers per side on Multi30k en->de (29,000 '
    'pairs, deepnet_fairseq/corpora/multi30k), identical hyperparameters for all nine runs, on '
    'CPU: AT MOST 3 HOURS ON 2 CPU CORES for the whole sweep (data, 9 trainings, 9 '
    'evaluations); measured: 1 h 40 min on a 2-core AMD EPYC (2026-11-23); figures in '
    'results/wmt17-mini/ and docs/findings.md ("Table 1\'s pattern on real text"). '
    'SIZE=mini bash '
    'scripts/wmt17/prepare.sh && SIZE=mini bash scripts/wmt17/sweep.sh Interrupt it at any '
    'time: the next launch resumes the unfinished run and skips finished ones. A 64-wide model '
    '(FFN 4x) and 1,000 updates of 1,024 tokens keep the three 50L-50L runs within the budget '
    '(about 1.3 s per 50L-50L update, measured in the sweep); the point is the pattern across '
    "depth, not Table 1's BLEU. DeepNet runs first, 6L before 50L, so a first figure comes "
    'within minutes.'
), [
    ('SOURCE', 'multi30k', CHOSEN, SHIPPED),
    ('EMBED_DIM', '64', CHOSEN, 'the width that fits 9 runs into 3 CPU hours'),
    ('FFN_DIM', '256', CHOSEN, '4 x width, as Transformer-base'),
    ('HEADS', '4', CHOSEN, '16 dimensions per head'),
    ('DEPTHS', '6 18 50', PAPER, "Table 1's first three columns, layers per side"),
    ('METHODS', 'deepnet pre_ln post_ln', PAPER, "Table 1's rows"),
    ('TRAIN_LINES', '0', CHOSEN, 'all 29,000 training pairs'),
    ('VALID_LINES', '0', CHOSEN, 'all 1,014 validation pairs'),
    ('TEST_LINES', '0', CHOSEN, 'all 1,000 test_2016_flickr pairs'),
    ('VOCAB', '4000', CHOSEN, 'joint sentencepiece, as the quickstart (measured there)'),
    ('SPM_SENTENCES', '100000', CHOSEN, 'every sentence of both sides'),
    ('TOKENS_PER_UPDATE', '1024', CHOSEN, 'small batches: many updates in few CPU hours'),
    ('MAX_TOKENS', '1024', CHOSEN, 'one CPU process, update-freq 1'),
    ('LR', '1e-3', CHOSEN,
     "the quickstart's 1.5e-3 (at 2,048 tokens) over sqrt(2) for half the batch"),
    ('WARMUP', '400', CHOSEN, 'as the quickstart (measured there)'),
    ('DROPOUT', '0.1', CHOSEN, 'a small model on a small corpus, few epochs'),
    ('WEIGHT_DECAY', '0.0', CHOSEN, 'as the quickstart'),
    ('MAX_UPDATE', '1000', CHOSEN, '1.7 epochs: what 3 hours allow for 3 x 50L-50L'),
    ('SAVE_INTERVAL_UPDATES', '200', CHOSEN, 'update checkpoints every 200 updates ...'),
    ('AVERAGE_LAST', '2', CHOSEN, '... the last 2 (updates 800 and 1000) averaged'),
    ('LOG_INTERVAL', '50', CHOSEN, 'a training line every 50 updates'),
    ('BEAM', '5', CHOSEN, 'as the wmt17 dataset'),
])

QUICKSTART = Preset("size", "quickstart", (
    "SIZE=quickstart: the README's first command (bash scripts/quickstart.sh, which sets it): "
    "the wmt17 recipe on the Multi30k copy shipped with the package, one 6L-6L DeepNet that "
    "translates in about 8 minutes on 2 CPU cores. Every value was chosen from measured learning "
    "curves (docs/findings.md); measured: sacreBLEU in README.md."
), [
    ('SOURCE', 'multi30k', CHOSEN, 'the corpus shipped in deepnet_fairseq/corpora: no download'),
    ('METHODS', 'deepnet', CHOSEN, 'one DeepNet ...'),
    ('DEPTHS', '6', CHOSEN, '... of 6 layers per side'),
    ('EMBED_DIM', '128', CHOSEN, 'the widest model that translates within 15 CPU minutes'),
    ('FFN_DIM', '512', CHOSEN, '4 x width, as Transformer-base'),
    ('HEADS', '4', CHOSEN, '32 dimensions per head'),
    ('TRAIN_LINES', '0', CHOSEN, 'all 29,000 training pairs'),
    ('VALID_LINES', '0', CHOSEN, 'all 1,014 validation pairs'),
    ('TEST_LINES', '0', CHOSEN, 'all 1,000 test_2016_flickr pairs'),
    ('VOCAB', '4000', CHOSEN, 'joint sentencepiece: the best of 2,000 / 4,000 / 8,000 measured'),
    ('SPM_SENTENCES', '100000', CHOSEN, 'every sentence of both sides'),
    ('TOKENS_PER_UPDATE', '2048', CHOSEN, 'one process, update-freq 1 ...'),
    ('MAX_TOKENS', '2048', CHOSEN, '... of 2,048 tokens'),
    ('LR', '1.5e-3', CHOSEN, 'the highest peak that trained smoothly at this size'),
    ('WARMUP', '400', CHOSEN, 'inverse_sqrt warmup: 40% of the run'),
    ('DROPOUT', '0.1', CHOSEN, 'a small model, under 2 epochs'),
    ('WEIGHT_DECAY', '0.0', CHOSEN, 'no decay over so short a run'),
    ('MAX_UPDATE', '1000', CHOSEN, 'about 8 minutes on 2 CPU cores; MAX_UPDATE=2000 with '
                                   'RETRY=1 trains further on the same schedule'),
    ('SAVE_INTERVAL_UPDATES', '250', CHOSEN, 'a validation and a checkpoint every 250 updates'),
    ('AVERAGE_LAST', '1', CHOSEN, 'the last checkpoint, not an average, is decoded'),
    ('LOG_INTERVAL', '25', CHOSEN, 'a training line every 25 updates'),
    ('BEAM', '5', CHOSEN, 'as the wmt17 dataset'),
    ('TOKENIZED_BLEU', '0', CHOSEN, 'detokenised sacreBLEU, the figure users compare'),
    ('COMPOUND_SPLIT', '0', CHOSEN, 'with TOKENIZED_BLEU'),
])

QUICKSTART_CUDA = Preset("size", "quickstart-cuda", (
    "SIZE=quickstart-cuda: what bash scripts/quickstart.sh runs with DEVICE=cuda: the same "
    "recipe with a 512-wide model on one GPU."
), [
    ('SOURCE', 'multi30k', CHOSEN, 'as SIZE=quickstart'),
    ('METHODS', 'deepnet', CHOSEN, 'as SIZE=quickstart'),
    ('DEPTHS', '6', CHOSEN, 'as SIZE=quickstart'),
    ('MODEL', 'base', CHOSEN, 'Transformer-base width, which a GPU trains in minutes'),
    ('TRAIN_LINES', '0', CHOSEN, 'all 29,000 training pairs'),
    ('VALID_LINES', '0', CHOSEN, 'all validation pairs'),
    ('TEST_LINES', '0', CHOSEN, 'all test_2016_flickr pairs'),
    ('VOCAB', '8000', CHOSEN, 'a larger joint vocabulary for the larger model'),
    ('SPM_SENTENCES', '100000', CHOSEN, 'every sentence of both sides'),
    ('TOKENS_PER_UPDATE', '8192', CHOSEN, 'one GPU ...'),
    ('MAX_TOKENS', '8192', CHOSEN, '... 8,192 tokens per step'),
    ('LR', '7e-4', CHOSEN, 'a 512-wide model takes a lower peak'),
    ('WARMUP', '1000', CHOSEN, 'inverse_sqrt warmup'),
    ('DROPOUT', '0.3', CHOSEN, 'a large model on a small corpus'),
    ('WEIGHT_DECAY', '0.0', CHOSEN, 'as SIZE=quickstart'),
    ('MAX_UPDATE', '6000', CHOSEN, 'about 17 epochs'),
    ('SAVE_INTERVAL_UPDATES', '500', CHOSEN, 'a validation and a checkpoint every 500 updates'),
    ('AVERAGE_LAST', '1', CHOSEN, 'as SIZE=quickstart'),
    ('LOG_INTERVAL', '100', CHOSEN, 'a training line every 100 updates'),
    ('BEAM', '5', CHOSEN, 'as the wmt17 dataset'),
    ('TOKENIZED_BLEU', '0', CHOSEN, 'as SIZE=quickstart'),
    ('COMPOUND_SPLIT', '0', CHOSEN, 'as SIZE=quickstart'),
])

SMOKE = Preset("size", "smoke", (
    'SIZE=smoke: the whole chain in about a minute per dataset on 2 CPU cores (CI, laptops). '
    'Numbers chosen only to be small; nothing here is a paper setting.'
), [
    ('SOURCE', 'multi30k', CHOSEN, SHIPPED),
    ('MODEL', 'tiny', CHOSEN, '64-128-2 width (model tiny)'),
    ('TRAIN_LINES', '2000', CHOSEN, 'sentence pairs per corpus (per pair for OPUS-100)'),
    ('TEST_LINES', '60', CHOSEN, 'test sentences decoded per direction'),
    ('VALID_LINES', '100', CHOSEN, 'validation sentences per direction'),
    ('VOCAB', '1000', CHOSEN, 'joint sentencepiece vocabulary'),
    ('TOKENS_PER_UPDATE', '4096', CHOSEN, 'effective batch in tokens'),
    ('MAX_TOKENS', '4096', CHOSEN, 'per process (the 2-process test sets 2048: 2 x 2048 = 4096)'),
    ('MAX_UPDATE', '20', CHOSEN, 'updates per run'),
    ('WARMUP', '5', CHOSEN, 'warmup updates'),
    ('LR', '0.002', CHOSEN, 'fast learning for a tiny model'),
    ('SAVE_INTERVAL_UPDATES', '10', CHOSEN, 'update checkpoints at 10 and 20 ...'),
    ('AVERAGE_LAST', '2', CHOSEN, '... of which the last 2 are averaged'),
    ('DEPTHS', '1 2', CHOSEN, 'layers per side'),
    ('BEAM', '2', CHOSEN, 'small beam, fast decoding'),
    ('SPM_SENTENCES', '100000', CHOSEN, 'sentencepiece training sample'),
])

BASE = Preset("model", "base", (
    "Transformer-base width: the paper's Table 1 (WMT-17) and Table 2 (OPUS-100) models."
), [
    ('EMBED_DIM', '512', PAPER, 'hidden size 512 (§5.1, Table 1; 1000L model also 512)'),
    ('FFN_DIM', '2048', PAPER, 'FFN size 2048'),
    ('HEADS', '8', PAPER, '8 attention heads'),
])

IWSLT = Preset("model", "iwslt", (
    "IWSLT-14 width (the paper's Figure 6 uses IWSLT-14 De-En with small models)."
), [
    ('EMBED_DIM', '512', CHOSEN, 'fairseq transformer_iwslt_de_en width'),
    ('FFN_DIM', '1024', CHOSEN, 'fairseq transformer_iwslt_de_en FFN'),
    ('HEADS', '4', CHOSEN, 'fairseq transformer_iwslt_de_en heads'),
])

TINY = Preset("model", "tiny", (
    "Tiny width: the 64-128-2 models of the paper's Figure 5; here the smoke / CI size. The "
    "one tiny size of the project (methods.TINY_SIZE: the _tiny archs, the diagnostics, the "
    "GPU check and the quickstart's smoke size read it too)."
), [
    ('EMBED_DIM', str(TINY_SIZE["encoder_embed_dim"]), PAPER, 'Figure 5 tiny model, hidden 64'),
    ('FFN_DIM', str(TINY_SIZE["encoder_ffn_embed_dim"]), PAPER, 'Figure 5 tiny model, FFN 128'),
    ('HEADS', str(TINY_SIZE["encoder_attention_heads"]), PAPER, 'Figure 5 tiny model, 2 heads'),
])

CUDA = Preset("machine", "cuda", (
    'CUDA GPUs (sized for 80 GB cards). Nothing here changes the model or the effective batch: the '
    'recipes set --update-freq so that MAX_TOKENS x GPUs x update-freq >= TOKENS_PER_UPDATE.'
), [
    ('MAX_TOKENS', '4096', CHOSEN,
     'tokens per GPU per step; lower it (2048) if a deep model runs out of memory'),
    ('PRECISION', 'fp16', PAPER,
     'fp16 training; bf16 (PRECISION=bf16) is an option, fp32 for debugging'),
    ('FP16_INIT_SCALE', '128', CHOSEN,
     "fairseq's default start; deep models rarely need more headroom"),
    ('FP16_SCALE_WINDOW', '256', CHOSEN,
     "grow the scale every 256 clean steps (fairseq's default 2^14/world is slow to recover)"),
    ('MIN_LOSS_SCALE', '0.0001', CHOSEN,
     'give up (FloatingPointError -> "diverged") only below 1e-4'),
    ('CHECKPOINT_ACTIVATIONS_FROM', '200', CHOSEN,
     'activation checkpointing when N+M >= 200 (100L-100L and deeper)'),
    ('DDP_BACKEND', 'pytorch_ddp', CHOSEN, 'torch DDP'),
    ('NUM_WORKERS', '2', CHOSEN, 'data-loader workers per GPU'),
])

CPU = Preset("machine", "cpu", (
    'CPU (smoke runs, CI, 2-process gloo check).'
), [
    ('MAX_TOKENS', '4096', CHOSEN, 'tokens per process per step'),
    ('PRECISION', 'fp32', CHOSEN, 'fp32; bf16 and fp16 run on CPU too (fp16 through '
                                  "fairseq's own fp16 path with its two CUDA-only calls "
                                  'lifted: deepnet_fairseq.fairseq_train_compat), for tests'),
    ('FP16_INIT_SCALE', '128', CHOSEN, 'as on CUDA, so that an fp16 test on CPU is the GPU run'),
    ('FP16_SCALE_WINDOW', '256', CHOSEN, 'as on CUDA'),
    ('MIN_LOSS_SCALE', '0.0001', CHOSEN, 'as on CUDA'),
    ('CHECKPOINT_ACTIVATIONS_FROM', '200', CHOSEN,
     'unused on CPU: auto checkpoints only a run that would not fit the memory without it'),
    ('DDP_BACKEND', 'legacy_ddp', CHOSEN,
     "torch DDP refuses fairseq's device_ids=[0] for CPU modules; fairseq's own all-reduce works over gloo"),
    ('NUM_WORKERS', '0', CHOSEN, 'load data in the training process (few cores)'),
])

SIZES = {p.name: p for p in (MINI, SMOKE, QUICKSTART, QUICKSTART_CUDA)}  # SIZE=full: the dataset's own values
MODELS = {p.name: p for p in (BASE, IWSLT, TINY)}
MACHINES = {p.name: p for p in (CUDA, CPU)}


def every() -> tuple:
    """Every preset: the datasets' (from their declarations), then this module's."""
    return (*(d.preset for d in DATASETS.values()), *SIZES.values(), *MODELS.values(),
            *MACHINES.values())


def markdown() -> str:
    """docs/presets.md: every preset as a table of setting, value, tag and reason."""
    parts = ["# The recipes' presets\n\nGenerated from `deepnet_fairseq/recipes/spec/presets.py` "
             "and the datasets' declarations (`deepnet_fairseq/recipes/datasets/`) by `python -m "
             "deepnet_fairseq.recipes.spec.presets > docs/presets.md` (a test checks that it is "
             "current). A value is taken from the first of: the environment, the size, the "
             "dataset, the model width, the machine, the defaults of `settings.SETTINGS`. Tags: "
             "**paper** (Wang et al. 2022), **admin-torch** (the paper's WMT-17 training setting, "
             "published in microsoft/admin-torch), **chosen** (ours, with the reason).\n\n"]
    for preset in every():
        parts.append(f"## {preset.kind} `{preset.name}`\n\n{preset.about}\n\n"
                     "| setting | value | tag | why |\n|---|---|---|---|\n")
        parts.extend(f"| `{name}` | `{v.value}` | {v.tag} | {v.why} |\n"
                     for name, v in preset.values.items())
        parts.append("\n")
    return "".join(parts)


if __name__ == "__main__":
    sys.stdout.write(markdown())
