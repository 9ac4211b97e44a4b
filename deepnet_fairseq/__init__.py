"""deepnet_fairseq: DeepNet (DeepNorm) Transformers for fairseq.

Load it with ``fairseq-train --user-dir <path of this package>`` (see the README); importing it
registers the ``deepnet_transformer`` model and architectures, and lets torch >= 2.6 load
fairseq checkpoints (``checkpoint_compat``).
"""

import os

from . import checkpoint_compat, diagnostics, models  # noqa: F401  (imported for their registrations)

USER_DIR = os.path.dirname(os.path.abspath(__file__))
"""The path to pass as ``--user-dir`` for this copy of the package."""
