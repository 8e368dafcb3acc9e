#!/usr/bin/env bash
# IMPALA under MPI (the mpich wheel puts mpiexec in the venv's bin/). Rank 0 is the
# learner, every other rank an actor.
#
# One machine, 1 learner + 2 actors:
#   launch/mpirun.sh
# Several machines (MPICH hydra; one host per line in the file, optionally host:slots):
#   HOSTFILE=hosts.txt NP=16 launch/mpirun.sh --env CartPole-v1
# The same python environment must exist at the same path on every host.
set -euo pipefail
ARCH=${ARCH:-impala}
NP=${NP:-3}
PY=${PYTHON:-python}
MPIEXEC=${MPIEXEC:-$(dirname "$(command -v "$PY")")/mpiexec}
[ -x "$MPIEXEC" ] || MPIEXEC=mpiexec
if [ -n "${HOSTFILE:-}" ]; then
  exec "$MPIEXEC" -f "$HOSTFILE" -n "$NP" "$PY" -m archzoo run "$ARCH" --backend mpi "$@"
fi
exec "$MPIEXEC" -n "$NP" "$PY" -m archzoo run "$ARCH" --backend mpi "$@"
