"""What every stage of the recipes stands on: setting errors, the provenance of defaults,
machine probes (cores, GPUs, memory), console lines and the raw-text tools the datasets'
declarations fetch and read with. Imports nothing else of the recipes."""
