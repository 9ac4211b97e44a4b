"""Record tests/data/zero_reference.json: fairscale 0.4.13's OSS (fairseq's own ZeRO-1) in each
precision, two torchrun processes on the suite's toy data, 6 updates each: launch 0 of
tests/slow/test_zero.py, kept as tests/zero_reference.py describes.

    python tests/data/record_zero_reference.py

Run it again after a change of fairseq, torch or the toy data, then check the record against a
fresh launch and the plugin's runs with ``python -m pytest tests/slow/test_zero.py -m costly``.
It installs the reference fairscale where the suite keeps it (.pytest_cache/d/reference, as
tests/reference_fairscale.py does), which needs the package index once."""

import json
import os
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(TESTS), str(TESTS / "slow")]

from reference_fairscale import _NAME, FAIRSCALE, install_reference  # noqa: E402
import support  # noqa: E402
import zero_reference  # noqa: E402
from test_zero import PRECISIONS, TWO, ZERO, checkpoint, launch, log  # noqa: E402
from test_distributed import by_update, train_inner  # noqa: E402


def main() -> None:
    folder = TESTS.parent / ".pytest_cache" / "d" / "reference" / _NAME
    if not (folder / f"{_NAME}.dist-info").is_dir():
        install_reference(str(folder))
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "toy").mkdir()
        data = support.make_toy_data(root / "toy")
        launch(root, "reference", {
            f"{precision}-fairscale": ([str(data), *TWO, *ZERO, *flags, "--max-update", "6",
                                        "--no-epoch-checkpoints"],
                                       {"sharding": "fairscale",
                                        "steps": str(root / f"{precision}-fairscale")})
            for precision, flags in PRECISIONS.items()}, pythonpath=[str(folder)])
        runs = {precision: zero_reference.record_run(
                    by_update(train_inner(log(root, f"{precision}-fairscale"))),
                    checkpoint(root / f"{precision}-fairscale" / "checkpoint_last.pt"))
                for precision in PRECISIONS}
    record = {"recorded_from": f"{FAIRSCALE} OSS through fairseq's --zero-sharding os, "
                               "tests/data/record_zero_reference.py",
              "machine": zero_reference.machine(), "runs": runs}
    staging = zero_reference.GOLDEN + ".tmp"
    with open(staging, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.replace(staging, zero_reference.GOLDEN)
    print(f"wrote {zero_reference.GOLDEN}: {', '.join(sorted(runs))}, "
          f"{sum(len(r['tensors']) for r in runs.values())} tensors, on {record['machine']}")


if __name__ == "__main__":
    main()
