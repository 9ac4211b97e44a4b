"""``python -m deepnet_fairseq``: the ``deepnet`` command (``front.py``)."""

import sys

from .front import main

sys.exit(main())
