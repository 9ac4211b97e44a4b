"""Small command-line helpers of the plugin."""

from . import USER_DIR


def print_user_dir() -> None:
    """Print the path to pass as ``--user-dir`` (handy when the package is pip-installed)."""
    print(USER_DIR)
