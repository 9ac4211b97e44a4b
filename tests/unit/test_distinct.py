"""The distinct-hypotheses check of the quickstart and the recipes' evaluation."""

import pytest

from deepnet_fairseq.recipes.evaluation.distinct import (distinct_summary, ignores_source, main,
                                                       report)


COLLAPSED = ["Ein Mann in einem blauen Hemd steht auf einem Gehweg."] * 9 + ["Ein Hund läuft."]
TRANSLATING = [f"Satz Nummer {i}." for i in range(9)] + ["Satz Nummer 0."]


def test_counts_and_share_of_a_collapsed_model():
    summary = distinct_summary(COLLAPSED)
    assert summary == {"sentences": 10, "distinct": 2, "distinct_share": 0.2,
                       "most_frequent": COLLAPSED[0], "most_frequent_count": 9}
    assert ignores_source(summary)
    text = report(summary)
    assert "WARNING: 2 distinct hypotheses for 10 test sentences (20.0 %)" in text
    assert "written 9 times" in text and COLLAPSED[0] in text


def test_a_translating_model_passes_quietly():
    summary = distinct_summary(TRANSLATING)
    assert (summary["distinct"], summary["distinct_share"]) == (9, 0.9)
    assert not ignores_source(summary)
    assert report(summary) == "9 distinct hypotheses for 10 test sentences (90.0 %)"


def test_the_threshold_is_a_share_of_lines():
    summary = distinct_summary(["a", "b", "a", "b"])  # exactly half
    assert not ignores_source(summary, 0.5) and ignores_source(summary, 0.51)


def test_cli_exit_status_says_whether_the_source_is_ignored(tmp_path, capsys):
    collapsed, translating = tmp_path / "collapsed.txt", tmp_path / "ok.txt"
    collapsed.write_text("\n".join(COLLAPSED) + "\n", encoding="utf-8")
    translating.write_text("\n".join(TRANSLATING) + "\n", encoding="utf-8")
    assert main([str(collapsed)]) == 3
    assert "the model ignores its source" in capsys.readouterr().err
    assert main([str(translating)]) == 0
    assert main([str(collapsed), "--min-share", "0.1"]) == 0


@pytest.mark.parametrize("argv, message", [
    (["no/such/file"], "no/such/file"),
    (["{empty}"], "no hypotheses to count"),
    (["{empty}", "--min-share", "0"], "--min-share must be in (0, 1]"),
])
def test_cli_errors(tmp_path, capsys, argv, message):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(SystemExit) as stop:
        main([a.replace("{empty}", str(empty)) for a in argv])
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_counts_are_said_in_words_that_agree_with_them():
    from deepnet_fairseq.recipes.evaluation.distinct import counted, report

    assert counted(1, "distinct translation") == "1 distinct translation"  # the smoke model's
    assert counted(973, "distinct translation") == "973 distinct translations"
    one = {"distinct": 1, "sentences": 1, "distinct_share": 1.0, "most_frequent": "x",
           "most_frequent_count": 1}
    assert report(one) == "1 distinct hypothesis for 1 test sentence (100.0 %)"
