#!/bin/bash
# Communication-aware placement of an MPI job under Slurm with procmap:
#   1. profile: a short run that writes the communication matrix (app.comm),
#   2. map:     procmap slurm -> SLURM_HOSTFILE (one host per rank) + CPU lists,
#   3. run:     srun --distribution=arbitrary with that hostfile.
#
# Submit with:  sbatch examples/slurm_job.sh
# Adapt APP, the profiling step and HIERARCHY to your application and machine.
#
#SBATCH --job-name=procmap-halo3d
#SBATCH --nodes=6
#SBATCH --ntasks=192
#SBATCH --ntasks-per-node=32
#SBATCH --exclusive            # map_cpu bindings need whole nodes;
                               # procmap_bind.sh also copes with partial nodes
#SBATCH --time=00:30:00

set -euo pipefail

APP=${APP:-./halo3d}                       # the MPI application
HIERARCHY=${HIERARCHY:-4:8:6}              # 4 cores/socket, 8 sockets/node, 6 nodes
DISTANCE=${DISTANCE:-1:10:100}
WORK=${SLURM_SUBMIT_DIR:-$PWD}
COMM=$WORK/app.comm
HOSTS=$WORK/procmap.$SLURM_JOB_ID.hosts
# The TaskProlog finds this rank map by its default name (procmap_taskprolog.sh).
RANKS=$WORK/procmap.$SLURM_JOB_ID.ranks

# 1. Profile. An mpi4py application wraps its communicator in
#    procmap.launcher_hooks.profiler.CommProfiler and calls comm.write(...) at the
#    end; here a hypothetical --profile-steps/--write-comm option does that. Skip
#    the step when a matrix from an earlier run exists.
if [ ! -s "$COMM" ]; then
    srun -n "$SLURM_NTASKS" "$APP" --profile-steps 10 --write-comm "$COMM"
fi

# 2. Map. Inside the job, procmap reads SLURM_JOB_NODELIST, SLURM_JOB_CPUS_PER_NODE
#    and SLURM_NTASKS itself. On any problem it prints one line on stderr and exits
#    2; the job then runs with Slurm's default placement.
REPORT=$WORK/procmap.$SLURM_JOB_ID.json
if procmap slurm "$COMM" --hierarchy "$HIERARCHY" --distance "$DISTANCE" \
        --cpu-bind --rank-map "$RANKS" -o "$HOSTS" --quiet --json > "$REPORT"; then
    # One map_cpu list fits every node, or none does: then the TaskProlog exports
    # each task's core (PROCMAP_CPU) and the wrapper procmap_bind.sh binds the task
    # before it execs the application (a TaskProlog cannot bind: Slurm sets the
    # affinity before it runs, and 24.11 removed SLURM_PROLOG_CPU_MASK).
    # procmap prints a map_cpu line only where srun accepts it: one list for every
    # node, and whole nodes (on a partial node it prints the wrapper's line instead).
    MAP_CPU=$(python3 -c 'import json, sys
report = json.load(open(sys.argv[1]))
cpus = report["common_cpu_list"]
uses_map = any("--cpu-bind=map_cpu:" in c for c in report["commands"])
print(",".join(map(str, cpus)) if cpus and uses_map else "")' "$REPORT")
    # 3. Run. SLURM_HOSTFILE is set for this srun only: exported at submission
    #    it would clash with --nodes.
    if [ -n "$MAP_CPU" ]; then
        SLURM_HOSTFILE=$HOSTS srun -n "$SLURM_NTASKS" --distribution=arbitrary \
            --cpu-bind=map_cpu:"$MAP_CPU" "$APP"
    else
        HOOKS=$(python3 -c 'import os; from procmap.launcher_hooks import slurm
print(os.path.dirname(slurm.taskprolog_path()))')
        SLURM_HOSTFILE=$HOSTS PROCMAP_RANK_MAP=$RANKS PROCMAP_BIND=1 \
            srun -n "$SLURM_NTASKS" --distribution=arbitrary \
            --task-prolog="$HOOKS/procmap_taskprolog.sh" --cpu-bind=none \
            "$HOOKS/procmap_bind.sh" "$APP"
    fi
else
    echo "procmap failed; running with Slurm's default placement" >&2
    srun -n "$SLURM_NTASKS" "$APP"
fi
