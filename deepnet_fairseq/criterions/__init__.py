"""fairseq criterions of the plugin, registered when fairseq loads it (``register``):
``label_smoothed_cross_entropy_with_source_gain`` (``source_gain``: fairseq's
label-smoothed cross-entropy that also logs, at every validation, how much the source helps).
Their names are here, importable without fairseq (the recipes build command lines with them)."""

SOURCE_GAIN = "label_smoothed_cross_entropy_with_source_gain"
