"""fairscale 0.4.13 as a reference for the tests only: an independent implementation (fairseq's
own ZeRO-1 is fairscale's OSS) to compare the plugin's with. The product does not install it
(scripts/install.sh): fairseq imports fairscale whenever it is installed, and nothing of the
plugin or the recipes needs it.

The session fixture ``fairscale_reference`` installs it once (``pip install --no-deps``: pure
Python, its own dependencies, torch and numpy, are here already) into pytest's cache folder,
``.pytest_cache/d/reference/fairscale-0.4.13`` (ignored by git, kept from one session to the
next), and returns that folder, to be put on the PYTHONPATH of the reference processes alone
(tests/slow/test_zero.py)."""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

FAIRSCALE = "fairscale==0.4.13"
_NAME = FAIRSCALE.replace("==", "-")  # the cache folder, and the installed metadata's stem


def install_reference(folder: str) -> None:
    """``pip install --no-deps`` FAIRSCALE into ``folder`` (which must not exist yet), keeping
    only the package and its metadata; a clear test failure if pip cannot."""
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{_NAME}-", dir=parent)  # renamed when complete
    try:
        # --no-build-isolation: its sdist builds with the setuptools and wheel
        # scripts/install.sh installs, as the install once did
        command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                   "--disable-pip-version-check", "--progress-bar", "off", "--target", staging,
                   FAIRSCALE]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
            code, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as timeout:
            code, output = "no result after 600 s", str(timeout.stdout or "")
        if code != 0 or not os.path.isdir(os.path.join(staging, "fairscale")):
            pytest.fail(
                f"could not install the reference {FAIRSCALE} for the comparison with "
                f"fairscale's OSS (pip: {code}). fairscale is a test-only reference, not part of "
                f"the install; the first session that compares with it downloads it from the "
                f"package index (PyPI), which must be reachable then, and later sessions reuse "
                f"{folder}. Without network access, install it there from a copy of its sdist: "
                f"pip install --no-deps --no-build-isolation --target {folder} "
                f"fairscale-0.4.13.tar.gz\n"
                f"command: {' '.join(command)}\npip's last output:\n{output[-3000:]}",
                pytrace=False)
        # the sdist also installs top-level 'benchmarks' and 'bin' folders, which would shadow
        # this repository's benchmarks/ on the reference processes' path
        for name in os.listdir(staging):
            if name != "fairscale" and not name.startswith(f"{_NAME}.dist-info"):
                path = os.path.join(staging, name)
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        try:
            os.rename(staging, folder)
        except OSError:  # another session finished first: keep its copy
            if not os.path.isdir(os.path.join(folder, "fairscale")):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@pytest.fixture(scope="session")
def fairscale_reference(request, tmp_path_factory) -> str:
    """The folder holding the reference fairscale (module docstring), installed if missing."""
    # pytest's cache, absent under -p no:cacheprovider: then a copy for this session only
    cache = getattr(request.config, "cache", None)
    parent = str(cache.mkdir("reference") if cache is not None
                 else tmp_path_factory.mktemp("reference"))
    folder = os.path.join(parent, _NAME)
    if not os.path.isdir(os.path.join(folder, f"{_NAME}.dist-info")):
        shutil.rmtree(folder, ignore_errors=True)  # an incomplete copy (there should be none)
        install_reference(folder)
    return folder
