#!/usr/bin/env bash
# An archzoo run under MPI (ARCH, default impala; the mpich wheel puts mpiexec in the venv's
# bin/). Rank 0 and the lowest ranks hold the architecture's servers, the rest are actors;
# hydra numbers the ranks in the host file's order, so the first host gets the servers.
#
# One machine, 1 learner + 2 actors:
#   launch/mpirun.sh
# Several machines (MPICH hydra starts the remote ranks over ssh; one host per line in the
# file, optionally host:slots, e.g. "nodeA:1" then "nodeB:8" keeps the learner alone):
#   HOSTFILE=hosts.txt NP=9 IFACE=eth0 launch/mpirun.sh --env CartPole-v1
# The same python environment must exist at the same path on every host (docs/multinode.md).
# IFACE: the interface hydra and the ranks use between hosts; LAUNCHER_EXEC: a program to
# use in place of ssh (hydra calls it as PROGRAM -x HOST COMMAND...).
# The job outlives a dead rank, so an asynchronous run goes on without a dead actor: hydra
# runs with -disable-auto-cleanup and every rank under a shell that turns its death by a
# signal into an exit code and takes hydra's SIGUSR1 notice (archzoo/launcher.py explains);
# mpiexec then exits with the dead rank's code although rank 0 finished the run.
set -euo pipefail
export ARCHZOO_MPI_SURVIVE=1
SURVIVE=(-disable-auto-cleanup)
RANK_SHELL=(sh -c 'trap : USR1; "$@"; exit $?' archzoo-rank)
ARCH=${ARCH:-impala}
NP=${NP:-3}
PY=${PYTHON:-python}
MPIEXEC=${MPIEXEC:-$(dirname "$(command -v "$PY")")/mpiexec}
[ -x "$MPIEXEC" ] || MPIEXEC=mpiexec
if [ -n "${HOSTFILE:-}" ]; then
  extra=()
  if [ -n "${IFACE:-}" ]; then
    extra+=(-iface "$IFACE")
    export UCX_NET_DEVICES=${UCX_NET_DEVICES:-$IFACE}
  fi
  if [ -n "${LAUNCHER_EXEC:-}" ]; then extra+=(-launcher ssh -launcher-exec "$LAUNCHER_EXEC"); fi
  exec "$MPIEXEC" "${SURVIVE[@]}" -f "$HOSTFILE" -n "$NP" "${extra[@]}" -genvall \
    "${RANK_SHELL[@]}" "$PY" -m archzoo run "$ARCH" --backend mpi "$@"
fi
exec "$MPIEXEC" "${SURVIVE[@]}" -n "$NP" "${RANK_SHELL[@]}" "$PY" -m archzoo run "$ARCH" \
  --backend mpi "$@"
