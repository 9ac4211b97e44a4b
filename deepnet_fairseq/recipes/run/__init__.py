"""Launching and running steps: the process layout and commands (launch.py), train, evaluate
and sweep (runner.py), the run logs (runlog.py), the memory plan (memory.py) and GPU counting
(devices.py)."""
