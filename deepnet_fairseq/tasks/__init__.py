"""fairseq tasks of the plugin, registered when fairseq loads it: ``translation_monitored``
(``monitored``: per-layer training monitors for any translation run)."""

from . import monitored  # noqa: F401  (registers the task)
