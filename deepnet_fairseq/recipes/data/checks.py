"""Whether prepared data is the data of these settings: its record (``config.json``) against
the settings' data values. Asked by prepare before it writes, and by train, evaluate and the
sweep before they use the data."""

import os
from typing import Optional

from ..spec.paths import paths
from ..spec.settings import DATA, SettingError, Settings, affecting, changed
from ...storage.fileio import RecordError
from ...storage.records import read_record


def prepared_otherwise(cfg: Settings, data: str, using: bool = False) -> Optional[str]:
    """Why DATA, already (partly) prepared, is not the data of these settings (its record,
    ``config.json``, says other data settings), or None. Asked by prepare, and by train,
    evaluate and the sweep before they write anything (``data_otherwise``, USING: a step that
    uses the data, not one that makes it, so a setting it leaves unset is no difference: the
    raw text's paths, TRAIN_TEXT and the like, are given to prepare and not repeated after)."""
    started = [p for p in ("raw/.done", "spm.model", "bin/.done")
               if os.path.exists(os.path.join(data, p))]
    try:
        record = read_record(os.path.join(data, "config.json"), "data-config")
    except RecordError as err:  # prepare would write over it: refused, started or not
        return str(err)
    if not started or record is None:
        return None
    if record.get("dataset") != cfg.dataset:
        different = [f"dataset {record.get('dataset')} before, {cfg.dataset} now"]
    else:
        names = [n for n in affecting(DATA) if not using or n in cfg.values]
        different = changed(names, {k: v["value"] for k, v in
                                    record.get("settings", {}).items()}, cfg.values)
    if not different:
        return None
    return (f"{data} holds data prepared with other settings ({'; '.join(different)}): using "
            f"it would train or evaluate on other data than these settings say. Set the values "
            f"it was prepared with, choose another DEEPNET_WORK, or delete {data} (the recipes "
            f"made it) to prepare it again")


def data_otherwise(cfg: Settings) -> None:
    """Refuse (a SettingError naming each setting and both values) prepared data whose record
    says other data settings than CFG's: a run would train or be evaluated on other data than
    its records say (VOCAB=2000 recorded, 1000 pieces used). Prepare's own check."""
    problem = prepared_otherwise(cfg, paths(cfg).data_dir, using=True)
    if problem:
        raise SettingError(problem)
