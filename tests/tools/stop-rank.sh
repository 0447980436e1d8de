#!/bin/sh
# stop-rank.sh R COMMAND...: under mpirun, run COMMAND; on rank R, stop it
# (SIGSTOP) a second in, as a rank that hangs or was suspended would be.
# Its pid goes to $STOPPED_PID, for the caller to kill afterwards.
r=$1
shift
if [ "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-}}" != "$r" ]; then
	exec "$@"
fi
"$@" &
p=$!
echo "$p" >"$STOPPED_PID"
trap 'kill -KILL $p' TERM INT
sleep 1
kill -STOP "$p"
wait "$p"
