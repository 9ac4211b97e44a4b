"""Your own parallel text: one language pair SRC-TGT from files you name, plain or gzipped.

    SRC=de TGT=en TRAIN_TEXT=/data/train VALID_TEXT=/data/valid TEST_TEXT=/data/test \
        bash scripts/parallel/prepare.sh      # reads /data/train.de, /data/train.en[.gz], ...

Prepare, train, evaluate and sweep are the other datasets' (the cleaning, the joint
sentencepiece model, fairseq-preprocess, the report); only the defaults below are this
dataset's: general-purpose Transformer settings for a corpus of unknown size, not a paper's.
``SOURCE=multi30k`` runs it on the corpus shipped with the package instead of your files.
"""

from . import CHOSEN, Dataset, Preset
from ..base.rawtext import one_pair

PRESET = Preset("dataset", "parallel", (
    "Your own parallel text, SRC->TGT: TRAIN_TEXT, VALID_TEXT and TEST_TEXT name the files "
    "(PATH.SRC and PATH.TGT, plain or .gz), or SOURCE=local LOCAL_DIR=... as for the other "
    "datasets. No value here is from the paper: fairseq's usual translation settings for a "
    "corpus of some 100k to a few million pairs, to revisit for yours."
), [
    ('SOURCE', 'local', CHOSEN,
     'your files (TRAIN_TEXT, VALID_TEXT, TEST_TEXT): nothing to download'),
    ('MODEL', 'base', CHOSEN, 'Transformer-base width 512-2048-8'),
    ('DEPTHS', '6 18 50', CHOSEN, 'layers per side, 12 to 100 layers in all'),
    ('METHODS', 'deepnet post_ln pre_ln', CHOSEN, "the paper's comparison, on your data"),
    ('VOCAB', '16000', CHOSEN, 'joint sentencepiece size for a mid-sized corpus'),
    ('SPM_SENTENCES', '10000000', CHOSEN, 'sentences sampled to train sentencepiece'),
    ('TRAIN_LINES', '0', CHOSEN, '0 = all'),
    ('VALID_LINES', '0', CHOSEN, 'with TRAIN_LINES'),
    ('TEST_LINES', '0', CHOSEN, 'with VALID_LINES'),
    ('MAX_LEN', '250', CHOSEN, 'drop pairs longer than 250 words (Moses clean-corpus custom)'),
    ('LEN_RATIO', '3.0', CHOSEN, 'lenient: any two languages, whose word counts may differ a lot'),
    ('LR', '5e-4', CHOSEN, 'fairseq translation examples'),
    ('WARMUP', '4000', CHOSEN, 'inverse_sqrt warmup of the fairseq translation examples'),
    ('WARMUP_INIT_LR', '1e-7', CHOSEN, 'inverse_sqrt warmup from 1e-7 (fairseq examples)'),
    ('ADAM_BETAS', '(0.9, 0.98)', CHOSEN, 'Adam betas of the fairseq translation examples'),
    ('CLIP_NORM', '0.0', CHOSEN, 'no clipping, as the WMT-17 setting'),
    ('WEIGHT_DECAY', '0.0001', CHOSEN, 'fairseq IWSLT recipe'),
    ('DROPOUT', '0.3', CHOSEN, 'a corpus smaller than WMT: more regularisation'),
    ('LABEL_SMOOTHING', '0.1', CHOSEN, "the usual label smoothing of fairseq's examples"),
    ('TOKENS_PER_UPDATE', '32768', CHOSEN, '8 x 4,096 tokens: one 8-GPU node, or update-freq'),
    ('MAX_UPDATE', '50000', CHOSEN, 'updates per run; raise it for a large corpus'),
    ('MAX_EPOCH', '0', CHOSEN, '0 = no epoch limit (MAX_UPDATE decides)'),
    ('SAVE_INTERVAL_UPDATES', '1000', CHOSEN, 'a checkpoint every 1,000 updates ...'),
    ('AVERAGE_LAST', '5', CHOSEN, '... the last 5 averaged for evaluation'),
    ('BEAM', '5', CHOSEN, "fairseq's usual beam"),
    ('LENPEN', '1.0', CHOSEN, "fairseq's default length penalty"),
    ('MAX_LEN_A', '1.2', CHOSEN, 'hypotheses at most 1.2 x source + 10 tokens'),
    ('MAX_LEN_B', '10', CHOSEN, 'with MAX_LEN_A'),
    ('TOKENIZED_BLEU', '0', CHOSEN, 'detokenised sacreBLEU, comparable across corpora'),
    ('COMPOUND_SPLIT', '0', CHOSEN, 'with TOKENIZED_BLEU'),
])

DATASET = Dataset(
    name="parallel", about="your own parallel text (no paper numbers)",
    languages="SRC->TGT, yours", preset=PRESET, raw_text=one_pair(),
    sources=("local", "multi30k"),
    note="Your own corpus: the paper has no numbers for it.")
