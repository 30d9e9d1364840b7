#!/bin/sh
# procmap launch wrapper: bind this task to the core procmap chose, then exec the
# application (same PID, so signals reach it; arguments are passed unchanged).
#
#     export SLURM_HOSTFILE=hosts PROCMAP_RANK_MAP=$PWD/hosts.ranks PROCMAP_BIND=1
#     srun -n N --distribution=arbitrary --task-prolog=/path/to/procmap_taskprolog.sh \
#          --cpu-bind=none /path/to/procmap_bind.sh ./app args...
#
# The TaskProlog exports PROCMAP_CPU (the node-local core of this task in the rank
# map); this wrapper binds with sched_setaffinity before the application starts.
# That works on every Slurm from 22.05 on, unlike a TaskProlog's
# SLURM_PROLOG_CPU_MASK (Slurm sets affinity before the TaskProlog runs, and 24.11
# removed the variable).
#
# Binding rule. With --cpu-bind=none a task's affinity is the CPUs its step owns on
# the node. Let S be that set (sorted) and c = PROCMAP_CPU:
#   * S is every online CPU (a whole node, e.g. sbatch --exclusive): bind to CPU c;
#   * S is a part of the node (partial allocation): procmap numbered the cores of
#     the allocation 0, 1, ...: bind to the c-th CPU of S (one stderr line says so);
#   * c is not in S (whole node) or S has c or fewer CPUs (partial): run unbound.
# All tasks of a step on one node see the same S, so they all use the same rule and
# distinct cores stay distinct. When the online CPUs cannot be read, c is bound if it
# is in S, else the c-th CPU of S.
#
# Binding uses taskset (util-linux) when it is on PATH, else python3. Whenever it
# cannot bind (PROCMAP_CPU unset or not a number, PROCMAP_BIND=0, no core to bind
# to, neither taskset nor python3) it still runs the application, unbound, after
# one "procmap_bind: ..." line on stderr. POSIX sh only: it runs once per task.

procmap_bind_say() {
    printf 'procmap_bind: %s\n' "$*" >&2
}

procmap_bind_unbound() {
    procmap_bind_say "$1; running $2 unbound"
}

if [ "$#" -eq 0 ]; then
    procmap_bind_say "usage: procmap_bind.sh APPLICATION [ARGUMENTS...]"
    exit 2
fi

procmap_bind_target() {
    # Sets target (the CPU to bind to) and note (what to say besides), or returns 1
    # after setting why (the reason for running unbound).
    target='' note='' why=''
    cpu="${PROCMAP_CPU-}"
    if [ "${PROCMAP_BIND-}" = 0 ]; then
        why="PROCMAP_BIND=0"
        return 1
    fi
    if [ -z "${PROCMAP_CPU+set}" ]; then
        why="PROCMAP_CPU is not set (no --task-prolog, or no rank map for this task)"
        return 1
    fi
    case "$cpu" in
        '' | *[!0-9]*) why="PROCMAP_CPU='$cpu' is not a CPU number"; return 1 ;;
    esac
    while :; do                           # no leading zeros: sh would read octal
        case "$cpu" in
            0?*) cpu=${cpu#0} ;;
            *) break ;;
        esac
    done
    if [ "${#cpu}" -gt 7 ]; then
        why="PROCMAP_CPU=$cpu is not a CPU number"
        return 1
    fi
    allowed='' online=''
    if [ -r "/proc/$$/status" ]; then
        while IFS=' 	' read -r key value; do
            if [ "$key" = "Cpus_allowed_list:" ]; then
                allowed=$value
                break
            fi
        done < "/proc/$$/status"
    fi
    if [ -z "$allowed" ]; then
        target=$cpu                        # affinity unknown: trust procmap's number
        return 0
    fi
    if [ -r /sys/devices/system/cpu/online ]; then
        read -r online < /sys/devices/system/cpu/online || online=''
    fi
    # One pass over the ranges of S: is c in S, and which is its c-th CPU?
    member='' nth='' count=0
    old_ifs=$IFS
    IFS=,
    set -f
    for range in $allowed; do
        case "$range" in
            *-*) lo=${range%-*} hi=${range#*-} ;;
            *) lo=$range hi=$range ;;
        esac
        hi=${hi%%:*}                       # "a-b:stride/group" is not in this file; be safe
        case "$lo$hi" in '' | *[!0-9]*) continue ;; esac
        if [ "$cpu" -ge "$lo" ] && [ "$cpu" -le "$hi" ]; then
            member=1
        fi
        size=$((hi - lo + 1))
        if [ -z "$nth" ] && [ "$cpu" -lt $((count + size)) ]; then
            nth=$((lo + cpu - count))
        fi
        count=$((count + size))
    done
    set +f
    IFS=$old_ifs
    if [ -n "$online" ] && [ "$allowed" = "$online" ]; then
        if [ -n "$member" ]; then
            target=$cpu
            return 0
        fi
        why="CPU $cpu is not online here (online: $online)"
        return 1
    fi
    if [ -z "$online" ] && [ -n "$member" ]; then
        target=$cpu
        return 0
    fi
    if [ -n "$nth" ]; then
        target=$nth
        note="this task may use CPUs $allowed only: binding node-local core $cpu to CPU $nth (entry $cpu of that list, from 0)"
        [ "$nth" = "$cpu" ] && note=''
        return 0
    fi
    why="node-local core $cpu is beyond the $count CPUs this task may use ($allowed)"
    return 1
}

if ! procmap_bind_target; then
    procmap_bind_unbound "$why" "$1"
    exec "$@"
fi
[ -z "$note" ] || procmap_bind_say "$note"

if command -v taskset > /dev/null 2>&1; then
    exec taskset -c "$target" "$@"
fi
if command -v python3 > /dev/null 2>&1; then
    exec python3 -c '
import os, sys
try:
    os.sched_setaffinity(0, {int(sys.argv[1])})
except (OSError, ValueError) as exc:
    sys.stderr.write("procmap_bind: cannot bind to CPU %s (%s); running %s unbound\n"
                     % (sys.argv[1], getattr(exc, "strerror", None) or exc, sys.argv[2]))
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write("procmap_bind: cannot run %s: %s\n" % (sys.argv[2], getattr(exc, "strerror", None) or exc))
    sys.exit(127)
' "$target" "$@"
fi
procmap_bind_unbound "neither taskset nor python3 is on PATH" "$1"
exec "$@"
