"""docs/running.md's table of the cases each class test generates, counted from the tests' own
parametrisations (the lists they generate from the declarations and parsers), so a declaration
added or removed changes the table, and the docs must show it. The table is generated:
``python tests/unit/test_class_counts.py`` prints it, to paste between its markers."""

import os
import sys

if __name__ == "__main__":  # run as a script: this checkout and the helpers, as under pytest
    TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:0] = [os.path.dirname(TESTS), TESTS]

import pytest  # noqa: E402

from support import REPO  # noqa: E402
import test_file_layer  # noqa: E402
import test_hostile_inputs  # noqa: E402
import test_hostile_exits  # noqa: E402
import test_hostile_records  # noqa: E402
import test_hostile_processes  # noqa: E402
import test_hostile_lengths  # noqa: E402
import test_hostile_runtime  # noqa: E402
import test_launch  # noqa: E402
import test_run_owns_its_checkpoints  # noqa: E402
import test_settings_properties  # noqa: E402
import test_signals_never_lost  # noqa: E402

CLASSES = [  # (module, test, what its cases try), in the order docs/running.md tells of them
    (test_hostile_processes, "test_a_status_is_read_as_its_runs_lock_says",
     "each state of a run's lock x each recorded status, at each reader"),
    (test_hostile_records, "test_no_record_is_written_over_one_this_code_cannot_read",
     "every kind of record against every record of it the code cannot read, generated from "
     "`records.KINDS` and `FIELDS`"),
    (test_hostile_exits, "test_a_special_file_named_like_a_checkpoint_is_refused_unopened",
     "each door of checkpoint reading against each special file the layer names"),
    (test_hostile_exits, "test_a_full_disk_names_the_path_at_every_door_of_the_layer",
     "a full disk at every door of the file layer that writes data (a 1 MiB tmpfs, filled, in a "
     "child's mount namespace)"),
    (test_hostile_exits, "test_an_output_whose_directory_is_not_there_is_refused_in_one_line",
     "an output whose directory is missing, for every output of every tool"),
    (test_hostile_exits, "test_a_tool_writes_nothing_into_the_run_of_the_checkpoint_it_reads",
     "a tool that reads a checkpoint writing into its run, for each output of each of them"),
    (test_hostile_exits, "test_a_special_file_where_text_is_read_is_refused_at_once",
     "each door the scan of the text-reading modules finds, against each special file"),
    (test_launch, "test_every_spelling_of_every_refused_destination_is_refused",
     "every spelling of every `TRAIN_ARGS` option the recipe refuses, from fairseq-train's own "
     "parser"),
    (test_settings_properties, "test_every_bound_of_every_setting_is_where_it_is_declared",
     "the edges of every declared bound"),
    (test_settings_properties, "test_every_whole_number_setting_takes_ascii_digits_only",
     "every whole-number setting against other scripts' digits"),
    (test_settings_properties, "test_a_language_code_that_would_split_a_file_name_is_refused",
     "every language-code setting against codes that split file names"),
    (test_settings_properties, "test_a_runs_entry_sets_only_what_may_differ_between_runs",
     "every setting's scope in a `RUNS` entry"),
    (test_hostile_runtime, "test_a_run_is_resumed_only_with_the_settings_it_trained_with",
     "a run resumed under each changed training setting"),
    (test_hostile_runtime, "test_every_data_setting_changed_is_refused_by_prepare",
     "prepare under each changed data setting"),
    (test_hostile_runtime, "test_every_data_setting_changed_is_refused_by_train_evaluate_and_the_sweep",
     "train, evaluate and the sweep on data prepared under each changed data setting"),
    (test_file_layer, "test_no_door_of_the_layer_follows_a_link_planted_in_a_marked_directory",
     "a link planted at each door of the file layer"),
    (test_file_layer, "test_the_scan_sees_each_kind_of_write",
     "each kind of direct write the source scan must see"),
    (test_hostile_inputs, "test_one_file_in_two_roles_is_refused", "one file in two roles"),
    (test_hostile_inputs, "test_a_name_with_and_without_gz_is_refused",
     "a name with and without `.gz`"),
    (test_hostile_inputs, "test_an_empty_or_misaligned_split_names_the_users_files",
     "an empty or misaligned split"),
    (test_hostile_inputs, "test_a_config_file_sets_only_what_its_dataset_reads",
     "every dataset, `SOURCE` and setting a dataset may not read"),
    (test_hostile_lengths, "test_a_pair_fairseq_would_refuse_is_refused_before_training",
     "a pair at and one token over each limit, for each dataset layout, split, limit and side "
     "of it"),
    (test_hostile_lengths, "test_the_limits_are_fairseqs_under_options_that_move_them",
     "each fairseq-train option that moves a limit, in each split"),
    (test_run_owns_its_checkpoints, "test_a_checkpoint_of_other_settings_is_refused_naming_both",
     "a checkpoint of each other model, seed or rate where a run resumes"),
    (test_signals_never_lost, "test_a_sigterm_at_any_moment_of_a_parallel_stage_interrupts_it",
     "a SIGTERM at generated moments of a parallel stage's start-up and work"),
]

BEGIN = "<!-- class counts table: generated by python tests/unit/test_class_counts.py -->\n"
END = "<!-- end of the class counts table -->"


def cases(test) -> int:
    """How many cases pytest generates from TEST's parametrize marks (their product), times
    the examples hypothesis draws where it draws them."""
    drawn = getattr(test, "_hypothesis_internal_use_settings", None)
    count = drawn.max_examples if getattr(test, "is_hypothesis_test", False) and drawn else 1
    for mark in getattr(test, "pytestmark", []):
        if mark.name == "parametrize":
            count *= len(mark.args[1])
    return count


def markdown_table() -> str:
    """docs/running.md's table: each class, its number of cases, the file of its test."""
    rows = [f"| {what} | {cases(getattr(module, name))} | `tests/unit/{module.__name__}.py` |\n"
            for module, name, what in CLASSES]
    return "| what is tried | cases | test |\n|---|---|---|\n" + "".join(rows)


@pytest.mark.parametrize("module, name, what", CLASSES, ids=[c[1] for c in CLASSES])
def test_each_class_is_generated(module, name, what):
    assert cases(getattr(module, name)) > 1, f"{name}: not generated"


def test_the_docs_table_of_class_counts_is_generated():
    with open(os.path.join(REPO, "docs", "running.md"), encoding="utf-8") as handle:
        text = handle.read()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "docs/running.md: no table markers"
    shown = text.split(BEGIN)[1].split(END)[0]
    assert shown == markdown_table(), (
        "docs/running.md is stale: paste `python tests/unit/test_class_counts.py`")


if __name__ == "__main__":
    sys.stdout.write(markdown_table())
