"""Whether procmap runs inside a prolog, and a prolog's default time budget.

Standard library only: the command line asks these questions while it builds its
parser and handles signals, before anything heavy is imported (docs/design.md
section 5). :mod:`.prolog` implements what prolog mode does.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["PROLOG_ENV", "PROLOG_TIMEOUT", "is_prolog_context"]

#: Set to 1 in a prolog's environment: ``procmap slurm`` then never fails.
PROLOG_ENV = "PROCMAP_PROLOG"

#: Seconds a prolog run may take when ``--timeout`` does not say (or says nonsense):
#: long enough to map tens of thousands of ranks with a warm kernel cache, short
#: enough not to hold up a job's start noticeably.
PROLOG_TIMEOUT = 30.0


def is_prolog_context(flag: bool, environ: Mapping[str, str] | None = None) -> bool:
    """``--prolog`` given, or ``PROCMAP_PROLOG=1`` in the environment."""
    env = os.environ if environ is None else environ
    return bool(flag) or env.get(PROLOG_ENV, "").strip() in ("1", "yes", "true")
