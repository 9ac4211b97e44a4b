"""The model card (``README.md``) of a Hugging Face export (``deepnet-export --transformers``):
the metadata the Hub reads (languages, library, pipeline, tags) and what a user of the Hub
expects to find: the architecture and depth, the training data, the scores the recipes
measured, and how the model was exported.

What it says is read, not assumed: the model from the exported checkpoint; the training data
and the scores from the recipes' records of the run that holds the checkpoint
(``RUN/config.json``, ``RUN/eval/eval.json``), where there is one (a checkpoint trained outside
the recipes gets a card that says its data and scores are not recorded).
"""

import datetime
import os
from typing import Dict, List, Optional

from .storage.evaluations import current_evaluation
from .storage.records import read_record
from .storage.checkpoint_io import run_directories_of
from .storage.fileio import RecordError

# the settings of a run's record that say what it was trained on (the rest say how)
DATA_SETTINGS = ("SOURCE", "SIZE", "LANGS", "SRC", "TGT", "VOCAB", "TRAIN_LINES", "LOCAL_DIR")
PAPER = "DeepNet: Scaling Transformers to 1,000 Layers (Wang et al., 2022, arXiv:2203.00555)"


def run_records(checkpoint: str) -> Dict:
    """The run's config and eval records for CHECKPOINT, {} where it is not in a run of the
    recipes; a record that cannot be read is left out (the card says what it lacks)."""
    runs = run_directories_of(checkpoint)
    if len(runs) < 2:  # RUN/checkpoints/ and RUN/
        return {}
    run = runs[1]
    found = {"run": os.path.basename(run)}
    try:
        config = read_record(os.path.join(run, "config.json"), "run-config")
    except (RecordError, OSError):
        config = None
    if config:
        found["config"] = config
    try:  # through the one check of every reader: not the scores of checkpoints since replaced
        evaluation, stale = current_evaluation(run)
    except (RecordError, OSError) as err:
        evaluation, stale = None, f"its evaluation cannot be read ({err})"
    if evaluation:
        found["eval"] = evaluation
    if stale:
        found["eval_stale"] = stale
    return found


def scored_this_checkpoint(evaluation: Dict, updates: Optional[int]) -> Optional[bool]:
    """Whether EVALUATION scored the exported checkpoint itself (a checkpoint of the run at
    UPDATES updates): its one checkpoint, ``checkpoint_E_U.pt`` with U = UPDATES; False for an
    average of several; None where the evaluation does not record what it averaged."""
    scored = evaluation.get("checkpoints")
    if not scored:
        return None
    if len(scored) != 1 or updates is None:
        return False
    name = scored[0][:-len(".pt")] if scored[0].endswith(".pt") else scored[0]
    return name.split("_")[-1] == str(updates) or name == "checkpoint_last"


def parameters(weights: Dict) -> int:
    """Parameters of the model, each tensor counted once (tied embeddings share one)."""
    seen = {}
    for tensor in weights.values():
        seen.setdefault((tensor.data_ptr(), tensor.numel()), tensor.numel())
    return sum(seen.values())


# The Hub's ids of the corpora a SOURCE names (the shipped Multi30k); the text of a download or
# of a user's own files is named by no id here, and the card then claims none.
HUB_DATASETS = {"multi30k": "bentrevett/multi30k"}
# the Hub's licence field: a model's terms are its training data's (the code's MIT licence
# does not reach the weights), so the card says "other" and names them in its text
LICENSE = {"license": "other", "license_name": "terms-of-the-training-data"}


def hub_dataset(records: Dict) -> Optional[str]:
    config = records.get("config") or {}
    source = (config.get("settings", {}).get("SOURCE") or {}).get("value")
    return HUB_DATASETS.get(source)


def _model_index(records: Dict, updates: Optional[int], name: str) -> List[Dict]:
    """The Hub's ``model-index``: the scores of the exported checkpoint itself, one result per
    direction (sacreBLEU, chrF where measured), on the run's test set; none where the recorded
    scores are of other checkpoints (an average) or stale."""
    scores = records.get("eval") or {}
    if records.get("eval_stale") or not scored_this_checkpoint(scores, updates):
        return []
    dataset = hub_dataset(records) or (records.get("config") or {}).get("dataset", "unknown")
    results = []
    for pair, result in sorted(scores.get("directions", {}).items()):
        metrics = [{"type": "sacrebleu", "name": "sacreBLEU", "value": result["sacrebleu"],
                    "args": result.get("signature", "")}]
        if result.get("chrf") is not None:
            metrics.append({"type": "chrf", "name": "chrF", "value": result["chrf"],
                            "args": result.get("chrf_signature", "")})
        results.append({"task": {"type": "translation", "name": f"Translation {pair}"},
                        "dataset": {"type": dataset, "name": dataset, "split": "test",
                                    "args": pair},
                        "metrics": metrics})
    return [{"name": name, "results": results}] if results else []


def _front_matter(langs, records: Optional[Dict] = None, updates: Optional[int] = None,
                  name: str = "deepnet") -> List[str]:
    """The card's YAML metadata, written by PyYAML's emitter rather than by hand: it quotes
    what YAML 1.1 would read as something else (Norwegian's code ``no``, read bare, is the
    boolean false; ``on``, ``y``, ``null`` likewise), so every value reads back as written
    (huggingface_hub reads the card with PyYAML)."""
    import yaml

    records = records or {}
    metadata = {"language": list(dict.fromkeys(langs)), **LICENSE,
                "library_name": "transformers", "pipeline_tag": "translation",
                "tags": ["translation", "fairseq", "fsmt", "deepnet", "deepnorm"],
                "metrics": ["sacrebleu", "chrf"]}
    dataset = hub_dataset(records)
    if dataset:
        metadata["datasets"] = [dataset]
    index = _model_index(records, updates, name)
    if index:
        metadata["model-index"] = index
    text = yaml.safe_dump(metadata, sort_keys=False, default_flow_style=False,
                          allow_unicode=True)
    return ["---", *text.splitlines(), "---", ""]


def _licence(records: Dict) -> str:
    code = ("The code that trained and exported this model, deepnet_fairseq, is under the MIT "
            "licence; that licence does not cover the weights, which are made from the "
            "training data and carry its terms")
    if hub_dataset(records) == HUB_DATASETS["multi30k"]:
        return (code + ": Multi30k, the Multi30k project's translations of Flickr30k captions, "
                "distributed for research use. Read those terms before using the model for "
                "anything else.")
    return code + ". State them here before sharing the model (the metadata says `other`)."


def _training(records: Dict) -> List[str]:
    config = records.get("config")
    if not config:
        return ["Not recorded: the checkpoint is not in a run directory of the deepnet_fairseq "
                "recipes (or its `config.json` cannot be read), so its training data is "
                "whatever it was trained on; say so here before sharing it.", ""]
    settings = {name: item.get("value") for name, item in config.get("settings", {}).items()}
    lines = [f"Run `{records['run']}` of the deepnet_fairseq recipes, dataset "
             f"`{config.get('dataset', '?')}`:", ""]
    lines += [f"- `{name}`: {settings[name]}" for name in DATA_SETTINGS if settings.get(name)]
    return lines + ["", "Every setting the run trained with is in its `config.json` "
                        "(`python -m deepnet_fairseq.recipes DATASET train --dry-run` prints them "
                        "with where each came from).", ""]


def _scores(records: Dict, updates: Optional[int]) -> List[str]:
    scores = records.get("eval")
    if records.get("eval_stale"):
        return ["Not shown: the run's evaluation is of checkpoints the run no longer holds (it "
                "was trained since, or its evaluation cannot be read); evaluate the run again "
                "(the recipes' evaluate step) for its scores.", ""]
    if not scores or not scores.get("directions"):
        return ["No evaluation recorded for this run (the recipes' `evaluate.sh` writes one).",
                ""]
    itself = scored_this_checkpoint(scores, updates)
    if itself:
        what = "this checkpoint"
    elif itself is None:
        what = ("the run's last checkpoints, averaged (which ones the evaluation does not "
                "record): perhaps not this checkpoint, which scores somewhat differently")
    else:
        what = (f"the average of {', '.join(scores['checkpoints'])}, not this checkpoint, "
                "whose own score is not recorded (export the averaged model, or evaluate "
                "this checkpoint, for its score)")
    lines = ["The recipes' evaluation (fairseq-generate on the test set, detokenised "
             f"sacreBLEU) of {what}:", "",
             "| direction | sacreBLEU | chrF | tokenized BLEU | BLEU signature | chrF signature |",
             "|---|---|---|---|---|---|"]
    for pair, result in sorted(scores["directions"].items()):
        tok, chrf = result.get("tok_bleu"), result.get("chrf")
        lines.append(f"| {pair} | {result.get('sacrebleu', '')} | {'' if chrf is None else chrf} "
                     f"| {'' if tok is None else tok} | `{result.get('signature', '')}` | "
                     f"`{result.get('chrf_signature', '')}` |")
    return lines + [""]


def card_text(model_cfg: Dict, trained_arch: str, langs, weights: Dict, checkpoint: str,
              updates: Optional[int], transformers_version: str) -> str:
    """The README.md of the export of CHECKPOINT (its plain-transformer ``model_cfg``, the
    ``trained_arch`` it was trained as, its ``weights`` as exported)."""
    records = run_records(checkpoint)
    src, tgt = langs
    enc, dec = model_cfg["encoder_layers"], model_cfg["decoder_layers"]
    lines = _front_matter(langs, records, updates, records.get("run", trained_arch)) + [
        f"# {trained_arch}: {enc}-layer encoder, {dec}-layer decoder, {src} to {tgt}", "",
        f"A Post-LN Transformer trained with DeepNorm ({PAPER}) by the fairseq plugin "
        "deepnet_fairseq, exported as transformers' own `FSMTForConditionalGeneration`: "
        "DeepNorm's residual scale is folded into the weights, so the model is fairseq's plain "
        "transformer and needs no custom code (`trust_remote_code` is not used).", "",
        "## Model", "", "| | |", "|---|---|",
        f"| trained as | `{trained_arch}` (fairseq `--arch`) |",
        f"| layers | {enc} encoder, {dec} decoder |",
        f"| width, feed-forward, heads | {model_cfg['encoder_embed_dim']}, "
        f"{model_cfg['encoder_ffn_embed_dim']}, {model_cfg['encoder_attention_heads']} |",
        f"| parameters | {parameters(weights):,} |",
        f"| updates trained | {'' if updates is None else f'{updates:,}'} |", "",
        "## Training data", "", *_training(records),
        "## Evaluation", "", *_scores(records, updates),
        "## Use", "", "```python",
        "from transformers import AutoTokenizer, FSMTForConditionalGeneration", "",
        'tokenizer = AutoTokenizer.from_pretrained("PATH")',
        'model = FSMTForConditionalGeneration.from_pretrained("PATH")',
        'batch = tokenizer(["A sentence to translate."], return_tensors="pt")',
        "print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))",
        "```", "",
        "generate() searches as fairseq-generate does by default (beam 5, length penalty 1; "
        "`generation_config.json`).", "",
        "## Licence", "", _licence(records), "",
        "## Export", "",
        f"`deepnet-export {os.path.basename(checkpoint)} --transformers DIR` "
        f"({datetime.date.today().isoformat()}; tested with transformers "
        f"{transformers_version}). The export's logits equal the trained model's to float "
        "precision and its beam search gives fairseq-generate's translations "
        "(deepnet_fairseq's docs/deploying.md).", ""]
    return "\n".join(lines)
