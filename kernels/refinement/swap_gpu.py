"""Swap refinement for rank placement on the GPU (twin of :mod:`.swap_cpu`).

Same function and contract as :func:`.swap_cpu.swap_refine`: improve a valid placement
``pe`` (task -> PE, a CuPy int32 array, modified in place) with actions that keep
every PE within its capacity -- a task moves to a free slot of a PE, or two tasks on
different PEs exchange places -- and return the decrease of ``sum_u cost_at(u)``
(= J / 2). Candidate PEs of a task are the PEs of its neighbours, as on the CPU.
``xadj``/``adjncy``/``adjwgt``/``cap``/``prefix``/``dist`` may be NumPy or CuPy.

Algorithm: parallel rounds (kernels in ``refinement/swap.cu``)
-------------------------------------------------------
The CPU twin visits tasks one after another, each acting on the placement its
predecessors left. A round here does, for all tasks at once:

1. *Bookkeeping* -- tasks grouped by PE (``argsort`` of ``pe``, offsets by
   ``searchsorted``) and the free slots ``cap - count`` per PE, rebuilt from ``pe``
   every round (a radix sort: cheaper and simpler than parallel slot updates).
2. *Propose* -- every task that is not done in this pass finds its best action with
   gain ``> min_gain`` against the round's starting placement, with the CPU's
   formulas operation by operation (free-slot moves only into PEs with a free slot).
3. *Select* -- the priority of an action is ``(gain, hash(task, round))`` packed in
   64 bits (the top 32 bits of the gain's order-preserving pattern, so gains within
   ~1e-6 relative rank as equal; 32 bits of a bijective hash, so keys are unique). Every action marks the tasks it moves with
   ``atomicMax``; an action is selected when no task of it or of its neighbourhood
   is marked by a higher key (Luby's local-maximum rule on the conflict graph).
   Selected actions share no task and move no two adjacent tasks, so each gain stays
   exact when all are applied together. The hash breaks chains of equal gains
   (unit-weight stencils are full of them); the top action always wins, so every
   round with a proposal applies at least one action.
4. *Free slots* -- moves into a PE ``q`` are cut to the ``free[q]`` of highest
   priority (swaps leave counts unchanged, moves out are not counted), so no PE ever
   exceeds its capacity.
5. *Apply* -- the selected actions in parallel; their proposers are done for the
   pass. The returned gain is the sum of the applied gains.

A *pass* is a sequence of rounds that ends when no task that is not yet done has an
improving action (or after :data:`ROUNDS_PER_PASS` rounds): like a CPU pass, every
task acts at most once per pass as the proposer (it may still be swap partner of
another). Refinement stops after a pass without any action or after ``max_passes``.

Relation to the CPU twin
------------------------
* Bit-identical: the evaluation of one action (``cost_at``, the swap gain formula
  and its rounding). Given the same placement, a task's best action is the CPU's
  except for ties, which go to the smaller PE, then the free-slot move, then the
  smaller partner (the CPU takes the first in neighbour/slot order).
* Not identical: the resulting placement. Actions chosen in parallel against one
  placement cannot reproduce the CPU's sequential cascade (each CPU action sees all
  earlier ones), so the local optimum reached differs; the quality is similar (the
  tests ask for ``J_gpu <= 1.05 J_cpu`` from the same start). Both end valid and both
  return exactly the decrease they made (up to float rounding of the sum). When the
  GPU stops because a pass found no action, the placement is also a fixed point of
  the CPU twin (same candidates, same gains, same ``min_gain`` test).
* Deterministic: integer atomics only (``atomicMax``), sorts whose result is unique
  (unique keys) or whose order within equal keys cannot matter (tasks of one PE: the
  tie rules above do not depend on their order), and the gain sum is taken on the
  host in ascending task order per round.

Host synchronisation: a few small readbacks per round (the selected actions'
count, the boolean selections of the free-slot limit, the applied gains); no
per-task data crosses the bus. No CUDA graph: the round count is data-dependent and
``flatnonzero``/boolean masks cannot be captured (they synchronise to size their output).
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from ..gpu_common import as_device, f64, i64, kernel, launch

__all__ = ["ROUNDS_PER_PASS", "swap_refine"]

_SRC = "refinement/swap.cu"

#: Safety cap on the parallel rounds of one pass (a pass normally ends much earlier,
#: when no task that has not acted yet has an improving action).
ROUNDS_PER_PASS = 64


class _Problem:
    """Device arrays of one refinement call and the scratch of its rounds."""

    def __init__(self, xadj, adjncy, adjwgt, pe, cap, prefix, dist):
        self.xadj = as_device(xadj, cp.int64)
        self.adjncy = as_device(adjncy, cp.int32)
        self.w = as_device(adjwgt, cp.float64)  # gains in float64, as the CPU twin
        self.pe = pe
        self.cap = as_device(cap, cp.int64)
        self.prefix = as_device(prefix, cp.int64)
        self.dist = as_device(dist, cp.float64)
        self.n = int(self.xadj.size) - 1
        self.k = int(self.cap.size)
        n = self.n
        self.tstart = None  # task offsets per PE, rebuilt every round
        self.base = cp.empty(n, dtype=cp.float64)
        self.gain = cp.empty(n, dtype=cp.float64)
        self.dest = cp.empty(n, dtype=cp.int32)
        self.partner = cp.empty(n, dtype=cp.int32)
        self.key = cp.zeros(n, dtype=cp.uint64)
        self.mark = cp.zeros(n, dtype=cp.uint64)
        self.flag = cp.empty(n, dtype=cp.uint8)
        self.done = cp.zeros(n, dtype=cp.uint8)

    def check_capacities(self) -> None:
        counts = cp.bincount(self.pe, minlength=self.k)
        if int(counts.size) > self.k:
            raise ValueError(f"pe holds a PE id >= k = {self.k}")
        if bool((counts > self.cap).any()):
            raise ValueError("a PE holds more tasks than its capacity")

    def _tasks_by_pe(self) -> tuple[cp.ndarray, cp.ndarray]:
        """``(tasks, free)``: task ids grouped by PE (offsets in ``tstart``) and the
        free slots per PE."""
        tasks = cp.argsort(self.pe)
        # offsets by binary search in the sorted PEs: unlike cp.bincount, no host sync
        self.tstart = cp.searchsorted(self.pe[tasks], cp.arange(self.k + 1, dtype=cp.int32))
        return tasks.astype(cp.int32), self.cap - cp.diff(self.tstart)

    def _propose(self, tasks, free, min_gain: float) -> None:
        launch(kernel(_SRC, "task_costs"), self.n,
               self.xadj, self.adjncy, self.w, self.pe, self.prefix, self.dist, i64(self.n),
               self.base)
        launch(kernel(_SRC, "propose"), self.n,
               self.xadj, self.adjncy, self.w, self.pe, self.prefix, self.dist,
               self.tstart, tasks, free, self.base, self.done, i64(self.n), f64(min_gain),
               self.gain, self.dest, self.partner)

    def _select(self, salt: int) -> cp.ndarray:
        """Ascending ids of the proposers whose actions win the local-maximum rule."""
        self.mark.fill(0)
        launch(kernel(_SRC, "mark_actions"), self.n,
               self.gain, self.dest, self.partner, i64(self.n), np.uint64(salt),
               self.key, self.mark)
        launch(kernel(_SRC, "select_actions"), self.n,
               self.xadj, self.adjncy, self.dest, self.partner, self.key, self.mark,
               i64(self.n), self.flag)
        return cp.flatnonzero(self.flag)

    def _limit_free_slots(self, sel, free) -> cp.ndarray:
        """``sel`` without the free-slot moves beyond ``free[q]`` per target PE ``q``
        (those of highest priority stay)."""
        moving = self.partner[sel] < 0
        movers = sel[moving]
        if movers.size == 0:
            return sel
        by_key = cp.argsort(~self.key[movers])  # keys are unique: a strict order
        movers = movers[by_key]
        q = self.dest[movers].astype(cp.int64)
        # group by target PE, highest priority first within a group; the composite
        # key is unique, so the sort needs no stability
        order = cp.argsort(q * movers.size + cp.arange(movers.size, dtype=cp.int64))
        movers, q = movers[order], q[order]
        rank = cp.arange(movers.size, dtype=cp.int64) - cp.searchsorted(q, q)
        kept = movers[rank < free[q]]
        return cp.sort(cp.concatenate((sel[~moving], kept)))

    def round(self, salt: int, min_gain: float) -> tuple[int, float]:
        """One parallel round: ``(actions applied, their summed gain)``."""
        tasks, free = self._tasks_by_pe()
        self._propose(tasks, free, min_gain)
        sel = self._select(salt)
        if sel.size == 0:
            return 0, 0.0
        sel = self._limit_free_slots(sel, free)
        launch(kernel(_SRC, "apply_actions"), int(sel.size),
               sel, i64(sel.size), self.dest, self.partner, self.pe, self.done)
        gains = self.gain[sel].get()
        return int(sel.size), float(np.sum(gains))


def swap_refine(xadj, adjncy, adjwgt, pe, cap, prefix, dist, *, max_passes: int = 20,
                min_gain: float = 1e-9) -> float:
    """Improve the valid placement ``pe`` (task -> PE, CuPy, modified in place).

    ``cap`` is the slots per PE (every PE must hold at most ``cap[p]`` tasks on
    entry, else ``ValueError``; it stays so). ``prefix``/``dist`` describe the
    hierarchy (``prefix[t] = P_{t+1}``). Returns the decrease of ``sum_u cost_at(u)``
    = J / 2, i.e. J drops by twice the returned value. Parallel rounds, see the module
    docstring; ``max_passes`` bounds the passes (each at most :data:`ROUNDS_PER_PASS`
    rounds), ``min_gain`` the gain an action needs.
    """
    work = pe if (isinstance(pe, cp.ndarray) and pe.dtype == cp.int32
                  and pe.flags.c_contiguous) else as_device(pe, cp.int32).copy()
    prob = _Problem(xadj, adjncy, adjwgt, work, cap, prefix, dist)
    if prob.n == 0:
        return 0.0
    prob.check_capacities()
    total = 0.0
    salt = 0
    for _ in range(max_passes):
        prob.done.fill(0)
        applied = 0
        for _ in range(ROUNDS_PER_PASS):
            count, gain = prob.round(salt, min_gain)
            salt += 1
            if count == 0:
                break
            applied += count
            total += gain
        if applied == 0:
            break
    if work is not pe:
        pe[...] = work if isinstance(pe, cp.ndarray) else cp.asnumpy(work)
    return total
