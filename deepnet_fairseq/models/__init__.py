"""fairseq models of this plugin; importing a module registers its model and architectures."""

from . import method_transformers  # noqa: F401  (every declared method, DeepNet included)
from . import deepnet_transformer  # noqa: F401  (DeepNet's extra sizes)
from . import deepnet_lm  # noqa: F401  (DeepNet's encoder-only and decoder-only models)
