"""IWSLT-14 De-En, the paper's Figure 6: fairseq's mirror of the archive, the usual split
(valid: every 23rd training pair; test: dev2010, tst2010-2012, TEDx dev2012)."""

import glob
import os
import re

from . import CHOSEN, PAPER, Dataset, Preset
from ..base.rawtext import (PrepareError, extract, fetch, first, one_pair, read_lines, split_limits,
                            write_lines)

# the test set is these five files together, as in fairseq's example
TEST_SETS = ("IWSLT14.TED.dev2010", "IWSLT14.TED.tst2010", "IWSLT14.TED.tst2011",
             "IWSLT14.TED.tst2012", "IWSLT14.TEDX.dev2012")
VALID_EVERY = 23  # every 23rd training line is held out for validation

_MARKUP = re.compile(rb"^\s*<")
_SEG = re.compile(rb'<seg id="[0-9]*">\s*(.*?)\s*</seg>')


def download(cfg, src: str, tgt: str, out: str, say) -> None:
    pair = f"{src}-{tgt}"
    archive = fetch(cfg.text.data.iwslt_url,
                    os.path.join(cfg.text.data.download_dir, "de-en.tgz"), say)
    unpacked = extract(archive, os.path.join(cfg.text.data.download_dir, "de-en"), say)
    found = sorted(glob.glob(os.path.join(unpacked, "**", "train.tags.de-en.de"), recursive=True))
    if not found:
        raise PrepareError(f"train.tags.de-en.de not in {cfg.text.data.iwslt_url}")
    directory = os.path.dirname(found[0])
    limits = {split: limit for split, _, limit in split_limits(cfg)}
    for lang in (src, tgt):
        # training text: the lines that are not xml markup; every 23rd one for validation
        text = [line for line in read_lines(f"{directory}/train.tags.de-en.{lang}")
                if not _MARKUP.match(line)]
        held_out = [n % VALID_EVERY == 0 for n in range(1, len(text) + 1)]
        write_lines(f"{out}/train.{pair}.{lang}",
                    first((line for line, h in zip(text, held_out) if not h), limits["train"]))
        write_lines(f"{out}/valid.{pair}.{lang}",
                    first((line for line, h in zip(text, held_out) if h), limits["valid"]))
        test = (match.group(1) + b"\n" for name in TEST_SETS
                for line in read_lines(f"{directory}/{name}.de-en.{lang}.xml")
                for match in [_SEG.search(line)] if match)
        write_lines(f"{out}/test.{pair}.{lang}", first(test, limits["test"]))


PRESET = Preset("dataset", "iwslt14", (
    "IWSLT-14 De-En (the paper's Figure 6): a depth sweep that fits one GPU."
), [
    ('MODEL', 'iwslt', CHOSEN,
     "fairseq's IWSLT width 512-1024-4 (the figure's width is not restated here)"),
    ('SRC', 'de', PAPER, 'De->En'),
    ('TGT', 'en', PAPER, 'with SRC'),
    ('DEPTHS', '10 20 50 100', CHOSEN, 'layers per side, spanning the depths of Figure 6'),
    ('METHODS', 'deepnet post_ln pre_ln', PAPER,
     'Figure 6 compares DeepNet with Post-LN and Pre-LN'),
    ('VOCAB', '10000', CHOSEN, 'joint sentencepiece size for ~160k sentence pairs'),
    ('SPM_SENTENCES', '10000000', CHOSEN,
     'sentences sampled to train sentencepiece (every sentence of IWSLT-14)'),
    ('TRAIN_LINES', '0', CHOSEN, '0 = all'),
    ('VALID_LINES', '0', CHOSEN, 'with TRAIN_LINES'),
    ('TEST_LINES', '0', CHOSEN, 'with VALID_LINES'),
    ('MAX_LEN', '250', CHOSEN, 'drop pairs longer than 250 words (Moses clean-corpus custom)'),
    ('LEN_RATIO', '1.5', CHOSEN, 'drop pairs whose word-count ratio exceeds 1.5 (ditto)'),
    ('LR', '5e-4', CHOSEN, 'fairseq IWSLT recipe'),
    ('WARMUP', '4000', CHOSEN, "inverse_sqrt warmup of fairseq's IWSLT recipe"),
    ('WARMUP_INIT_LR', '1e-7', CHOSEN, 'inverse_sqrt warmup from 1e-7 (fairseq examples)'),
    ('ADAM_BETAS', '(0.9, 0.98)', CHOSEN, "Adam betas of fairseq's IWSLT recipe"),
    ('CLIP_NORM', '0.0', CHOSEN, "no clipping, as fairseq's IWSLT recipe"),
    ('WEIGHT_DECAY', '0.0001', CHOSEN, 'fairseq IWSLT recipe'),
    ('DROPOUT', '0.3', CHOSEN, 'fairseq IWSLT recipe (small data)'),
    ('LABEL_SMOOTHING', '0.1', CHOSEN, "label smoothing of fairseq's IWSLT recipe"),
    ('TOKENS_PER_UPDATE', '4096', CHOSEN, 'one GPU, 4096 tokens'),
    ('MAX_UPDATE', '50000', CHOSEN, 'about 70 epochs of IWSLT-14 at 4,096 tokens per update'),
    ('MAX_EPOCH', '0', CHOSEN, '0 = no epoch limit (MAX_UPDATE decides)'),
    ('SAVE_INTERVAL_UPDATES', '1000', CHOSEN, 'a checkpoint every 1,000 updates ...'),
    ('AVERAGE_LAST', '5', CHOSEN, '... the last 5 averaged for evaluation'),
    ('BEAM', '5', CHOSEN, "fairseq's usual beam"),
    ('LENPEN', '1.0', CHOSEN, "fairseq's default length penalty"),
    ('MAX_LEN_A', '1.2', CHOSEN,
     'hypotheses at most 1.2 x source + 10 tokens (fairseq WMT examples)'),
    ('MAX_LEN_B', '10', CHOSEN, 'with MAX_LEN_A'),
    ('TOKENIZED_BLEU', '0', CHOSEN, 'report detokenised sacreBLEU only'),
    ('COMPOUND_SPLIT', '0', CHOSEN, 'English target: no compounds to split'),
    ('IWSLT_URL', 'http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz', CHOSEN,
     "fairseq's mirror of the IWSLT-14 de-en archive"),
])


DATASET = Dataset(
    name="iwslt14", about="Figure 6, IWSLT-14 De-En (one GPU)", languages="De->En",
    preset=PRESET, raw_text=one_pair(download), metric="sacrebleu", order=3,
    settings=("IWSLT_URL",),
    note="Figure 6 gives BLEU as a plot only; no numbers to compare with.")
