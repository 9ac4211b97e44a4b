"""Tables, plots and pages: the result table, CSV and plot (report.py), validation curves
(curves.py), the learning-rate transfer report (lr_transfer.py), results/README.md
(results_page.py) and the paper's reference numbers (paper.py)."""
