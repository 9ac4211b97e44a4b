"""Decoding and scoring, above the runs they evaluate: the evaluate step (step.py: checks, the
run's lock, the process), averaging checkpoints and decoding each direction (evaluate.py),
scoring with sacreBLEU and tokenized BLEU (score.py) and the distinct-output check
(distinct.py)."""
