#!/bin/sh
# Example site TaskProlog for procmap (slurm.conf:  TaskProlog=/etc/slurm/taskprolog.sh).
#
# slurmstepd runs the TaskProlog before every task, with the task's environment,
# applies the "export NAME=value" lines it prints and writes
# the text of its "print ..." lines to the task's output; its stderr goes nowhere,
# so procmap's diagnostics are "print procmap_taskprolog: ..." lines. This one
# keeps the site's own exports and appends procmap's:
#   PROCMAP_RANK_MAP, PROCMAP_NEW_RANK and PROCMAP_CPU (procmap's core for the task).
# A TaskProlog binds nothing (Slurm sets the affinity before it runs, and 24.11
# removed SLURM_PROLOG_CPU_MASK): to bind, the job launches through the shipped
# wrapper, which binds the task to PROCMAP_CPU and execs the application:
#   srun --distribution=arbitrary --cpu-bind=none /path/to/procmap_bind.sh ./app
# procmap's part is active only when the job wrote a rank map, i.e. ran
#   procmap slurm app.comm -H ... --rank-map "$SLURM_SUBMIT_DIR/procmap.$SLURM_JOB_ID.ranks"
# (or exported PROCMAP_RANK_MAP) before its srun.
#
# A TaskProlog must never fail and must be fast: no Python here, just the shipped
# POSIX script, copied next to this one by the administrator:
#   python3 -c 'from procmap.launcher_hooks.slurm import taskprolog_path; print(taskprolog_path())'

# --- site-specific exports would go here -----------------------------------------
# echo "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}"

# --- procmap ----------------------------------------------------------------------
PROCMAP_TASKPROLOG=${PROCMAP_TASKPROLOG:-$(dirname "$0")/procmap_taskprolog.sh}
if [ -r "$PROCMAP_TASKPROLOG" ]; then
    sh "$PROCMAP_TASKPROLOG" || true
fi
exit 0
