"""fairseq criterions of the plugin, registered when fairseq loads it:
``label_smoothed_cross_entropy_with_source_gain`` (``source_gain``: fairseq's
label-smoothed cross-entropy that also logs, at every validation, how much the source helps)."""

from . import source_gain  # noqa: F401  (registers the criterion)
