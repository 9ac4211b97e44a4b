"""docs/running.md counts the generated cases of each class test: the counts here are read from
the tests' own parametrisations (the lists they generate from the declarations and parsers),
so a declaration added or removed changes them, and the docs must say so."""

import os

import pytest

from support import REPO
import test_file_layer  # noqa: E402
import test_hostile_inputs  # noqa: E402
import test_hostile_exits  # noqa: E402
import test_hostile_records  # noqa: E402
import test_hostile_processes  # noqa: E402
import test_hostile_lengths  # noqa: E402
import test_hostile_runtime  # noqa: E402
import test_launch  # noqa: E402
import test_settings_properties  # noqa: E402

CLASSES = [  # (module, test, the phrase of docs/running.md that counts it)
    (test_launch, "test_every_spelling_of_every_refused_destination_is_refused",
     "the recipe refuses, from fairseq-train's own parser, {}"),
    (test_settings_properties, "test_every_bound_of_every_setting_is_where_it_is_declared",
     "the edges of every declared bound, {}"),
    (test_settings_properties, "test_every_whole_number_setting_takes_ascii_digits_only",
     "against other scripts' digits, {}"),
    (test_settings_properties, "test_a_language_code_that_would_split_a_file_name_is_refused",
     "codes that split file names, {}"),
    (test_settings_properties, "test_a_runs_entry_sets_only_what_may_differ_between_runs",
     "scope in a `RUNS` entry, {}"),
    (test_hostile_runtime, "test_a_run_is_resumed_only_with_the_settings_it_trained_with",
     "under each changed training setting, {}"),
    (test_hostile_runtime, "test_every_data_setting_changed_is_refused_by_prepare",
     "prepare under each changed data setting, {}"),
    (test_hostile_runtime, "test_every_data_setting_changed_is_refused_by_train_evaluate_and_the_sweep",
     "train, evaluate and the sweep on data prepared under each changed data setting, {}"),
    (test_file_layer, "test_no_door_of_the_layer_follows_a_link_planted_in_a_marked_directory",
     "at each door of the file layer, {}"),
    (test_hostile_processes, "test_a_status_is_read_as_its_runs_lock_says",
     "x 4 recorded statuses, {} cases"),
    (test_file_layer, "test_the_scan_sees_each_kind_of_write",
     "the source scan must see, {}"),
    (test_hostile_inputs, "test_one_file_in_two_roles_is_refused", "one file in two roles, {}"),
    (test_hostile_inputs, "test_a_name_with_and_without_gz_is_refused",
     "a name with and without `.gz`, {}"),
    (test_hostile_inputs, "test_an_empty_or_misaligned_split_names_the_users_files",
     "an empty or misaligned split, {}"),
    (test_hostile_inputs, "test_a_config_file_sets_only_what_its_dataset_reads",
     "every dataset, `SOURCE` and setting a dataset may not read, {}"),
    (test_hostile_records, "test_no_record_is_written_over_one_this_code_cannot_read",
     "every record of it the code cannot read, generated from `records.KINDS` and `FIELDS`, {} "
     "cases"),
    (test_hostile_exits, "test_a_special_file_named_like_a_checkpoint_is_refused_unopened",
     "against each special file the layer names, {} cases"),
    (test_hostile_exits, "test_a_full_disk_names_the_path_at_every_door_of_the_layer",
     "(a 1 MiB tmpfs, filled, in a child's mount namespace), {} cases"),
    (test_hostile_exits, "test_an_output_whose_directory_is_not_there_is_refused_in_one_line",
     "for every output of every tool, {} cases"),
    (test_hostile_exits, "test_a_tool_writes_nothing_into_the_run_of_the_checkpoint_it_reads",
     "for each output of each of them, {} cases"),
    (test_hostile_exits, "test_a_special_file_where_text_is_read_is_refused_at_once",
     "against each special file, {} cases"),
    (test_hostile_lengths, "test_a_pair_fairseq_would_refuse_is_refused_before_training",
     "for each dataset layout, split, limit and side of it, {}"),
    (test_hostile_lengths, "test_the_limits_are_fairseqs_under_options_that_move_them",
     "each fairseq-train option that moves a limit, in each split, {}"),
]


def cases(test) -> int:
    """How many cases pytest generates from TEST's parametrize marks (their product)."""
    count = 1
    for mark in getattr(test, "pytestmark", []):
        if mark.name == "parametrize":
            count *= len(mark.args[1])
    return count


@pytest.mark.parametrize("module, name, phrase", CLASSES, ids=[c[1] for c in CLASSES])
def test_the_docs_count_each_class(module, name, phrase):
    with open(os.path.join(REPO, "docs", "running.md"), encoding="utf-8") as handle:
        text = " ".join(handle.read().split())
    count = cases(getattr(module, name))
    assert count > 1, f"{name}: not generated"
    assert phrase.format(count) in text, (name, count)
