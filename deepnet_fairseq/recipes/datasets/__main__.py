"""python -m deepnet_fairseq.recipes.datasets: the table of datasets that docs/reproducing.md
shows (a test checks that it is current)."""

from . import markdown_table

print(markdown_table(), end="")
