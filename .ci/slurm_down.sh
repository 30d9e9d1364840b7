#!/usr/bin/env bash
# Stop the daemons .ci/slurm_up.sh started, by the PIDs it listed in DIR/pids (never
# by name: other Slurm daemons on this host are not ours), newest first. A PID whose
# process is no longer the daemon listed (it exited, the PID was reused) is skipped.
#     .ci/slurm_down.sh DIR        (default: $PROCMAP_SLURM_DIR)
set -uo pipefail

dir=${1:-${PROCMAP_SLURM_DIR:-}}
if [ -z "$dir" ] || [ ! -r "$dir/pids" ]; then
    echo "slurm_down: no $dir/pids: nothing to stop" >&2
    exit 0
fi
ours() {  # ours PID NAME: is PID still the daemon NAME (slurmd-n1 runs as "slurmd")?
    [ "$(cat "/proc/$1/comm" 2> /dev/null)" = "${2%%-*}" ]
}
pids=''
while read -r pid name; do
    ours "$pid" "$name" && pids="$pid $pids" && kill -TERM "$pid" 2> /dev/null
done < <(tac "$dir/pids")
# Up to 10 s for a clean exit, then SIGKILL what is left.
for _ in $(seq 20); do
    alive=''
    for pid in $pids; do
        kill -0 "$pid" 2> /dev/null && alive="$alive $pid"
    done
    [ -z "$alive" ] && exit 0
    sleep 0.5
done
for pid in $alive; do
    kill -KILL "$pid" 2> /dev/null || true
done
exit 0
