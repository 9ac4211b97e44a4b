"""results/README.md is the one page of results tables, generated from the committed CSVs by
``python -m deepnet_fairseq.recipes.reporting.results_page``: the committed page is what the
CSVs give, and a changed CSV changes the page (and makes ``--check`` fail until it is
regenerated)."""

import csv
import os
import shutil

import pytest

from deepnet_fairseq.recipes.reporting import report, results_page
from support import REPO

RESULTS = os.path.join(REPO, "results")


@pytest.fixture
def results(tmp_path):
    """A copy of the committed results directory."""
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    return copy


def _committed():
    with open(os.path.join(RESULTS, "README.md"), encoding="utf-8") as f:
        return f.read()


def test_the_committed_results_page_is_what_the_csvs_give(results):
    (results / "README.md").unlink()
    assert results_page.main(["--results", str(results)]) == 0
    assert (results / "README.md").read_text(encoding="utf-8") == _committed(), (
        "results/README.md is stale: run python -m deepnet_fairseq.recipes.reporting.results_page")


def test_a_changed_csv_row_changes_the_page_and_fails_the_check(results):
    assert results_page.main(["--results", str(results), "--check"]) == 0
    path = results / "table1-mini" / "results.csv"
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    (row,) = [r for r in rows if r["run"] == "deepnet-50L-50L"]
    assert row["bleu"] == "14.15"
    row["bleu"] = "15.15"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert results_page.main(["--results", str(results), "--check"]) == 1
    page = results_page.page(str(results))
    assert "| 15.15 |" in page and "| 14.15 |" not in page
    assert results_page.main(["--results", str(results)]) == 0
    assert results_page.main(["--results", str(results), "--check"]) == 0


def test_the_grid_is_the_reports_cells_with_the_papers_numbers_beside():
    rows = results_page.read_report_csv(os.path.join(RESULTS, results_page.TABLE1))
    # the rows read back from the CSV give the report's own table.md, as the sweep wrote it
    with open(os.path.join(RESULTS, "table1-mini", "table.md"), encoding="utf-8") as f:
        assert report.markdown("wmt17", rows) == f.read()
    grid = results_page.table1_grid(rows)
    (deepnet,) = [line for line in grid.splitlines() if "**DeepNet**" in line]
    assert "| 10.76 ± 1.12 (3 seeds) |" in deepnet
    assert deepnet.endswith("| 27.8 / 28.8 / 29.0 / 28.9 |")
    assert "(LR=" not in grid  # the probes have a table of their own


def test_a_new_results_folder_is_listed_with_its_readme(results):
    (results / "new-study").mkdir()
    (results / "new-study" / "README.md").write_text("# A new study\n", encoding="utf-8")
    assert "- [new-study/](new-study/README.md)." in results_page.page(str(results))


def test_a_missing_csv_is_one_error(results, capsys):
    (results / "depth-transfer" / "lr_transfer.csv").unlink()
    with pytest.raises(SystemExit) as stop:
        results_page.main(["--results", str(results)])
    assert stop.value.code == 2 and "lr_transfer.csv" in capsys.readouterr().err
