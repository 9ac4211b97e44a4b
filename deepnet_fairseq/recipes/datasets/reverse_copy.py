"""A generated reverse-copy task: random sentences of 30 words and the same words in reverse
order. The depth study's corpus (``deepnet-depth-study``: the paper's Table 1 pattern at tiny
scale, in minutes on a CPU): nothing to download, and a task whose answer is in the source, so a
model that ignores the source is told apart at once (the source-blind baseline of the report).

    deepnet-depth-study --depths 6,18 --updates 50 --output-dir /tmp/ds      # a quick look
    python -m deepnet_fairseq.recipes run configs/depth-study.toml            # its default study

The text is drawn with a fixed seed, so every launch writes the same corpus; it goes through the
other datasets' prepare (cleaning, sentencepiece, fairseq-preprocess), train, evaluate and sweep.
"""

import random

from . import CHOSEN, Dataset, Preset
from ..base.rawtext import PrepareError, split_limits, write_lines

# the vocabulary of the task: 30 words with no common prefix, so that sentencepiece keeps each
# one whole (a piece per word, VOCAB below)
WORDS = tuple("ash bay cow dew elm fig gum hay ivy jam kit log mud nut oak pea rye sap tar urn "
              "vat wax yak zip bud cub den fox gem hen".split())
SENTENCES = {"train": 4000, "valid": 200, "test": 200}
LENGTHS = (3, 9)  # words per sentence, both ends included


def sentences(split: str, seed: int = 0):
    """SENTENCES[split] (source, target) pairs of the task, the same at every call."""
    rng = random.Random(f"{seed}-{split}")
    for _ in range(SENTENCES[split]):
        words = [rng.choice(WORDS) for _ in range(rng.randint(*LENGTHS))]
        yield " ".join(words), " ".join(reversed(words))


def raw_text(cfg, out: str, say):
    src, tgt = cfg.text.data.src, cfg.text.data.tgt
    if src == tgt:
        raise PrepareError(f"SRC and TGT are both {src!r}: the reverse-copy task needs two "
                           "names for its two sides")
    say(f"generating the reverse-copy task ({len(WORDS)} words, "
        f"{'/'.join(str(n) for n in SENTENCES.values())} train/valid/test sentences)")
    for split, _, limit in split_limits(cfg):
        pairs = list(sentences(split))[:limit or None]
        for lang, side in ((src, 0), (tgt, 1)):
            write_lines(f"{out}/{split}.{src}-{tgt}.{lang}",
                        (pair[side].encode() + b"\n" for pair in pairs))
    return [f"{src}-{tgt}"]


PRESET = Preset("dataset", "reverse_copy", (
    "The depth study's task (deepnet-depth-study): Table 1's pattern at tiny scale, on a "
    "generated corpus, on CPU. Every value is chosen, none is the paper's: small enough that "
    "6L to 50L per side take 1 to 7 minutes a run on one core."
), [
    ('SOURCE', 'generate', CHOSEN, 'written by the declaration: nothing to download'),
    ('SRC', 'src', CHOSEN, 'the sentence ...'),
    ('TGT', 'tgt', CHOSEN, '... and its reversal'),
    ('MODEL', 'tiny', CHOSEN, "64-128-2, the paper's Figure 5 width"),
    ('METHODS', 'post_ln pre_ln deepnet', CHOSEN, "Table 1's rows"),
    ('DEPTHS', '6 18 50 100 200 500', CHOSEN, "Table 1's depths, layers per side"),
    ('TRAIN_LINES', '0', CHOSEN, 'all 4,000 generated pairs'),
    ('VALID_LINES', '0', CHOSEN, 'all 200'),
    ('TEST_LINES', '0', CHOSEN, 'all 200'),
    ('VOCAB', '57', CHOSEN, 'the most this text supports: a piece per word (measured)'),
    ('SPM_SENTENCES', '100000', CHOSEN, 'every sentence'),
    ('MAX_LEN', '250', CHOSEN, 'nothing is that long: no pair dropped'),
    ('LEN_RATIO', '1.5', CHOSEN, 'both sides have the same length: no pair dropped'),
    ('LR', '1e-3', CHOSEN, 'one rate for every method and depth, as Table 1'),
    ('WARMUP', '100', CHOSEN, 'inverse_sqrt warmup: a quarter of the run'),
    ('WARMUP_INIT_LR', '1e-7', CHOSEN, 'fairseq examples'),
    ('ADAM_BETAS', '(0.9, 0.98)', CHOSEN, 'the usual Transformer betas'),
    ('CLIP_NORM', '0.0', CHOSEN, 'no clipping: a method that needs it shows it'),
    ('WEIGHT_DECAY', '0.0', CHOSEN, 'none, over so short a run'),
    ('DROPOUT', '0.0', CHOSEN, 'a deterministic task: nothing to regularise'),
    ('LABEL_SMOOTHING', '0.0', CHOSEN, 'the plain cross-entropy: the losses compare with the '
                                       'source-blind baseline directly'),
    ('TOKENS_PER_UPDATE', '512', CHOSEN, 'small batches: many updates per CPU minute'),
    ('MAX_TOKENS', '512', CHOSEN, 'one process, update-freq 1'),
    ('MAX_UPDATE', '400', CHOSEN, 'updates per run: about 8 epochs'),
    ('MAX_EPOCH', '0', CHOSEN, 'MAX_UPDATE decides'),
    ('SAVE_INTERVAL_UPDATES', '100', CHOSEN, 'a validation and a checkpoint every 100 updates'),
    ('AVERAGE_LAST', '1', CHOSEN, 'the last checkpoint is decoded'),
    ('LOG_INTERVAL', '10', CHOSEN, 'a training line every 10 updates'),
    ('BEAM', '1', CHOSEN, 'greedy decoding: the task has one answer'),
    ('LENPEN', '1.0', CHOSEN, "fairseq's default"),
    ('MAX_LEN_A', '1.0', CHOSEN, 'the reversal is as long as the source ...'),
    ('MAX_LEN_B', '10', CHOSEN, '... give or take a few pieces'),
    ('TOKENIZED_BLEU', '0', CHOSEN, 'sacreBLEU of the reversals'),
    ('COMPOUND_SPLIT', '0', CHOSEN, 'no compounds'),
])

DATASET = Dataset(
    name="reverse_copy", about="Table 1's pattern at tiny scale, a generated reverse-copy task",
    languages="words -> the same words reversed", preset=PRESET, raw_text=raw_text,
    sources=("generate",), order=50,
    note="A generated task: the paper has no numbers for it. A run whose validation loss stays "
         "at the source-blind baseline has not learnt to read its source.")
