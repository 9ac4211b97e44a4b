"""What the tests share: the toy corpus, the tiny sizes, models built and fairseq's training run
in this process, and the CLIs run as processes where the process boundary is what is tested.

Every size here derives from the plugin's one tiny size (``methods.TINY_SIZE``, the ``_tiny``
archs): the tests do not spell widths of their own."""

import csv
import io
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import List, Sequence

import torch

import deepnet_fairseq
from deepnet_fairseq import methods
from deepnet_fairseq.diagnostics.common import build_from_options

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = deepnet_fairseq.USER_DIR
PY = sys.executable


def width_args(factor: float, stacks=("encoder", "decoder")) -> List[str]:
    """fairseq-train options of the tiny size's widths times ``factor`` and its heads, for each
    of ``stacks`` (depth not included)."""
    size = methods.TINY_SIZE
    widths = {name: int(size["encoder_" + name] * factor) for name in ("embed_dim", "ffn_embed_dim")}
    widths["attention_heads"] = size["encoder_attention_heads"]
    return [arg for side in stacks for name, value in widths.items()
            for arg in (f"--{side}-{name.replace('_', '-')}", str(value))]


# stacks of 50 to 100 layers at a quarter of the tiny width (16 / 32), where the cost of the
# tiny width would add up over the layers
NARROW = width_args(1 / 4)
# four times the tiny width (256 / 512): enough weights per matrix for statistics of the init
WIDE = width_args(4)

# the one tiny training: a few updates of Adam, as the paper trains, on the toy corpus
TRAIN_OPTIONS = [
    "--cpu", "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "10", "--max-tokens", "2000", "--criterion",
    "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--seed", "1",
    "--log-format", "simple", "--log-interval", "1", "--no-epoch-checkpoints",
    "--num-workers", "0",
]


def write_reverse_corpus(directory, sizes=(("train", 600), ("valid", 40), ("test", 40)), seed=0):
    """Sentences of random words and their reversal: learnable in a few hundred updates."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30)]
    for split, count in sizes:
        with open(os.path.join(directory, f"{split}.src"), "w") as src, open(
            os.path.join(directory, f"{split}.tgt"), "w"
        ) as tgt:
            for _ in range(count):
                sentence = [rng.choice(words) for _ in range(rng.randint(3, 9))]
                src.write(" ".join(sentence) + "\n")
                tgt.write(" ".join(reversed(sentence)) + "\n")


def run(cmd, cwd=None, check=True, env=None):
    """Run a CLI as a process, returning the CompletedProcess; on an unexpected status show its
    output."""
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def build(data_dir, arch, *extra, seed=1):
    """(model, task, cfg) built through fairseq's option parsing, arch hook and task, as
    fairseq-train builds them."""
    cfg, task, model, _ = build_from_options(
        [str(data_dir), "--user-dir", USER_DIR, "--arch", arch, "--cpu", *map(str, extra)], seed)
    return model, task, cfg


def sample_batch(task, size=4, seed=0):
    """A fixed batch of the toy training set (net_input dict and target)."""
    task.load_dataset("train")
    dataset = task.dataset("train")
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randperm(len(dataset), generator=generator)[:size].tolist()
    return dataset.collater([dataset[i] for i in indices])


def train(data, save_dir, *extra, arch="deepnet_transformer_tiny", user_dir=USER_DIR) -> str:
    """The tiny training (TRAIN_OPTIONS) of ``arch`` by fairseq-train's own main, in this
    process; returns its log. A refused setting raises the plugin's error."""
    return fairseq_train([str(data), "--user-dir", user_dir, "--arch", arch,
                          "--save-dir", str(save_dir), *TRAIN_OPTIONS, *map(str, extra)])


def fairseq_preprocess(*argv) -> None:
    """``fairseq-preprocess ARGV`` in this process (fairseq's parser and main)."""
    from fairseq import options
    from fairseq_cli import preprocess

    preprocess.main(options.get_preprocessing_parser().parse_args(list(map(str, argv))))


def make_toy_data(root):
    """The toy reversal corpus in ROOT, binarised by fairseq-preprocess (src -> tgt, joined
    dictionary) into ROOT/bin, which it returns: the suite's ``toy_data``, and what the recorded
    references were recorded on (tests/data/)."""
    write_reverse_corpus(str(root))
    fairseq_preprocess(
        "--source-lang", "src", "--target-lang", "tgt",
        "--trainpref", root / "train", "--validpref", root / "valid",
        "--testpref", root / "test", "--destdir", root / "bin",
        "--joined-dictionary", "--workers", 1,
    )
    return root / "bin"


def fairseq_train(argv: Sequence[str]) -> str:
    """``fairseq-train ARGV`` in this process: fairseq's parser and ``fairseq_cli.train.main``,
    as its console script runs them on one CPU process; returns the log it wrote.

    What a run would leave in the test process is undone or avoided, so that runs and the
    tests after them do not see each other: fairseq keeps the best validation loss and the
    early-stopping count on function attributes (cleared first); its loggers gain a file
    handler per ``--log-file`` and per progress bar (removed after); its batch loader runs a
    thread per epoch iterator that outlives the run (not started: ``--data-buffer-size 0``
    unless given, the same batches without the prefetching thread), and a process holding
    stray threads is not one that later tests may safely fork."""
    from fairseq import checkpoint_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli import train as fairseq_cli_train

    for holder in (checkpoint_utils.save_checkpoint, fairseq_cli_train.should_stop_early):
        for attribute in ("best", "num_runs"):
            if hasattr(holder, attribute):
                delattr(holder, attribute)
    argv = list(map(str, argv))
    if "--data-buffer-size" not in argv:
        argv += ["--data-buffer-size", "0"]
    scratch = None
    if "--save-dir" not in argv:  # fairseq makes its default ./checkpoints even with --no-save
        scratch = tempfile.TemporaryDirectory(prefix="fairseq-save-")
        argv += ["--save-dir", scratch.name]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    cfg = convert_namespace_to_omegaconf(args)
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s"))
    root = logging.getLogger()
    saved_root = root.handlers[:], root.level
    saved = {name: list(logger.handlers) for name, logger in logging.Logger.manager.loggerDict.items()
             if isinstance(logger, logging.Logger)}
    root.handlers, root.level = [handler], logging.INFO
    try:
        distributed_utils.call_main(cfg, fairseq_cli_train.main)
    except BaseException:
        sys.stderr.write(log.getvalue()[-4000:])  # pytest shows it with the failure
        raise
    finally:
        root.handlers, root.level = saved_root
        for name, logger in logging.Logger.manager.loggerDict.items():
            if isinstance(logger, logging.Logger):
                for added in set(logger.handlers) - set(saved.get(name, [])):
                    logger.removeHandler(added)
                    added.close()
        if scratch is not None:
            scratch.cleanup()
    return log.getvalue()


def process_cmdline(pid: int) -> str:
    """A process's command line from /proc ("" for what is not a live process)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def wait_for(predicate, what, timeout=300, procs=()):
    """Until ``predicate()`` holds: a failure naming WHAT after TIMEOUT seconds, or as soon as
    one of PROCS has exited (it can no longer bring the event about)."""
    deadline = time.time() + timeout
    while not predicate():
        for proc in procs:
            assert proc.poll() is None, f"exited {proc.returncode} before {what}"
        assert time.time() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.2)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except OSError:
        return False


# Max |difference| allowed between the fp32 decoder outputs (logits, about +-8 on the toy
# data) of a DeepNet and its export. The fold's one approximation is LayerNorm's epsilon,
# eps / alpha^2 in the DeepNet (export.py); the exported LayerNorms are given eps / alpha^2, so
# what is left is float32 rounding (measured in docs/deploying.md).
EXPORT_TOLERANCE = 1e-3


def save_checkpoint(model, cfg, path, num_updates=7):
    """A checkpoint of ``model`` as fairseq-train writes it (its options, Adam's state, the
    update counter); returns the path as text."""
    from omegaconf import OmegaConf

    torch.save({
        "args": None, "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "model": model.state_dict(), "criterion": {},
        "optimizer_history": [{"criterion_name": "CrossEntropyCriterion",
                               "optimizer_name": "FairseqAdam", "lr_scheduler_state": {},
                               "num_updates": num_updates}],
        "last_optimizer_state": {"state": {0: {"exp_avg": torch.ones(10)}}},
        "task_state": {}, "extra_state": {"train_iterator": {"epoch": 1}},
    }, path)
    return str(path)


def load_model(path):
    """The model of checkpoint ``path``, loaded by fairseq."""
    from fairseq import checkpoint_utils

    [model], _, _ = checkpoint_utils.load_model_ensemble_and_task([str(path)])
    return model


def assert_decodes_incrementally_as_in_one_pass(model, task):
    """The decoder run step by step (fairseq's incremental state, as beam search runs it) gives
    the full forward's outputs at every real target position of a toy batch."""
    model.eval()
    net = sample_batch(task)["net_input"]
    with torch.no_grad():
        full = model(**net)[0]
        encoder_out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        state, steps, prev = {}, [], net["prev_output_tokens"]
        for t in range(prev.size(1)):
            steps.append(model.decoder(prev[:, : t + 1], encoder_out=encoder_out,
                                       incremental_state=state)[0][:, -1])
    real = prev.ne(task.target_dictionary.pad())  # padded positions attend differently
    assert real.sum() > prev.size(0)
    assert torch.allclose(torch.stack(steps, 1)[real], full[real], atol=1e-5)


def decoder_outputs(model, batch):
    """The decoder's output (logits) of ``batch`` in eval mode, without gradients."""
    model.eval()
    with torch.no_grad():
        return model(**batch["net_input"])[0]


def assert_png(path):
    """``path`` is a PNG image (its magic bytes)."""
    with open(path, "rb") as f:
        assert f.read(4) == b"\x89PNG", f"{path} is not a PNG"


def read_csv(path):
    """The rows of a CSV file with a header, as dicts."""
    with open(path) as f:
        return list(csv.DictReader(f))


def tensorboard_scalars(directory) -> dict:
    """tag -> [(step, value)] of the scalars in the TensorBoard event files under DIRECTORY,
    read from the record format itself (length, its CRC, an Event proto, the data's CRC), not
    through the writer's library."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    scalars: dict = {}
    for root, _, files in os.walk(directory):
        for name in sorted(f for f in files if "tfevents" in f):
            data = open(os.path.join(root, name), "rb").read()
            at = 0
            while at < len(data):
                (length,) = struct.unpack("<Q", data[at:at + 8])
                event = Event.FromString(data[at + 12:at + 12 + length])
                at += 12 + length + 4
                for value in event.summary.value:
                    scalars.setdefault((os.path.relpath(root, directory), value.tag),
                                       []).append((event.step, value.simple_value))
    return scalars


ACCESSORS = ("get", "int", "float", "flag", "words", "ints", "int_or_auto")


def setting_reads(tree, variables=("cfg", "run_cfg")):
    """The reads of resolved settings in a module's syntax TREE: (section, attribute) of every
    ``cfg.SECTION.attr``, ``cfg.text.SECTION.attr`` and ``cfg.optional.SECTION.attr``, and
    (text, method, NAME) of every read by a constant string key (``cfg["LR"]``: method None,
    ``cfg.get("RUNS")``)."""
    import ast

    from deepnet_fairseq.recipes.spec.settings import SECTIONS, SETTINGS

    def is_settings(node):
        return (isinstance(node, ast.Name) and node.id in variables) or (
            isinstance(node, ast.Attribute) and node.attr == "cfg")

    def constant_setting(node):
        value = getattr(node, "value", None)
        return value if isinstance(node, ast.Constant) and value in SETTINGS else None

    sections, keyed = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            holder = node.value.value
            if isinstance(holder, ast.Attribute) and holder.attr in ("text", "optional"):
                holder = holder.value
            if is_settings(holder) and node.value.attr in SECTIONS:
                sections.append((node.value.attr, node.attr))
        if isinstance(node, ast.Subscript) and is_settings(node.value) and \
                constant_setting(node.slice):
            keyed.append((f'["{node.slice.value}"]', None, node.slice.value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                is_settings(node.func.value) and node.args and constant_setting(node.args[0]):
            name = node.args[0].value
            keyed.append((f'.{node.func.attr}("{name}")', node.func.attr, name))
    return sections, keyed


def settings_read(tree, variables=("cfg", "run_cfg")) -> set:
    """The names of the settings a module's syntax TREE reads from resolved settings by a
    constant name: by section attribute, and by the string-keyed ``cfg["NAME"]`` and the
    accessors (spec/settings.py's own, and those kept for names computed in a loop)."""
    from deepnet_fairseq.recipes.spec.settings import SETTINGS

    sections, keyed = setting_reads(tree, variables)
    return {attr.upper() for _, attr in sections if attr.upper() in SETTINGS} | {
        name for _, method, name in keyed if method is None or method in ACCESSORS}
