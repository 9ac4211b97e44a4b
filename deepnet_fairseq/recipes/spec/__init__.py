"""The run spec, above the datasets it names: the settings a recipe step resolves
(settings.py), the presets behind their defaults (presets.py), experiments as TOML files
(configfile.py) and where a run's files live (paths.py). The setting errors and the presets'
provenance tags are in ``base/``."""
