"""OPUS-100, the paper's Table 2 and Figure 8: one many-to-many model over the English-centric
pairs of the v1.0 release (LANGS), with a language token per language."""

import glob
import os
import re
from typing import List, Optional

from . import CHOSEN, MANY_PAIRS, PAPER, Dataset, Preset, Reference
from ..base.rawtext import (LocalText, PrepareError, copy_local, extract, fetch, find_local,
                            local_dir, split_limits)


def languages(cfg, supervised: Optional[str]) -> List[str]:
    langs = list(cfg.data.langs)
    if langs == ["all"]:
        if supervised is None:
            raise PrepareError("SOURCE=local needs LANGS, the languages to take from LOCAL_DIR")
        langs = sorted(re.sub(r"-?en-?", "", name, count=1) for name in os.listdir(supervised)
                       if os.path.isdir(os.path.join(supervised, name)))
    if not langs:
        raise PrepareError("LANGS is empty: name the non-English side of each pair, or all")
    if "en" in langs:
        raise PrepareError("LANGS lists the non-English side of each pair; drop 'en'")
    return langs


def raw_text(cfg, out: str, say) -> List[str]:
    """Every pair X-en of LANGS into OUT, from the release (SOURCE=download) or LOCAL_DIR."""
    supervised = None
    if cfg.text.data.source == "download":
        archive = fetch(cfg.text.data.opus_url, os.path.join(cfg.text.data.download_dir,
                                                      "opus-100-corpus-v1.0.tar.gz"), say)
        unpacked = extract(archive, os.path.join(cfg.text.data.download_dir, "opus-100"), say)
        found = sorted(glob.glob(os.path.join(unpacked, "**", "supervised"), recursive=True))
        if not found:
            raise PrepareError(f"no supervised/ directory in {archive}")
        supervised = found[0]
    pairs, files = [], []
    for x in languages(cfg, supervised):
        root = supervised or local_dir(cfg)
        for name in (f"{x}-en", f"en-{x}"):
            if os.path.isdir(os.path.join(root, name)):
                directory = os.path.join(root, name)
                break
        else:
            directory = root  # SOURCE=local may keep one pair's files at its top
        for split, stem, limit in split_limits(cfg):
            for lang in (x, "en"):
                if supervised:  # OPUS-100's names: opus.en-X-dev.X
                    name = f"opus.{os.path.basename(directory)}-{split.replace('valid', 'dev')}"
                else:
                    name = stem
                found_file = find_local(directory, f"{name}.{lang}")
                if found_file is None:
                    raise PrepareError(f"no {split} text for {lang} in {directory} (pair {x}-en)")
                files.append(LocalText(split, f"{x}-en", lang, found_file, limit))
        pairs.append(f"{x}-en")
    copy_local(files, out)  # every file checked against every other before the first copy
    return pairs


PRESET = Preset("dataset", "opus100", (
    "OPUS-100 (the paper's Table 2 and Figure 8): one many-to-many model over English-centric "
    'pairs.'
), [
    ('MODEL', 'base', PAPER, '512-2048-8 at every depth, up to 1000L (500L-500L)'),
    ('LANGS', 'all', PAPER, 'all 99 pairs of OPUS-100 v1.0 with English; or e.g. "de fr cs"'),
    ('DEPTHS', '6 12 24 50 100 250 500', CHOSEN,
     '12 to 1000 layers in all, the range of Figure 8 (points chosen)'),
    ('METHODS', 'deepnet', PAPER, 'Figure 8 is DeepNet; add pre_ln/post_ln for baselines'),
    ('VOCAB', '64000', CHOSEN, 'one joint sentencepiece model for 100 languages'),
    ('SPM_SENTENCES', '10000000', CHOSEN, 'sentences sampled to train sentencepiece'),
    ('TRAIN_LINES', '0', PAPER, '0 = every training pair (up to 1M per language pair)'),
    ('VALID_LINES', '0', PAPER, 'the official dev sets'),
    ('TEST_LINES', '0', PAPER, 'the official 2,000-sentence test sets'),
    ('MAX_LEN', '250', CHOSEN, 'drop pairs longer than 250 words'),
    ('LEN_RATIO', '3.0', CHOSEN, 'lenient: word counts differ a lot across scripts'),
    ('TEMPERATURE', '5', CHOSEN, 'temperature sampling over pairs, T=5 (common for OPUS-100)'),
    ('LR', '5e-4', CHOSEN, 'not given as text in the paper'),
    ('WARMUP', '4000', CHOSEN, 'inverse_sqrt warmup of the fairseq translation examples'),
    ('WARMUP_INIT_LR', '1e-7', CHOSEN, 'inverse_sqrt warmup from 1e-7 (fairseq examples)'),
    ('ADAM_BETAS', '(0.9, 0.98)', CHOSEN, 'Adam betas of the fairseq translation examples'),
    ('CLIP_NORM', '0.0', CHOSEN, 'no clipping, as the WMT-17 setting'),
    ('WEIGHT_DECAY', '0.0', CHOSEN, 'large data, no decay'),
    ('DROPOUT', '0.1', CHOSEN, 'large data: little regularisation needed'),
    ('LABEL_SMOOTHING', '0.1', CHOSEN,
     "the usual label smoothing of fairseq's translation examples"),
    ('TOKENS_PER_UPDATE', '262144', CHOSEN, '8 GPUs x 4096 tokens x update-freq 8'),
    ('MAX_UPDATE', '0', CHOSEN, '0 = no update limit (MAX_EPOCH decides)'),
    ('MAX_EPOCH', '4', PAPER, 'the 1000L model trained 4 epochs; chosen for every depth'),
    ('SAVE_INTERVAL_UPDATES', '5000', CHOSEN, 'a checkpoint about every hour on 8 GPUs ...'),
    ('AVERAGE_LAST', '5', CHOSEN, '... the last 5 averaged for evaluation, as for WMT-17'),
    ('BEAM', '5', CHOSEN, 'the paper does not state it as text'),
    ('LENPEN', '1.0', CHOSEN, "fairseq's default length penalty"),
    ('MAX_LEN_A', '1.2', CHOSEN,
     'hypotheses at most 1.2 x source + 10 tokens (fairseq WMT examples)'),
    ('MAX_LEN_B', '10', CHOSEN, 'with MAX_LEN_A'),
    ('OPUS_URL', 'https://object.pouta.csc.fi/OPUS-100/v1.0/opus-100-corpus-v1.0.tar.gz', PAPER,
     'the OPUS-100 v1.0 release (Zhang et al. 2020)'),
])


DATASET = Dataset(
    name="opus100", about="Table 2 and Figure 8, OPUS-100", languages="En<->99 languages (LANGS)",
    preset=PRESET, raw_text=raw_text, metric="sacrebleu_avg", task=MANY_PAIRS,
    check_local=local_dir, order=2, settings=("OPUS_URL",),
    paper=(  # Table 2, average BLEU over all directions (detokenised sacreBLEU). Its baseline
        # is Zhang et al. 2020's deep Transformer, which trains its depth with DS-Init (Zhang,
        # Titov & Sennrich 2019, the plugin's ds_init; their merged attention and
        # language-aware LayerNorm are not in the plugin)
        Reference("ds_init", 6, 6, 24.5, "baseline 12L"),
        Reference("ds_init", 12, 12, 26.2, "baseline 24L"),
        Reference("ds_init", 24, 24, 27.7, "baseline 48L"),
        Reference("deepnet", 100, 100, 31.1, "DeepNet 200L"),
        Reference("deepnet", 500, 500, 32.1, "DeepNet 1000L"),
    ),
    note="Paper numbers are averages over all 198 directions; the 1000L model trained 4 "
         "epochs. The paper's baseline (Zhang et al. 2020) is compared with ds_init, the "
         "depth-scaled initialisation it trains its depth with.")
