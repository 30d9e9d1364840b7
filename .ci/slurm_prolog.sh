#!/bin/sh
# Site Prolog of the CI cluster (.ci/slurm_up.sh): procmap's prolog mode, the way an
# administrator would wire it. slurmd runs it as root on every node of a job at
# allocation time (PrologFlags=Alloc), with SLURM_JOB_ID, SLURM_NODELIST,
# SLURM_JOB_CPUS_PER_NODE, SLURM_JOB_NTASKS and SLURM_JOB_WORK_DIR set.
#
# A job opts in by having procmap.comm in its working directory. The Prolog then
# writes, next to it,
#     procmap.<job id>.hosts    SLURM_HOSTFILE for srun --distribution=arbitrary
#     procmap.<job id>.ranks    the rank map the TaskProlog (procmap_taskprolog.sh)
#                               finds by this name and turns into PROCMAP_CPU
# and procmap's one stderr line (only when the mapping did not land and it fell back
# to Slurm's block placement) in procmap.<job id>.<node>.prolog.err.
# procmap always exits 0 in a prolog, and so does this script: a failing Prolog
# drains the node.
work=${SLURM_JOB_WORK_DIR:-}
[ -n "$work" ] && [ -e "$work/procmap.comm" ] || exit 0
cd "$work" || exit 0
job=${SLURM_JOB_ID:?}
PROCMAP_PROLOG=1 "${PROCMAP_PYTHON:-python3}" -m procmap slurm procmap.comm --cpu-bind \
    --rank-map "procmap.$job.ranks" -o "procmap.$job.hosts" --timeout 20 \
    > /dev/null 2> "procmap.$job.${SLURMD_NODENAME:-node}.prolog.err"
exit 0
