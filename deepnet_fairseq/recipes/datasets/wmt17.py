"""WMT-17 En-De, the paper's Table 1: statmt.org's training corpora, newstest2016 (dev) and
newstest2017 (test) through sacrebleu; fairseq's tokenized BLEU with compound splitting."""

import glob
import os
import shutil
import subprocess
from typing import List

from . import ADMIN, CHOSEN, PAPER, Dataset, Preset, Reference
from ..base.rawtext import (PrepareError, extract, fetch, first, one_pair, read_lines, split_limits,
                            write_lines)

# The training data (the statmt.org archives) and the corpora inside them
ARCHIVES = (
    "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
    "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
    "http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz",
    "http://data.statmt.org/wmt17/translation-task/rapid2016.tgz",
)
CORPORA = ("europarl-v7.de-en", "commoncrawl.de-en", "news-commentary-v12.de-en", "rapid2016.de-en")
DEV_TEST = (("valid", "wmt16"), ("test", "wmt17"))  # sacrebleu's names of newstest2016/2017


def sacrebleu_side(test_set: str, pair: str, side: str) -> List[bytes]:
    """A WMT dev or test side through sacrebleu, which checks its downloads' checksums."""
    if shutil.which("sacrebleu") is None:
        raise PrepareError("sacrebleu not found on PATH; run: bash scripts/install.sh")
    proc = subprocess.run(["sacrebleu", "-t", test_set, "-l", pair, "--echo", side],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode:
        raise PrepareError(f"sacrebleu -t {test_set} -l {pair} --echo {side} failed: "
                           f"{proc.stderr.decode('utf-8', 'replace').strip()[-300:]}")
    return [line + b"\n" for line in proc.stdout.split(b"\n")[:-1]]


def download(cfg, src: str, tgt: str, out: str, say) -> None:
    pair = f"{src}-{tgt}"
    downloads = cfg.text.data.download_dir
    for url in ARCHIVES:
        archive = fetch(url, os.path.join(downloads, os.path.basename(url)), say)
        extract(archive, archive[:-len(".tgz")], say)
    limits = {split: limit for split, _, limit in split_limits(cfg)}
    for lang in (src, tgt):
        files = []
        for corpus in CORPORA:
            found = sorted(glob.glob(os.path.join(downloads, "**", f"{corpus}.{lang}"),
                                     recursive=True))
            if not found:
                raise PrepareError(f"{corpus}.{lang} not found in the archives under {downloads}")
            files.append(found[0])
        write_lines(f"{out}/train.{pair}.{lang}",
                    first((line for path in files for line in read_lines(path)), limits["train"]))
        side = "src" if lang == src else "ref"
        for split, test_set in DEV_TEST:
            write_lines(f"{out}/{split}.{pair}.{lang}",
                        first(sacrebleu_side(test_set, pair, side), limits[split]))


PRESET = Preset("dataset", "wmt17", (
    "WMT-17 En-De (the paper's Table 1): data, optimisation, schedule and evaluation. Model "
    'width: MODEL; machine: DEVICE. [admin-torch]: the '
    "paper's own training setting, which the DeepNet authors shared with the Admin authors, who "
    'publish it in microsoft/admin-torch (example/README.md, "Comparison with original Admin '
    'and DeepNet on WMT\'17 En-De"; example/train_wmt_en-de_huge_batch.sh). They report that '
    'DeepNet at 100L-100L FAILS with a regular 8 x 4,096-token batch and trains with this 128 x '
    '4,096 one: keep TOKENS_PER_UPDATE at 524288 whatever the number of GPUs (the recipes raise '
    '--update-freq to keep it). That script also seeds 1111, uses --memory-efficient-fp16 and '
    '--threshold-loss-scale 0.0625, which the recipes do not.'
), [
    ('MODEL', 'base', PAPER, 'Table 1 models are 512-2048-8'),
    ('SRC', 'en', PAPER, 'En->De'),
    ('TGT', 'de', PAPER, 'with SRC'),
    ('DEPTHS', '6 18 50 100', PAPER, 'Table 1 columns, layers per side (6L-6L ... 100L-100L)'),
    ('METHODS', 'deepnet post_ln pre_ln', PAPER,
     'Table 1 rows available in deepnet_fairseq.methods'),
    ('VOCAB', '32000', CHOSEN, 'joint sentencepiece size usual for WMT En-De'),
    ('SPM_SENTENCES', '10000000', CHOSEN, 'sentences sampled to train sentencepiece'),
    ('TRAIN_LINES', '0', CHOSEN, '0 = all of the ~5.9M sentence pairs'),
    ('VALID_LINES', '0', PAPER, 'all of newstest2016'),
    ('TEST_LINES', '0', PAPER, 'all of newstest2017'),
    ('MAX_LEN', '250', CHOSEN, 'drop pairs longer than 250 words (Moses clean-corpus custom)'),
    ('LEN_RATIO', '1.5', CHOSEN, 'drop pairs whose word-count ratio exceeds 1.5 (ditto)'),
    ('LR', '1.5e-3', ADMIN, "the DeepNet authors' WMT-17 setting (see above): --lr 0.0015"),
    ('WARMUP', '4000', ADMIN, 'inverse_sqrt, --warmup-updates 4000 ...'),
    ('WARMUP_INIT_LR', '1e-7', ADMIN, '... from --warmup-init-lr 1e-07'),
    ('ADAM_BETAS', '(0.9, 0.98)', ADMIN, "--adam-betas '(0.9, 0.98)'"),
    ('CLIP_NORM', '0.0', ADMIN, '--clip-norm 0.0 (no clipping)'),
    ('WEIGHT_DECAY', '0.0001', ADMIN, '--weight-decay 0.0001'),
    ('DROPOUT', '0.4', ADMIN, '--dropout 0.4'),
    ('LABEL_SMOOTHING', '0.1', ADMIN, '--label-smoothing 0.1'),
    ('TOKENS_PER_UPDATE', '524288', ADMIN,
     '128 x 4,096 tokens per update (there: 8 GPUs x 2,048 x update-freq 32)'),
    ('MAX_UPDATE', '100000', ADMIN, '--max-update 100000'),
    ('FP16_SCALE_WINDOW', '256', ADMIN,
     'fp16 with --fp16-scale-window 256 (PRECISION=fp16 on CUDA)'),
    ('MAX_EPOCH', '0', CHOSEN, '0 = no epoch limit (MAX_UPDATE decides)'),
    ('SAVE_INTERVAL_UPDATES', '2000', CHOSEN, 'update checkpoints every 2000 updates ...'),
    ('AVERAGE_LAST', '5', CHOSEN, '... and the last 5 are averaged for evaluation'),
    ('BEAM', '5', CHOSEN, "fairseq's usual beam; the paper does not state its own as text"),
    ('LENPEN', '1.0', CHOSEN, 'fairseq default length penalty (ditto)'),
    ('MAX_LEN_A', '1.2', CHOSEN,
     'hypotheses at most 1.2 x source + 10 tokens (fairseq WMT examples)'),
    ('MAX_LEN_B', '10', CHOSEN, 'with MAX_LEN_A'),
    ('TOKENIZED_BLEU', '1', PAPER, "Table 1 reports fairseq's tokenized BLEU"),
    ('COMPOUND_SPLIT', '1', PAPER,
     "tokenized BLEU with compound splitting, fairseq's WMT En-De practice"),
])


DATASET = Dataset(
    name="wmt17", about="Table 1, WMT-17 En-De", languages="En->De", preset=PRESET,
    raw_text=one_pair(download), metric="tok_bleu", order=1,
    paper=(  # Table 1, BLEU (fairseq tokenized BLEU); None: diverged
        Reference("deepnet", 6, 6, 27.8, "DeepNet"),
        Reference("deepnet", 18, 18, 28.8, "DeepNet"),
        Reference("deepnet", 50, 50, 29.0, "DeepNet"),
        Reference("deepnet", 100, 100, 28.9, "DeepNet"),
        Reference("post_ln", 6, 6, 28.1, "Post-LN"),
        Reference("post_ln", 18, 18, None, "Post-LN"),
        Reference("post_ln", 50, 50, None, "Post-LN"),
        Reference("post_ln", 100, 100, None, "Post-LN"),
    ),
    note="Pre-LN: 27.0-28.1 across depths in the paper's Table 1 (per-depth values not "
         "transcribed here). Paper BLEU is fairseq's tokenized BLEU with compound splitting.")
