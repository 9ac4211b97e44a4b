"""fairseq models of this plugin; importing a module registers its model and architectures."""

from . import deepnet_transformer  # noqa: F401
from . import method_transformers  # noqa: F401
from . import deepnet_lm  # noqa: F401
