"""The result of a mapping engine: task -> PE plus how it was made."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .objective import Evaluation


@dataclass
class Mapping:
    """A task -> PE assignment.

    Attributes
    ----------
    pes : int32 array, ``pes[i]`` is the PE of task ``i`` (PE numbering of docs/design.md section 2).
    engine : what produced it (``"hm"``, ``"im"``, ``"block"``, ``"file"``, ...).
    device : ``"cpu"`` or ``"gpu"``.
    seed : the seed used, if any.
    seconds : wall time per phase, in seconds.
    evaluation : J, cut, traffic per level and balance of ``pes``.
    """

    pes: np.ndarray
    engine: str
    evaluation: Evaluation
    device: str = "cpu"
    seed: int | None = None
    seconds: dict = field(default_factory=dict)

    @property
    def J(self):
        return self.evaluation.J

    def as_dict(self) -> dict:
        return {"engine": self.engine, "device": self.device, "seed": self.seed,
                "seconds": self.seconds, **self.evaluation.as_dict()}
