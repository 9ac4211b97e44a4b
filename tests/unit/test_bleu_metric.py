"""The paper's metric, exactly (docs/evaluation.md): tokenized BLEU processes hypotheses and
references the same way, sacreBLEU takes the raw references, cleaning keeps format
characters. Hand-made cases; every expected value is written out by hand."""

import math
import unicodedata

import pytest

from deepnet_fairseq.recipes.data import clean
from deepnet_fairseq.recipes.data.clean import dropped
from deepnet_fairseq.recipes.evaluation import score


ZWNJ = "\u200c"
# Persian "I want": mi + ZWNJ + khaham (the ZWNJ keeps the prefix joined-looking, unconnected)
MIKHAHAM = "\u0645\u06cc" + ZWNJ + "\u062e\u0648\u0627\u0647\u0645"


def generate_output(path, hypotheses):
    path.write_text("".join(f"S-{i}\tsource {i}\nH-{i}\t-0.5\t{h}\nD-{i}\t-0.5\t{h}\n"
                            for i, h in enumerate(hypotheses)), encoding="utf-8")
    return str(path)


def references(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


# ---- cleaning -------------------------------------------------------------------------------

def test_a_zwnj_word_survives_cleaning_unchanged():
    assert clean.normaliser("fa")(MIKHAHAM + "\n") == MIKHAHAM
    assert clean.normaliser("fa")("من " + MIKHAHAM + " .") == "من " + MIKHAHAM + " ."


# "I want to go home", "I want bread", "you want water": each word several times, so that a
# small vocabulary holds pieces of them
PERSIAN = ["\u0645\u0646 {} \u0628\u0647 \u062e\u0627\u0646\u0647 \u0628\u0631\u0648\u0645 .",
           "\u0645\u0646 {} \u0646\u0627\u0646 .", "\u062a\u0648 {} \u0622\u0628 ."]


@pytest.mark.parametrize("rule, kept", [("nfkc", True), ("nmt_nfkc", False)])
def test_a_zwnj_survives_sentencepiece_with_the_recipes_normalisation(tmp_path, rule, kept):
    # the recipes' rule (spm.NORMALIZATION, nfkc) keeps the ZWNJ in the pieces, so decoding
    # gives the word back; sentencepiece's default, nmt_nfkc, turns it into a word boundary
    from deepnet_fairseq import spm
    import sentencepiece

    corpus = tmp_path / "train.fa"
    corpus.write_text("".join(line.format(MIKHAHAM) + "\n" for line in PERSIAN) * 50,
                      encoding="utf-8")
    # the vocabulary: the most this text supports (and as many as its characters need)
    spm.train([str(corpus)], str(tmp_path / "spm"), 19, normalization=rule)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
    sentence = PERSIAN[0].format(MIKHAHAM)
    pieces = processor.encode(sentence, out_type=str)
    if rule == "nfkc":  # the recipes' default
        assert spm.NORMALIZATION == rule
        spm.train([str(corpus)], str(tmp_path / "default"), 19)
        default = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "default.model"))
        assert default.encode(sentence, out_type=str) == pieces
    decoded = processor.decode(pieces)
    assert (ZWNJ in "".join(pieces)) is kept
    assert (decoded == sentence) is kept
    if not kept:
        assert decoded == PERSIAN[0].format(MIKHAHAM.replace(ZWNJ, " "))


@pytest.mark.parametrize("raw, cleaned", [
    ("a\u200db", "a\u200db"),          # ZWJ (Cf): kept
    ("\u200fabc", "\u200fabc"),        # right-to-left mark (Cf): kept
    ("\ue000x", "\ue000x"),            # private use (Co): kept
    ("\U000e0080x", "\U000e0080x"),    # unassigned (Cn): kept
    ("a\x07b\x1bc\x00d", "abcd"),      # BEL, ESC, NUL (Cc): removed
    ("a\u0085b", "ab"),                # NEL, a C1 control (Cc): removed
    ("a\tb\r\n", "a b"),               # tab: a space, as all whitespace; CR LF: removed
    ("\ufeffDer Hund", "Der Hund"),    # byte order mark (Cf, but never text): removed
])
def test_which_characters_cleaning_keeps(raw, cleaned):
    assert clean.normaliser("de")(raw) == cleaned


# ---- tokenized BLEU: both sides processed alike ---------------------------------------------

def test_german_quotes_are_normalised_on_both_sides():
    # „…“ and »…« in a reference, "…" in a hypothesis (what a model trained on normalised text
    # writes): the same tokens once both sides are processed
    expected = 'Er sagte : " Hallo " .'
    assert score.tokenize(['Er sagte: „Hallo“.'], "de", False) == [expected]
    assert score.tokenize(['Er sagte: »Hallo«.'], "de", False) == [expected]
    assert score.tokenize(['Er sagte: "Hallo".'], "de", False) == [expected]


def test_quote_style_alone_costs_no_tokenized_bleu_but_costs_sacrebleu(tmp_path):
    gen = generate_output(tmp_path / "gen.txt", ['Er sagte: "Hallo".'])
    ref = references(tmp_path / "ref.de", ['Er sagte: „Hallo“.'])
    result = score.score_direction(gen, ref, "de", tokenized=True, compound_split=True)
    assert result["tok_bleu"] == 100.0
    assert result["tok_bleu_kind"] == "normalised, moses-tokenized, compound-split"
    # sacreBLEU compares with the raw reference: its tokeniser leaves „Hallo“ one token
    assert result["sacrebleu"] < 50


def test_a_compound_is_split_on_both_sides():
    assert score.tokenize(["Die Fußball-Weltmeisterschaft beginnt."], "de", True) == [
        "Die Fußball ##AT##-##AT## Weltmeisterschaft beginnt ."]
    assert score.tokenize(["Die Fußball-Weltmeisterschaft beginnt."], "de", False) == [
        "Die Fußball-Weltmeisterschaft beginnt ."]


def test_tokenized_bleu_of_two_sentences_by_hand(tmp_path):
    gen = generate_output(tmp_path / "gen.txt", ["Die Fußball-Weltmeisterschaft beginnt heute.",
                                                 'Er sagte: "Wir verlieren."'])
    ref = references(tmp_path / "ref.de", ["Die Fußball-Weltmeisterschaft beginnt.",
                                           "Er sagte: „Wir gewinnen.“"])
    # processed (normalised, tokenised, compounds split):
    #   hyp 1  Die Fußball ##AT##-##AT## Weltmeisterschaft beginnt heute .   (7 tokens)
    #   ref 1  Die Fußball ##AT##-##AT## Weltmeisterschaft beginnt .         (6)
    #   hyp 2  Er sagte : " Wir verlieren . "                                (8)
    #   ref 2  Er sagte : " Wir gewinnen . "                                 (8)
    # matched / hypothesis n-grams, sentence 1 + sentence 2:
    #   1-grams 6/7 + 7/8   2-grams 4/6 + 5/7   3-grams 3/5 + 3/6   4-grams 2/4 + 2/5
    # hypothesis 15 tokens >= reference 14: no brevity penalty
    precisions = [13 / 15, 9 / 13, 6 / 11, 4 / 9]
    by_hand = 100 * math.exp(sum(math.log(p) for p in precisions) / 4)
    assert round(by_hand, 2) == 61.76
    result = score.score_direction(gen, ref, "de", tokenized=True, compound_split=True)
    assert result["tok_bleu"] == pytest.approx(by_hand, abs=0.005)


def test_tokenized_bleu_agrees_with_sacrebleu_on_hand_tokenised_text(tmp_path):
    import sacrebleu

    gen = generate_output(tmp_path / "gen.txt", ["Die Fußball-Weltmeisterschaft beginnt heute.",
                                                 'Er sagte: "Wir verlieren."'])
    ref = references(tmp_path / "ref.de", ["Die Fußball-Weltmeisterschaft beginnt.",
                                           "Er sagte: „Wir gewinnen.“"])
    hand_hyp = ["Die Fußball ##AT##-##AT## Weltmeisterschaft beginnt heute .",
                'Er sagte : " Wir verlieren . "']
    hand_ref = ["Die Fußball ##AT##-##AT## Weltmeisterschaft beginnt .",
                'Er sagte : " Wir gewinnen . "']
    independent = sacrebleu.corpus_bleu(hand_hyp, [hand_ref], tokenize="none", force=True)
    result = score.score_direction(gen, ref, "de", tokenized=True, compound_split=True)
    assert result["tok_bleu"] == round(independent.score, 2)


def test_sacrebleu_keeps_a_zwnj_inside_its_word(tmp_path):
    # "I want to go home .": sacreBLEU's 13a tokeniser splits ASCII punctuation only, so the
    # ZWNJ word is one token; a hypothesis with a space in its place has two other tokens
    sentence = "\u0645\u0646 {} \u0628\u0647 \u062e\u0627\u0646\u0647 \u0628\u0631\u0648\u0645 ."
    ref = references(tmp_path / "ref.fa", [sentence.format(MIKHAHAM)])
    same = score.score_direction(generate_output(tmp_path / "a.txt", [sentence.format(MIKHAHAM)]),
                                 ref, "fa", tokenized=False, compound_split=False)
    assert same["sacrebleu"] == 100.0
    spaced = sentence.format(MIKHAHAM.replace(ZWNJ, " "))
    lost = score.score_direction(generate_output(tmp_path / "b.txt", [spaced]), ref, "fa",
                                 tokenized=False, compound_split=False)
    # 7 hypothesis tokens against 6: n-grams matched 5/7, 3/6, 2/5, 1/4; no brevity penalty
    by_hand = 100 * (5 / 7 * 3 / 6 * 2 / 5 * 1 / 4) ** 0.25
    assert lost["sacrebleu"] == round(by_hand, 2) == 43.47


# ---- references read as the hypotheses are --------------------------------------------------

# "Grüße aus Köln" with its umlauts decomposed (NFD, as macOS writes text), a sentence with a
# BOM in front, one with a CRLF line end, one with a lone CR inside: all the text perfect
# hypotheses (NFKC, as sentencepiece decodes) spell
REFERENCE_BYTES = ("\ufeffEin Hund läuft durch den Schnee .\r\n"
                   + unicodedata.normalize("NFD", "Grüße aus Köln , sagte er .") + "\n"
                   + "Zwei Männer\r arbeiten .\n").encode("utf-8")
PERFECT = ["Ein Hund läuft durch den Schnee .", "Grüße aus Köln , sagte er .",
           "Zwei Männer arbeiten ."]


@pytest.mark.parametrize("tokenized", [False, True])
def test_perfect_hypotheses_score_100_on_bom_nfd_and_crlf_references(tmp_path, tokenized):
    ref = tmp_path / "ref.de"
    ref.write_bytes(REFERENCE_BYTES)
    gen = generate_output(tmp_path / "gen.txt", [unicodedata.normalize("NFKC", h) for h in PERFECT])
    result = score.score_direction(gen, str(ref), "de", tokenized=tokenized, compound_split=False)
    assert result["sentences"] == 3  # the lone CR splits no line
    assert result["sacrebleu"] == 100.0
    if tokenized:
        assert result["tok_bleu"] == 100.0


# every character that cleaning removes from what the model reads (clean.dropped), but the line
# end itself: found by scanning the code points, not listed by hand
DROPPED = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and chr(c) != "\n"
           and dropped(chr(c))]


@pytest.mark.parametrize("ch", DROPPED, ids=lambda ch: f"U+{ord(ch):04X}")
def test_a_character_cleaning_removes_costs_no_bleu_inside_a_reference(tmp_path, ch):
    """A NUL or ESC inside a reference stayed in it while cleaning removed it from the model's
    side: perfect translations scored 99.58. References are read as the hypotheses are."""
    ref = tmp_path / "ref.de"
    ref.write_text(f"Ein Hund{ch} läuft durch den Schnee .\nZwei {ch}Männer arbeiten{ch} .\n",
                   encoding="utf-8")
    gen = generate_output(tmp_path / "gen.txt", ["Ein Hund läuft durch den Schnee .",
                                                 "Zwei Männer arbeiten ."])
    result = score.score_direction(gen, str(ref), "de", tokenized=False, compound_split=False)
    assert result["sacrebleu"] == 100.0


# ---- chrF, paired bootstrap, seed intervals -----------------------------------------------

def _damaged(lines, drop, seed):
    import random

    rng = random.Random(seed)
    return [" ".join(w for w in line.split() if rng.random() > drop) for line in lines]


def _shipped_references(count=300):
    import gzip
    import os

    from deepnet_fairseq.corpora import multi30k_dir

    path = os.path.join(multi30k_dir(), "test_2016_flickr.de.gz")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle][:count]


def test_chrf_is_sacrebleus_chrf_with_its_signature(tmp_path):
    """The scorer's chrF is sacrebleu's corpus_chrf (the metric's own function) of the same
    detokenised lines; 100 for a perfect copy; averaged over directions."""
    import sacrebleu

    refs = _shipped_references(50)
    hyps = _damaged(refs, 0.3, 1)
    scored = score.score_direction(generate_output(tmp_path / "g.txt", hyps),
                                   references(tmp_path / "r.txt", refs), "de", False, False)
    assert scored["chrf"] == round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2)
    assert scored["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no")
    perfect = score.score_direction(generate_output(tmp_path / "p.txt", refs),
                                    references(tmp_path / "r.txt", refs), "de", False, False)
    assert perfect["chrf"] == 100.0
    summary = score.summarise({"en-de": scored, "en-fr": perfect})
    assert summary["chrf_avg"] == round((scored["chrf"] + 100.0) / 2, 2)


def test_paired_bootstrap_is_sacrebleus_own_command_line(tmp_path, capfd, monkeypatch):
    """The recipes' paired bootstrap against the sacrebleu command's --paired-bs on the same
    files (its text table: scores, bootstrap means and intervals to 1 decimal, p to 4), on 300
    shipped references and two damaged copies of them."""
    import os
    import sys

    from sacrebleu import sacrebleu as cli

    from deepnet_fairseq.recipes.evaluation import significance

    refs = _shipped_references()
    a, b = _damaged(refs, 0.3, 0), _damaged(refs, 0.25, 1)
    ours = significance.paired_bootstrap(a, b, refs, samples=500, seed=7)
    files = {}
    for name, lines in (("ref", refs), ("a", a), ("b", b)):
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setenv("SACREBLEU_SEED", "7")
    monkeypatch.setattr(sys, "argv", ["sacrebleu", str(files["ref"]), "-i", str(files["a"]),
                                      str(files["b"]), "-m", "bleu", "chrf", "--paired-bs",
                                      "--paired-bs-n", "500", "-f", "text"])
    # it reopens stdin and stdout on their file descriptors: both restored after it, and its
    # table read from the descriptor (capfd)
    with open(os.devnull, encoding="utf-8") as nothing:
        monkeypatch.setattr(sys, "stdin", nothing)
        monkeypatch.setattr(sys, "stdout", sys.stdout)
        try:
            cli.main()
        except SystemExit as stop:
            assert not stop.code
        finally:
            sys.stdout.flush()
    table = capfd.readouterr().out
    import re

    # its cells row by row: baseline BLEU, baseline chrF, system BLEU, system chrF (score,
    # bootstrap mean, 95% half width, 1 decimal); then the system's p values (4 decimals)
    cells = [tuple(map(float, m)) for m in re.findall(r"(\d+\.\d) \((\d+\.\d) ± (\d+\.\d)\)",
                                                      table)]
    p_values = [float(p) for p in re.findall(r"\(p = (\d\.\d{4})\)", table)]
    metrics = [ours["metrics"]["BLEU"], ours["metrics"]["chrF2"]]
    expected = [(r[side], *r[f"{side}_ci"]) for side in ("baseline", "system") for r in metrics]
    assert len(cells) == 4 and len(p_values) == 2, table
    for got, want in zip(cells, expected):
        assert got == pytest.approx(want, abs=0.051), table
    assert p_values == pytest.approx([r["p"] for r in metrics], abs=1e-4), table
    assert ours["metrics"]["BLEU"]["difference"] > 0 and ours["metrics"]["BLEU"]["p"] < 0.05
    # two halves of one damage level: a small difference, not significant
    c = a[:150] + _damaged(refs[150:], 0.3, 2)
    near = significance.paired_bootstrap(a, c, refs, samples=200)
    assert abs(near["metrics"]["BLEU"]["difference"]) < 2 and near["metrics"]["BLEU"]["p"] > 0.05
    with pytest.raises(ValueError, match="not the same test set"):
        significance.paired_bootstrap(a, b[:-1], refs)


def test_seed_interval_is_the_student_t_interval_by_hand():
    from deepnet_fairseq.recipes.evaluation.significance import seed_interval

    # 20.1, 21.3, 19.8: mean 20.4, s = sqrt(((-0.3)^2 + 0.9^2 + (-0.6)^2) / 2) = sqrt(0.63),
    # half width t(0.975, 2) = 4.303 times s / sqrt(3)
    got = seed_interval([20.1, 21.3, 19.8])
    assert got["n"] == 3 and got["mean"] == pytest.approx(20.4)
    assert got["sd"] == pytest.approx(math.sqrt(0.63))
    assert got["half_width"] == pytest.approx(4.303 * math.sqrt(0.63) / math.sqrt(3))
    assert seed_interval([5.0]) == {"n": 1, "mean": 5.0, "sd": None, "half_width": None}
    with pytest.raises(ValueError):
        seed_interval([])
