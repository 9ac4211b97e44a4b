"""The run spec: the settings a recipe step resolves (settings.py), the presets behind their
defaults (presets.py), experiments as TOML files (configfile.py) and the setting errors
(errors.py)."""
