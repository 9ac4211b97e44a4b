"""What every preset is made of: values, each with its provenance tag and the reason for it
(presets.py says what the tags mean). Below the presets and the datasets' declarations, which
both build presets."""

from dataclasses import dataclass
from typing import Dict, List, Tuple

PAPER, ADMIN, CHOSEN = "paper", "admin-torch", "chosen"


@dataclass(frozen=True)
class Value:
    value: str
    tag: str  # PAPER | ADMIN | CHOSEN
    why: str


class Preset:
    """One named set of defaults: a dataset, a size, a model width or a machine."""

    def __init__(self, kind: str, name: str, about: str, rows: List[Tuple[str, str, str, str]]):
        self.kind, self.name, self.about = kind, name, about
        self.values: Dict[str, Value] = {}
        for setting, value, tag, why in rows:
            assert setting not in self.values, f"{kind} {name}: {setting} twice"
            self.values[setting] = Value(value, tag, why)

    def source(self, setting: str) -> str:
        """Where a value came from, as --dry-run shows it: ``dataset wmt17 [admin-torch]``."""
        return f"{self.kind} {self.name} [{self.values[setting].tag}]"

    def extend(self, name: str, about: str, rows: List[Tuple[str, str, str, str]]) -> "Preset":
        """A preset of the same kind with these values, ROWS added or replacing them: a new
        dataset that starts from another's defaults."""
        replaced = {row[0] for row in rows}
        kept = [(setting, v.value, v.tag, v.why) for setting, v in self.values.items()
                if setting not in replaced]
        return Preset(self.kind, name, about, kept + list(rows))
