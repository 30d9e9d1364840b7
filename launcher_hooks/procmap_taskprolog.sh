#!/bin/sh
# procmap TaskProlog: hand each task its entry of a procmap rank map.
#
# Use it per step (no administrator needed):
#     export PROCMAP_RANK_MAP=$PWD/hosts.ranks      # written by: procmap slurm ... --rank-map
#     srun --task-prolog=/path/to/procmap_taskprolog.sh ...
# or site-wide with TaskProlog= in slurm.conf (see examples/slurm_taskprolog.sh).
#
# slurmstepd runs it before every task with the task's environment and reads its
# standard output: each "export NAME=value" line sets NAME in the task, and each
# "print TEXT" line goes to the task's output. It prints, when a rank map is found:
#     export PROCMAP_RANK_MAP=<file>
#     export PROCMAP_NEW_RANK=<rank of this task after reordering>
#     export PROCMAP_CPU=<node-local core procmap chose>        (if the map has one)
#     export PROCMAP_BIND=0     only with PROCMAP_BIND=1 when the map puts this task
#                               on another host (the launch wrapper then binds nothing)
#
# It binds nothing itself: Slurm sets a task's affinity before the TaskProlog runs
# (and 24.11 removed SLURM_PROLOG_CPU_MASK). The launch wrapper procmap_bind.sh,
# shipped next to this script, binds the task to PROCMAP_CPU before it execs the
# application:
#     srun --task-prolog=.../procmap_taskprolog.sh --cpu-bind=none .../procmap_bind.sh ./app
#
# Rank map: PROCMAP_RANK_MAP, else $SLURM_SUBMIT_DIR/procmap.$SLURM_JOB_ID.ranks.
# Lines starting with '#' and blank lines are skipped; data line i (from 0) belongs
# to SLURM_PROCID i and holds "new_rank [host [cpu]]".
#
# It never fails: a failing TaskProlog would kill the task. Every problem is one
#     print procmap_taskprolog: <what went wrong>
# line on standard output: slurmstepd writes the text after "print " to the task's
# output, where the user sees it (a TaskProlog's stderr goes nowhere). The exit
# status is always 0. POSIX sh and awk only: it runs once per task, so it must
# start fast (no Python).

procmap_say() {
    # A diagnostic the user sees: slurmstepd prints what follows "print ".
    # printf, not echo: dash's echo would interpret backslashes in a map's line.
    printf 'print procmap_taskprolog: %s\n' "$*"
}

procmap_is_number() {
    case "$1" in
        '' | *[!0-9]*) return 1 ;;
        *) return 0 ;;
    esac
}

procmap_taskprolog() {
    map="${PROCMAP_RANK_MAP:-}"
    if [ -z "$map" ] && [ -n "${SLURM_SUBMIT_DIR:-}" ] && [ -n "${SLURM_JOB_ID:-}" ]; then
        map="$SLURM_SUBMIT_DIR/procmap.$SLURM_JOB_ID.ranks"
        [ -r "$map" ] || return 0          # no map for this job: nothing to say
    fi
    [ -n "$map" ] || return 0
    if [ ! -r "$map" ]; then
        procmap_say "cannot read rank map $map; no PROCMAP_* exports"
        return 0
    fi
    rank="${SLURM_PROCID:-}"
    if ! procmap_is_number "$rank"; then
        procmap_say "SLURM_PROCID is not set; no PROCMAP_* exports"
        return 0
    fi
    line=$(awk -v want="$rank" '
        /^[ \t]*(#|$)/ { next }
        { if (seen++ == want) { print; exit } }' "$map" 2>/dev/null)
    if [ -z "$line" ]; then
        procmap_say "rank map $map has no line for SLURM_PROCID $rank"
        return 0
    fi
    set -f                                  # no globbing of the fields below
    # shellcheck disable=SC2086  # split the line into its fields on purpose
    set -- $line
    new_rank="${1:-}" host="${2:-}" cpu="${3:-}"
    if ! procmap_is_number "$new_rank"; then
        procmap_say "bad line for SLURM_PROCID $rank in $map: $line"
        return 0
    fi
    echo "export PROCMAP_RANK_MAP=$map"
    echo "export PROCMAP_NEW_RANK=$new_rank"
    procmap_is_number "$cpu" || return 0
    echo "export PROCMAP_CPU=$cpu"
    [ "${PROCMAP_BIND:-0}" = 1 ] || return 0
    here="${SLURMD_NODENAME:-$(hostname 2>/dev/null)}"
    if [ -n "$host" ] && [ "$host" != "$here" ]; then
        # The step was not launched with the map's host order (no SLURM_HOSTFILE?):
        # binding to another host's core would be wrong.
        procmap_say "rank $rank runs on $here, the map says $host; not binding"
        echo "export PROCMAP_BIND=0"
    fi
}

procmap_taskprolog || true
exit 0
