"""Decoding and scoring: averaging checkpoints and decoding each direction (evaluate.py),
scoring with sacreBLEU and tokenized BLEU (score.py) and the distinct-output check
(distinct.py)."""
