"""Training a run, above its data: the process layout and memory plan (layout.py, memory.py),
the commands (commands.py) and the TRAIN_ARGS policy (train_args.py), the train step with its
attempts, statuses and signals (runner.py), the run logs (runlog.py) and the length checks
(lengths.py). Machine probes (GPUs, cores, memory) are in ``base/machine.py``."""
