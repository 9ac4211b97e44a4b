"""The docs keep their promises: every command shown in README.md and docs/*.md is either run
here (the cheap ones, and every recipe command as its --dry-run) or named in DOC_COMMANDS with
the test that runs it; the generated methods table is current; relative links resolve."""

import ast
import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

from deepnet_fairseq import methods
from deepnet_fairseq.recipes.datasets import DATASETS
from support import REPO


DOCS = ["README.md"] + sorted(
    os.path.join("docs", f) for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md"))
# Prose: the README, the docs and the notes of committed results (results/README.md generated)
PROSE = DOCS + sorted(
    os.path.relpath(os.path.join(root, name), REPO)
    for root, _, names in os.walk(os.path.join(REPO, "results")) for name in names
    if name == "README.md")

# Inline `code` in prose that starts like this is a command too (tables of launch commands).
PROGRAMS = ("bash ", "fairseq-", "python ", "deepnet-", "sbatch ", "torchrun ", "srun ", "pip ",
            "sacrebleu ")
ASSIGNMENT = re.compile(r"^(?:[A-Z][A-Z0-9_]*=\S+\s+)+")


def doc_commands(path):
    """The commands of one Markdown file: each line of its bash/sh/unlabelled code blocks
    (continuations joined, comments dropped), and inline code that starts with a program."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        text = f.read()
    found = []
    for lang, block in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
        if lang not in ("bash", "sh", ""):
            continue
        for line in re.sub(r"\\\n\s*", " ", block).split("\n"):
            line = re.split(r"\s+#\s", line.strip())[0].strip()
            if line and not line.startswith("#") and not re.fullmatch(r"[A-Z_]+=\S+", line):
                found.append(line)  # (a bare assignment, M=dir, is not a command)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for cell in re.findall(r"`([^`\n]+)`", prose):
        command = ASSIGNMENT.sub("", cell)
        if command.startswith(PROGRAMS) and " " in command.strip():
            found.append(cell.strip())
    return found


ALL = sorted({(path, command) for path in DOCS for command in doc_commands(path)})

# Commands run here: recipe scripts as --dry-run (what they would do, resolved on this
# machine), the method registry, console scripts' --help.
RECIPE = re.compile(r"^((?:[A-Z][A-Z0-9_]*=(?:\"[^\"]*\"|\S+)\s+)*)"  # settings, quoted or not
                    rf"bash (scripts/(?:{'|'.join(DATASETS)})/(?:prepare|train|evaluate|sweep)\.sh)"
                    r"(?: --dry-run)?$")  # shown as a dry run, or run as one
RUN_AS_IS = re.compile(r"^(python -m deepnet_fairseq\.methods( --markdown| \w+ \d+ \d+)?|"
                       r"deepnet-model-options --arch \w+|bash benchmarks/gpu_check\.sh --help|"
                       r"deepnet-user-dir)$")

# Every other command, by pattern, with the test that runs it (or its equivalent at smoke
# size). CI runs the README's two commands themselves (.ci/run).
DOC_COMMANDS = [
    (r"bash scripts/install\.sh.*", ".ci/run"),
    (r"SIZE=smoke bash scripts/quickstart\.sh", ".ci/run"),
    (r"python -m pytest tests(/unit)?", ".ci/run"),  # the layer runs within the whole
    # the marked re-derivations, outside the default run: the tests it selects
    (r"python -m pytest tests -m costly",
     "tests/slow/test_zero.py::test_fairscale_oss_trains_as_recorded_and_as_torch_zero1_side_by_side"),
    (r"python -m deepnet_fairseq\.recipes DATASET STEP",
     "tests/unit/test_hostile_runtime.py::test_a_run_directory_the_recipes_did_not_create_is_left_alone"),
    (r"bash scripts/quickstart\.sh", ".ci/run"),
    (r"bash scripts/quickstart\.sh --help", "tests/integration/test_recipe_scripts.py::test_quickstart_help_dry_run_and_thin_wrapper"),
    (r"pip install torch==.*", ".ci/run"),
    (r"fairseq-train .*--criterion label_smoothed_cross_entropy_with_source_gain .*",
     "tests/unit/test_source_gain_criterion.py::test_fairseq_train_logs_it_at_every_validation"),
    (r"fairseq-train DATA_BIN --user-dir deepnet_fairseq --arch deepnet_transformer_18_18 .*",
     "tests/slow/test_train_generate.py::test_train_generate_resume_average_from_source_tree"),
    (r"fairseq-generate DATA_BIN --user-dir deepnet_fairseq .*",
     "tests/slow/test_train_generate.py::test_train_generate_resume_average_from_source_tree"),
    (r"deepnet-average-checkpoints .*",
     "tests/unit/test_averaging.py::test_cli_writes_the_mean_of_the_last_update_checkpoints"),
    (r"fairseq-train DATA_BIN --user-dir docs/examples/half_branch .*",
     "tests/unit/test_core_reference.py::test_a_method_declared_once_trains_with_fairseq_train"),
    (r"fairseq-train DATA_BIN --user-dir deepnet_fairseq --task masked_lm .*",
     "tests/unit/test_methods.py::test_encoder_only_deepnorm_constants_and_init_survive_roberta_init"),
    (r"fairseq-train DATA_BIN --user-dir deepnet_fairseq --task language_modeling .*",
     "tests/unit/test_methods.py::test_decoder_only_deepnorm_constants"),
    (r"deepnet-model-options --arch <arch>", "tests/integration/test_console_scripts.py::test_model_options_accepts_every_arch_the_plugin_registers"),
    (r"(OMP_NUM_THREADS=1 )?deepnet-model-update .*",
     "tests/unit/test_diagnostics.py::test_model_update_of_deepnet_is_below_post_ln_at_depth"),
    (r"fairseq-train .*--task translation_monitored.*",
     "tests/slow/test_diagnostics_end_to_end.py::test_monitors_log_per_layer_values_and_leave_training_unchanged"),
    (r"deepnet-plot-monitors .*", "tests/slow/test_diagnostics_end_to_end.py::test_monitors_log_per_layer_values_and_leave_training_unchanged"),
    (r"deepnet-source-use .*", "tests/slow/test_diagnostics_end_to_end.py::test_cli_writes_one_row_per_checkpoint"),
    (r"SOURCE=multi30k deepnet-depth-study --dataset wmt17 .*",
     "tests/unit/test_depth_study.py::test_on_real_text_it_is_the_wmt17_recipe_on_the_shipped_multi30k"),
    (r"(OMP_NUM_THREADS=1 )?deepnet-depth-study .*",
     "tests/slow/test_diagnostics_end_to_end.py::test_depth_study_writes_table_and_plot_and_reuses_runs"),
    (r"(OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 )?python benchmarks/prepare_scale\.py.*",
     "tests/slow/test_benchmarks.py::test_the_scale_benchmark_prints_its_tables_and_every_stage"),
    (r"python benchmarks/throughput\.py.*",
     "tests/slow/test_benchmarks.py::test_throughput_benchmark_prints_both_models"),
    (r"(OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 )?(MALLOC_MMAP_THRESHOLD_=\d+ )?CONFIGS=\"[^\"]*\" python benchmarks/memory_plan\.py .*",
     "tests/slow/test_benchmarks.py::test_the_benchmark_measures_cpu_modes_beside_the_estimate"),
    (r"bash benchmarks/gpu_check\.sh.*",
     "tests/slow/test_benchmarks.py::test_tiny_cpu_run_through_the_real_clis"),
    (r"python -m deepnet_fairseq\.recipes\.evaluation\.evaluate.*",
     "tests/slow/test_train_generate.py::test_two_directions_load_the_model_once_and_match_fairseq_generate"),
    (r"sacrebleu --tokenize none", "tests/unit/test_bleu_metric.py::test_tokenized_bleu_agrees_with_sacrebleu_on_hand_tokenised_text"),
    (r"python -m deepnet_fairseq\.spm", ".ci/run"),  # the quickstart trains its sentencepiece
    (r"fairseq-train --arch deepnet_transformer|fairseq-generate --fp16",
     "tests/slow/test_benchmarks.py::test_tiny_cpu_run_through_the_real_clis"),
    (r"python -m deepnet_fairseq\.fairseq_train_compat|fairseq-train --bf16|"
     r"torchrun --standalone --nproc_per_node \w+( -m \.\.\.compat)?",
     "tests/slow/test_recipe_chains.py::test_wmt17_two_cpu_processes_keep_the_effective_batch"),
    (r"for arch in .*|fairseq-train runs/quickstart/data/bin .*|done",
     "tests/slow/test_train_generate.py::test_train_generate_resume_average_from_source_tree"),
    (r"python -m deepnet_fairseq\.recipes quickstart",  # scripts/quickstart.sh runs it
     "tests/integration/test_recipe_scripts.py::test_quickstart_help_dry_run_and_thin_wrapper"),
    (r"python -m deepnet_fairseq\.recipes\.run\.launch DATASET STEP|"
     r"bash scripts/wmt17/train\.sh --dry-run",
     "tests/integration/test_recipe_scripts.py::test_dry_run_prints_settings_and_command_and_runs_nothing"),
    (r"srun --nodes .*|sbatch --nodes .*",
     "tests/unit/test_launch.py::test_four_nodes_of_eight_gpus_under_slurm"),
    (r"torchrun --nnodes .*|NNODES=2 NODE_RANK=\S+ MASTER_ADDR=\S+( bash scripts/wmt17/train\.sh)?",
     "tests/slow/test_recipe_chains.py::test_wmt17_two_nodes_write_one_status_and_their_own_logs"),
    (r"DEVICE=cpu NPROC=3 SIZE=smoke",
     "tests/slow/test_recipe_chains.py::test_wmt17_two_cpu_processes_keep_the_effective_batch"),
    (r"METHODS=\"deepnet admin\"|NNODES > 1", "tests/unit/test_launch.py"),
    (r"deepnet-export .*|fairseq-generate runs/quickstart/data/bin --path deepnet-plain\.pt .*|"
     r"python benchmarks/decode_speed\.py .*", "tests/slow/test_export_end_to_end.py::test_a_quickstart_model_exports_decodes_without_the_plugin_and_benchmarks"),
    (r"python benchmarks/hf_parity\.py .*",
     "tests/slow/test_export_end_to_end.py::test_a_quickstart_model_exports_decodes_without_the_plugin_and_benchmarks"),
    (r"fairseq-generate --path|fairseq-train --restore-file",  # fairseq's loader, weights-only
     "tests/unit/test_hostile_checkpoints.py::test_fairseqs_own_loading_is_weights_only_once_the_plugin_is_registered"),
    (r"pip install -e '\.\[deploy\]'", ".ci/run"),  # scripts/install.sh installs that extra
    (r"python -m deepnet_fairseq\.recipes\.reporting\.curves( .*)?",
     "tests/slow/test_recipe_chains.py::test_wmt17_sweep_with_forced_divergence"),
    (r"(OMP_NUM_THREADS=1 )?python -m deepnet_fairseq\.recipes run (configs/([\w-]+|<name>)|FILE)\.toml"
     r"( --dry-run)?",
     "tests/integration/test_configs.py::test_every_config_runs_as_it_is"),
    (r"SIZE=mini METHOD=admin LAYERS=18 LR=0\.0005 python -m deepnet_fairseq\.recipes wmt17 "
     r"train --dry-run --save-config my-admin\.toml",
     "tests/integration/test_configs.py::test_saved_settings_resolve_the_same_from_the_file"),
    (r"python -m deepnet_fairseq\.recipes\.reporting\.lr_transfer( .*)?",
     "tests/unit/test_lr_transfer.py::test_optimum_and_drift_per_depth"),
    (r"python -m deepnet_fairseq\.recipes\.reporting\.depth_law( .*)?",
     "tests/slow/test_recipe_chains.py::test_opus100_chain_and_log_fit"),
    (r"python -m deepnet_fairseq\.recipes\.reporting\.report --dataset wmt17 .*",
     "tests/unit/test_recipe_reports.py::test_runs_at_the_source_blind_loss_are_marked_stalled"),
    (r"python -m deepnet_fairseq\.recipes\.spec\.presets > docs/presets\.md",
     "tests/unit/test_launch.py::test_docs_presets_md_is_the_presets_as_they_are"),
    (r"python -m deepnet_fairseq\.recipes\.datasets",
     "tests/integration/test_docs.py::test_datasets_table_in_the_docs_is_generated_from_the_declarations"),
    (r"deepnet --help", "tests/integration/test_front_door.py::test_every_help_answers_without_torch_or_fairseq_and_starts_nothing"),
    (r"deepnet translate .*", "tests/integration/test_front_door.py::test_translate_gives_the_python_apis_translations_line_for_line"),
    (r"bash scripts/figure5/run\.sh.*|python -m deepnet_fairseq\.diagnostics\.model_update .*",
     "tests/slow/test_diagnostics_end_to_end.py::test_figure5_script_runs_a_row_and_refuses_an_unknown_one"),
]


def _exercised_by(command):
    for pattern, test in DOC_COMMANDS:
        if re.fullmatch(pattern, command):
            return test
    return None


def _test_exists(reference):
    path, _, name = reference.partition("::")
    full = os.path.join(REPO, path)
    if not os.path.isfile(full):
        return False
    if not name:
        return True
    with open(full, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return any(isinstance(node, ast.FunctionDef) and node.name == name for node in tree.body)


def _parts(command):
    return [part.strip() for part in command.split("&&")]


def test_every_command_in_the_docs_is_run_or_names_its_test():
    unaccounted = []
    for path, command in ALL:
        for part in _parts(command):
            if RECIPE.fullmatch(part) or RUN_AS_IS.fullmatch(part):
                continue
            test = _exercised_by(part)
            if test is None or not _test_exists(test):
                unaccounted.append(f"{path}: {part!r} -> {test}")
    assert not unaccounted, "commands no test runs:\n" + "\n".join(unaccounted)


def test_the_ci_runs_the_readmes_two_commands_verbatim():
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    readme = {command for path, command in ALL if path == "README.md"}
    for command in ("bash scripts/install.sh && bash scripts/quickstart.sh",
                    "python -m pytest tests"):
        assert command in readme and command in ci


RUNNABLE = sorted({part for _, command in ALL for part in _parts(command)
                   if RECIPE.fullmatch(part) or RUN_AS_IS.fullmatch(part)})


@pytest.mark.parametrize("command", RUNNABLE)
def test_docs_command_runs(command, tmp_path):
    """Recipe commands run as --dry-run (settings resolved, command built, nothing trained);
    the others as written."""
    env = dict(os.environ, DEEPNET_WORK=str(tmp_path / "work"))
    match = RECIPE.fullmatch(command)
    if match:
        for assignment in shlex.split(match.group(1)):
            name, _, value = assignment.partition("=")
            env[name] = value
        argv = ["bash", match.group(2), "--dry-run"]
    else:
        argv = shlex.split(command)
        if argv[:2] == ["python", "-m"]:
            argv[0] = sys.executable
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_the_memory_plan_of_the_1000_layer_model_shows_on_a_machine_without_a_gpu(tmp_path):
    """docs/reproducing.md's dry run: with GPU_MEMORY_GB the plan is made without a GPU, and it
    is the one the page states (activation checkpointing + ZeRO-1, 55.8 of 72.0 GB)."""
    (command,) = {part for path, line in ALL if path == os.path.join("docs", "reproducing.md")
                  for part in _parts(line) if "GPU_MEMORY_GB=" in part}
    match = RECIPE.fullmatch(command)
    env = dict(os.environ, DEEPNET_WORK=str(tmp_path / "work"))
    env.update(assignment.split("=", 1) for assignment in shlex.split(match.group(1)))
    proc = subprocess.run(["bash", match.group(2), "--dry-run"], cwd=REPO, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "choice: activation checkpointing + ZeRO-1" in out and "est. 55.8 of 72.0 GB" in out


def test_the_readme_lists_every_docs_page():
    """The README's Documentation table has a line for each page of docs/ and the results."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        table = f.read().split("## Documentation\n")[1].split("\n## ")[0]
    listed = set(re.findall(r"^\| \[[^]]+\]\(([^)#]+)\)", table, re.M))
    assert listed == set(DOCS[1:]) | {"results/README.md"}


def test_methods_table_in_the_docs_is_generated_from_the_declarations():
    with open(os.path.join(REPO, "docs", "methods.md"), encoding="utf-8") as f:
        text = f.read()
    shown = text.split("<!-- methods table: generated -->\n")[1].split("<!-- end of")[0]
    assert shown == methods.markdown_table(), (
        "docs/methods.md is stale: paste `python -m deepnet_fairseq.methods --markdown`")


def test_datasets_table_in_the_docs_is_generated_from_the_declarations():
    from deepnet_fairseq.recipes.datasets import markdown_table

    with open(os.path.join(REPO, "docs", "reproducing.md"), encoding="utf-8") as f:
        text = f.read()
    shown = text.split("<!-- datasets table: generated by python -m "
                       "deepnet_fairseq.recipes.datasets -->\n")[1].split("<!-- end of")[0]
    assert shown == markdown_table(), (
        "docs/reproducing.md is stale: paste `python -m deepnet_fairseq.recipes.datasets`")


def test_constants_table_is_generated_from_the_module():
    from deepnet_fairseq import constants

    with open(os.path.join(REPO, "docs", "design.md"), encoding="utf-8") as f:
        text = f.read()
    shown = text.split("<!-- constants table: generated by python -m deepnet_fairseq.constants"
                       " -->\n")[1].split("<!-- end of")[0]
    assert shown == constants.markdown_table(), (
        "docs/design.md is stale: paste `python -m deepnet_fairseq.constants`")


def _anchor(heading):
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_test_the_project_names_exists():
    """A test named in the docs, the code or the results (``tests/LAYER/test_x.py[::name]``)
    exists: moved or renamed, its mentions follow."""
    named = re.compile(r"tests/[\w/]*test_\w+\.py(?:::\w+)?")
    sources = DOCS + sorted(glob.glob(os.path.join(REPO, "deepnet_fairseq", "**", "*.py"),
                                      recursive=True)) + sorted(
        glob.glob(os.path.join(REPO, "results", "**", "README.md"), recursive=True))
    missing = []
    for path in sources:
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            missing += [f"{os.path.relpath(path, REPO)}: {reference}"
                        for reference in named.findall(f.read()) if not _test_exists(reference)]
    assert not missing, "tests named that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize("path", PROSE)
def test_relative_links_resolve(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        text = f.read()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(REPO, os.path.dirname(path), file)) if file else \
            os.path.join(REPO, path)
        if not os.path.exists(full):
            broken.append(target)
        elif anchor:
            with open(full, encoding="utf-8") as f:
                headings = [_anchor(h) for h in re.findall(r"^#+ (.*)$", f.read(), re.M)]
            if anchor not in headings:
                broken.append(target)
    assert not broken, f"{path}: broken links {broken}"


def prose_paragraphs(text):
    """[paragraph, whether a code block follows it] of Markdown prose: code (fenced or
    indented), tables, headings and HTML left out; each list item is a paragraph."""
    found, block = [], []
    fence = in_code = False
    last_was_prose = False  # the block just closed was prose: a code block may follow it

    def close():
        nonlocal last_was_prose
        if block:
            found.append([" ".join(block), False])
            block.clear()
            last_was_prose = True

    def code_starts():
        nonlocal last_was_prose
        close()
        if last_was_prose:
            found[-1][1] = True
        last_was_prose = False

    previous_blank = True
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if not fence:
                code_starts()
            fence = not fence
        elif fence or (in_code and (line.startswith("    ") or not stripped)):
            pass
        elif previous_blank and line.startswith("    ") and stripped:
            code_starts()  # an indented code block
            in_code = True
        elif not stripped:
            close()
        elif (stripped.startswith(("#", "![")) or re.fullmatch(r"\|.*\|", stripped)
              or re.match(r"<(!--|/?[a-z]+[ >])", stripped)):  # heading, image, table, HTML
            close()
            last_was_prose = False
        else:
            in_code = False
            if re.match(r"([-*+]|\d+\.)\s", stripped):
                close()
            block.append(stripped)
            last_was_prose = False
        previous_blank = not stripped
    close()
    return [tuple(entry) for entry in found]


@pytest.mark.parametrize("path", PROSE)
def test_no_sentence_is_cut_off(path):
    """Every paragraph ends like a sentence (or introduces the code block after it): a
    sentence cut off in the middle, as the README once had ("Small models,"), fails."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        paragraphs = prose_paragraphs(f.read())
    cut = [text[-80:] for text, code_follows in paragraphs
           if not code_follows and not re.search(r"[.!?:;)\]`*_\"'>]$", text)]
    assert not cut, f"{path}: paragraphs that stop mid-sentence: {cut}"


def test_the_cut_off_check_catches_a_cut_sentence():
    text = "Intro.\n\nDeepNet gains BLEU with depth. Small models,\n\n| a | b |\n"
    assert [p for p, _ in prose_paragraphs(text)] == [
        "Intro.", "DeepNet gains BLEU with depth. Small models,"]
    text = "LayerNorm removes the scale, so\n\n    LN(c x) = LN(x)\n\nDone.\n"
    assert prose_paragraphs(text) == [("LayerNorm removes the scale, so", True), ("Done.", False)]
