"""``deepnet-export CHECKPOINT --transformers DIR``: the exported plain fairseq Post-LN
``transformer`` (export.export, DeepNorm's alpha already folded) as a Hugging Face
``transformers`` model directory that transformers loads with its own classes (no code of this
plugin, no ``trust_remote_code``):

    config.json, model.safetensors   FSMTForConditionalGeneration (model_type "fsmt")
    README.md                        the model card (hf_card): languages, architecture and
                                     depth, training data and scores from the run's records
    generation_config.json           fairseq-generate's defaults: beam 5, lenpen 1, max_len_b 200
    vocab.json, source.spm, ...      MarianTokenizer: sentencepiece, then fairseq's dictionary

**The model class.** FSMT is transformers' port of fairseq's ``transformer``: the same Post-LN
layers with the same module names (``self_attn``, ``encoder_attn``, ``fc1``, ``fc2``, the three
LayerNorms, eps 1e-5), no final LayerNorm, fairseq's sinusoidal positions (sin | cos halves,
positions counted from padding_idx + 1, padding ignored, so left-padded batches work too),
embeddings scaled by sqrt(d) (``scale_embedding``), separate source and target vocabularies,
an output projection without bias, and decoding started with ``</s>`` (id 2) as fairseq does.
The weights map name for name (``model.`` + fairseq's key). Marian, the other fairseq-like
class, has another sinusoid (other frequencies, positions from 0 whatever the padding).
FSMT builds the decoder's causal mask only without its cache: config.json says
``use_cache: false`` (a forward over whole target prefixes is right), generation_config.json
``use_cache: true`` (generate() keeps its cache).

**Beam search.** generation_config.json gives generate() fairseq-generate's search: the best
hypothesis is fairseq's (tests/unit/test_hf_export.py). Not the same: the rest of the n-best
list where more hypotheses finish at the step that fills it (fairseq keeps the first,
transformers the best scoring), and the score of a hypothesis cut at max_len_b (fairseq adds
the log-probability of the forced ``</s>``, transformers 0). docs/deploying.md has the numbers.

**The tokenizer.** FSMT's own tokenizer is Moses + subword-nmt BPE, not sentencepiece.
``MarianTokenizer`` (transformers' own class, chosen in ``tokenizer_config.json``, loaded by
AutoTokenizer) does what fairseq does with ``--bpe sentencepiece``: the sentencepiece library
splits the text into pieces, each piece is looked up in a vocabulary file (here fairseq's
dictionary, ``dict.LANG.txt`` with its four special symbols first), a piece the dictionary
lacks becomes ``<unk>`` (id 3), and ``</s>`` is appended. Decoding joins the pieces with
sentencepiece. Separate source and target dictionaries become ``vocab.json`` and
``target_vocab.json`` (``separate_vocabs``). Without a sentencepiece model (``--bpe
sentencepiece`` in the checkpoint, or ``--sentencepiece-model``) no tokenizer is written.

**Refused**, with the reason and nothing written: every fairseq option FSMT does not compute
(Pre-LN, learned or no positions, layernorm_embedding, adaptive softmax or input,
NormFormer's scales, cross-self-attention, differing encoder/decoder widths, activations
other than relu and gelu, ...) and tasks other than translation.
"""

import json
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from .storage.checkpoint_io import ExportError, load_dictionary, task_field
from .storage.fileio import create_new, directory_published, scratch_directory

# the transformers release the export is tested with (constraints.txt pins it)
TESTED_TRANSFORMERS = "5.24.0"

# fairseq-generate's defaults, which generation_config.json reproduces (--max-len-a 0: the
# longest output does not depend on the source's length)
BEAM, LENPEN, MAX_LEN_B, MIN_LEN = 5, 1.0, 200, 1

# fairseq's activation_fn -> transformers' ACT2FN name computing the same function
ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}

# fairseq model options (true / set) that FSMT has no counterpart for
UNSUPPORTED_FLAGS = {
    "encoder_normalize_before": "--encoder-normalize-before (Pre-LN)",
    "decoder_normalize_before": "--decoder-normalize-before (Pre-LN)",
    "layernorm_embedding": "--layernorm-embedding",
    "no_token_positional_embeddings": "--no-token-positional-embeddings",
    "encoder_learned_pos": "--encoder-learned-pos",
    "decoder_learned_pos": "--decoder-learned-pos",
    "adaptive_input": "--adaptive-input",
    "adaptive_softmax_cutoff": "--adaptive-softmax-cutoff",
    "cross_self_attention": "--cross-self-attention",
    "no_cross_attention": "--no-cross-attention",
    "merge_src_tgt_embed": "--merge-src-tgt-embed",
    "scale_attn": "--scale-attn", "scale_fc": "--scale-fc", "scale_heads": "--scale-heads",
    "scale_resids": "--scale-resids",
    "encoder_layers_to_keep": "--encoder-layers-to-keep",
    "decoder_layers_to_keep": "--decoder-layers-to-keep",
}

TASKS = ("translation", "translation_monitored")  # the latter: translation plus monitors

# state-dict entries of fairseq's transformer that hold no weights
NOT_WEIGHTS = (".version", "._float_tensor")


def transformers_classes():
    """(FSMTConfig, FSMTForConditionalGeneration, GenerationConfig, MarianTokenizer, save_file),
    or ExportError naming the missing package."""
    try:
        from safetensors.torch import save_file
        from transformers import (FSMTConfig, FSMTForConditionalGeneration, GenerationConfig,
                                  MarianTokenizer)
    except ImportError as err:
        raise ExportError(
            f"--transformers needs transformers (with FSMT, e.g. {TESTED_TRANSFORMERS}) and "
            f"safetensors ({err}): pip install 'deepnet_fairseq[deploy]' (or bash "
            f"scripts/install.sh)")
    return FSMTConfig, FSMTForConditionalGeneration, GenerationConfig, MarianTokenizer, save_file


def problems(model_cfg: Dict, task_cfg: Dict) -> List[str]:
    """What FSMT does not compute of these fairseq options (empty: it computes all)."""
    found = [flag for name, flag in UNSUPPORTED_FLAGS.items() if model_cfg.get(name)]
    activation = model_cfg.get("activation_fn", "relu")
    if activation not in ACTIVATIONS:
        found.append(f"--activation-fn {activation} (FSMT: {', '.join(ACTIVATIONS)})")
    width = model_cfg.get("encoder_embed_dim")
    for name in ("decoder_embed_dim", "decoder_input_dim", "decoder_output_dim"):
        if model_cfg.get(name, width) != width:
            found.append(f"--{name.replace('_', '-')} {model_cfg.get(name)} != "
                         f"--encoder-embed-dim {width} (FSMT has one width)")
    for side in ("encoder", "decoder"):
        heads = model_cfg.get(f"{side}_attention_heads")
        dim = model_cfg.get(f"{side}_embed_dim", width)
        if heads and dim and dim % heads:
            found.append(f"--{side}-embed-dim {dim} is not a multiple of its {heads} heads")
    task = task_field(task_cfg, "_name")
    if task not in TASKS:
        found.append(f"--task {task} (FSMT translates one language pair: --task translation)")
    return found


def languages(task_cfg: Dict, data: str) -> Tuple[str, str]:
    """The source and target language: the task's, or fairseq's guess from the data files."""
    src, tgt = task_field(task_cfg, "source_lang"), task_field(task_cfg, "target_lang")
    if src is None or tgt is None:
        from fairseq.data import data_utils

        src, tgt = data_utils.infer_language_pair(data)
    if src is None or tgt is None:
        raise ExportError(f"the checkpoint does not name its languages and {data} has no "
                          f"train.SRC-TGT.* files to tell them: pass --data DIR")
    return src, tgt


def fsmt_config(model_cfg: Dict, weights: Dict[str, torch.Tensor], langs: Tuple[str, str]):
    """The FSMTConfig arguments of a fairseq transformer with these options and weights."""
    tied = bool(model_cfg.get("share_all_embeddings"))
    positions = max(model_cfg.get("max_source_positions") or 1024,
                    model_cfg.get("max_target_positions") or 1024)
    return dict(
        langs=list(langs),
        src_vocab_size=weights["encoder.embed_tokens.weight"].shape[0],
        tgt_vocab_size=weights["decoder.embed_tokens.weight"].shape[0],
        d_model=model_cfg["encoder_embed_dim"],
        encoder_layers=model_cfg["encoder_layers"],
        decoder_layers=model_cfg["decoder_layers"],
        encoder_attention_heads=model_cfg["encoder_attention_heads"],
        decoder_attention_heads=model_cfg["decoder_attention_heads"],
        encoder_ffn_dim=model_cfg["encoder_ffn_embed_dim"],
        decoder_ffn_dim=model_cfg["decoder_ffn_embed_dim"],
        activation_function=ACTIVATIONS[model_cfg.get("activation_fn", "relu")],
        dropout=float(model_cfg.get("dropout") or 0.0),
        attention_dropout=float(model_cfg.get("attention_dropout") or 0.0),
        activation_dropout=float(model_cfg.get("activation_dropout")
                                 or model_cfg.get("relu_dropout") or 0.0),
        encoder_layerdrop=0.0, decoder_layerdrop=0.0,  # LayerDrop: training only
        max_position_embeddings=positions,
        scale_embedding=not model_cfg.get("no_scale_embedding"),
        # --share-all-embeddings: one matrix for the source and target embeddings and the
        # output projection, which is what FSMT ties; otherwise each is stored on its own
        tie_word_embeddings=tied,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        forced_eos_token_id=2, architectures=["FSMTForConditionalGeneration"],
        # FSMT builds the decoder's causal mask only without its cache: with use_cache true a
        # forward of whole target prefixes (scoring, teacher forcing) would attend to later
        # tokens. generate() uses the cache all the same (generation_config.json).
        use_cache=False,
        **generation_defaults(model_cfg),
    )


def generation_defaults(model_cfg: Dict) -> Dict:
    """fairseq-generate's beam search as transformers' generate options (the defaults of
    generate.py's --beam, --lenpen, --max-len-a/b, --min-len).

    fairseq: at most max_len = min(max_len_b, max_target_positions - 1) tokens, then </s>
    forced; transformers' max_length counts the decoder start token, so max_len + 2. fairseq
    stops a sentence once it has beam finished hypotheses (``early_stopping=True``), never
    outputs <pad> (``suppress_tokens``) and no </s> before min_len tokens (``min_new_tokens``).
    Its length penalty divides by the number of tokens with </s>, as transformers' does."""
    max_len = min(MAX_LEN_B, (model_cfg.get("max_target_positions") or 1024) - 1)
    return dict(num_beams=BEAM, length_penalty=LENPEN, early_stopping=True,
                max_length=max_len + 2)


def fsmt_weights(weights: Dict[str, torch.Tensor], config) -> Dict[str, torch.Tensor]:
    """fairseq's state dict as FSMTForConditionalGeneration's (float32, own storage each), with
    the sinusoidal position tables FSMT computes; raises ExportError for an entry FSMT has no
    place for, or one of its weights missing."""
    from transformers import FSMTForConditionalGeneration
    from transformers.models.fsmt.modeling_fsmt import SinusoidalPositionalEmbedding

    with torch.device("meta"):  # names and shapes only: no memory, no initialisation
        expected = {name: tensor.shape for name, tensor in
                    FSMTForConditionalGeneration(config).state_dict().items()}
    converted, seen = {}, set()
    for key, tensor in weights.items():
        if key.endswith(NOT_WEIGHTS):
            continue
        name = "model." + key
        if name not in expected:
            raise ExportError(f"the checkpoint's {key} has no counterpart in transformers' "
                              f"FSMT: its model is not a plain fairseq transformer")
        if tuple(tensor.shape) != tuple(expected[name]):
            raise ExportError(f"the checkpoint's {key} has shape {tuple(tensor.shape)}, FSMT's "
                              f"{tuple(expected[name])}")
        storage = tensor.untyped_storage().data_ptr()
        # safetensors stores no two names over one storage: tied matrices are copied (or, tied
        # in the config, written once)
        converted[name] = (tensor.float().clone() if storage in seen
                           else tensor.float().contiguous())
        seen.add(storage)
    for side in ("encoder", "decoder"):
        name = f"model.{side}.embed_positions.weight"
        converted[name] = SinusoidalPositionalEmbedding.get_embedding(
            expected[name][0], config.d_model, config.pad_token_id)
    if config.tie_word_embeddings:  # FSMT ties both to the decoder's embedding when it loads
        for tied in ("model.encoder.embed_tokens.weight", "model.decoder.output_projection.weight"):
            converted.pop(tied, None)
        expected = {k: v for k, v in expected.items()
                    if k not in ("model.encoder.embed_tokens.weight",
                                 "model.decoder.output_projection.weight")}
    missing = sorted(set(expected) - set(converted))
    if missing:
        raise ExportError(f"the checkpoint lacks FSMT's {', '.join(missing[:3])}"
                          f"{' ...' if len(missing) > 3 else ''}")
    return converted


def dictionary_vocab(path: str) -> Dict[str, int]:
    """fairseq's dictionary ``path`` as piece -> id (0..3: <s>, <pad>, </s>, <unk>; then its
    lines), as Dictionary.index looks pieces up."""
    return dict(load_dictionary(path).indices)


def write_tokenizer(directory: str, spm: str, source_dict: str, target_dict: str,
                    langs: Tuple[str, str], max_positions: int) -> None:
    """A MarianTokenizer over the sentencepiece model ``spm`` and fairseq's dictionaries into
    ``directory`` (vocab.json, [target_vocab.json,] source.spm, target.spm, tokenizer_config.json,
    special_tokens_map.json)."""
    *_, MarianTokenizer, _ = transformers_classes()
    source, target = dictionary_vocab(source_dict), dictionary_vocab(target_dict)
    separate = source != target
    with scratch_directory() as tmp:
        vocab, target_vocab = os.path.join(tmp, "vocab.json"), os.path.join(tmp, "target.json")
        for path, entries in ((vocab, source), (target_vocab, target)):
            with create_new(path) as out:
                json.dump(entries, out, ensure_ascii=False)
        tokenizer = MarianTokenizer(
            source_spm=spm, target_spm=spm, vocab=vocab,
            target_vocab_file=target_vocab if separate else None, separate_vocabs=separate,
            source_lang=langs[0], target_lang=langs[1], bos_token="<s>", unk_token="<unk>",
            eos_token="</s>", pad_token="<pad>", model_max_length=max_positions,
            clean_up_tokenization_spaces=False)
        tokenizer.save_pretrained(directory)


class Converted(NamedTuple):
    """An exported checkpoint as transformers' objects, checked; nothing written yet."""
    config: object  # FSMTConfig
    generation: object  # GenerationConfig
    weights: Dict[str, torch.Tensor]
    langs: Tuple[str, str]
    dictionaries: Tuple[str, str]  # fairseq's dict.SRC.txt, dict.TGT.txt


def check(exported: Dict) -> None:
    """Raise ExportError, with every reason, when FSMT cannot compute the exported model."""
    found = problems(exported["cfg"]["model"], exported["cfg"]["task"])
    if found:
        raise ExportError("transformers' FSMT (the port of fairseq's transformer that "
                          "--transformers writes) does not compute " + "; ".join(found))


def check_sentencepiece(spm: str, dictionary: str) -> None:
    """Refuse a sentencepiece model that is not the one the model's dictionary was made with
    (``spm.mismatch``: unreadable, or a token of the dictionary that is not one of its pieces)."""
    from .spm import mismatch

    problem = mismatch(spm, dictionary_vocab(dictionary))
    if problem:
        raise ExportError(f"{dictionary}: {problem}; pass the one it was trained with "
                          f"(--sentencepiece-model)")


def convert(exported: Dict, data: str, sentencepiece_model: Optional[str] = None) -> Converted:
    """Check and convert an exported checkpoint (export.export) whose dictionaries are in
    ``data``; raises ExportError with the reason for what cannot be exported. Writes nothing."""
    FSMTConfig, _, GenerationConfig, _, _ = transformers_classes()
    check(exported)
    model_cfg, task_cfg = exported["cfg"]["model"], exported["cfg"]["task"]
    langs = languages(task_cfg, data)
    dictionaries = tuple(os.path.join(data, f"dict.{lang}.txt") for lang in langs)
    if sentencepiece_model:
        for path in dictionaries:
            if not os.path.isfile(path):
                raise ExportError(f"{path} does not exist: the tokenizer is built from it; pass "
                                  f"--data DIR, the fairseq-preprocess output")
        for path in dict.fromkeys(dictionaries):  # one joined dictionary, or each side's
            check_sentencepiece(sentencepiece_model, path)
    config = FSMTConfig(**fsmt_config(model_cfg, exported["model"], langs))
    generation = GenerationConfig(
        decoder_start_token_id=2, bos_token_id=0, eos_token_id=2, pad_token_id=1,
        forced_eos_token_id=2, min_new_tokens=MIN_LEN, suppress_tokens=[1], do_sample=False,
        use_cache=True, **generation_defaults(model_cfg))
    return Converted(config, generation, fsmt_weights(exported["model"], config), langs,
                     dictionaries)


def save(converted: Converted, output_dir: str, sentencepiece_model: Optional[str],
         inputs=(), card: Optional[str] = None) -> None:
    """Write ``converted`` (and the tokenizer, given the sentencepiece model; the model card
    ``card`` as README.md, given its text: ``hf_card``) into ``output_dir``, complete or not
    at all; an existing ``output_dir`` (the caller allowed it:
    --force) is replaced once the new one is complete."""
    *_, save_file = transformers_classes()
    with directory_published(output_dir, "transformers-", inputs) as built:
        converted.config.save_pretrained(built)
        converted.generation.save_pretrained(built)
        save_file(converted.weights, os.path.join(built, "model.safetensors"),
                  metadata={"format": "pt"})
        if card is not None:
            with create_new(os.path.join(built, "README.md"), "w") as out:
                out.write(card)
        if sentencepiece_model:
            write_tokenizer(built, sentencepiece_model, *converted.dictionaries,
                            converted.langs, converted.config.max_position_embeddings)


def to_transformers(exported: Dict, data: str, output_dir: str,
                    sentencepiece_model: Optional[str] = None) -> None:
    """convert, then save: the transformers directory of an exported checkpoint."""
    save(convert(exported, data, sentencepiece_model), output_dir, sentencepiece_model)
