#!/usr/bin/env bash
# An archzoo run under torchrun (ARCH, default impala). Rank 0 and the lowest ranks hold the
# architecture's servers (learner, replay / parameter-server shards, inference server);
# the rest are actors. torchrun numbers node 0's processes first, so the servers run on
# node 0 and the actors fill the remaining slots (docs/multinode.md).
#
# One machine, 1 learner + 2 actors:
#   launch/torchrun.sh
# Two machines (run on each; NODE_RANK=0 on the one that hosts the rendezvous; NPROC may
# differ per node, e.g. NPROC=1 on node 0 keeps the learner alone there):
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 NPROC=8 IFACE=eth0 launch/torchrun.sh --env CartPole-v1
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 NPROC=8 IFACE=eth0 launch/torchrun.sh --env CartPole-v1
# IFACE (GLOO_SOCKET_IFNAME) is the interface gloo uses; set it when the hosts have several.
# Every other node first checks that MASTER_ADDR:MASTER_PORT answers, and every node gives
# up on the rendezvous after ARCHZOO_RDZV_TIMEOUT seconds (default 300), with one line
# saying what to check.
set -euo pipefail
ARCH=${ARCH:-impala}
NNODES=${NNODES:-1}
NPROC=${NPROC:-3}
PY=${PYTHON:-python}
TORCHRUN=${TORCHRUN:-$(dirname "$(command -v "$PY")")/torchrun}
[ -x "$TORCHRUN" ] || TORCHRUN=torchrun
if [ -n "${IFACE:-}" ]; then export GLOO_SOCKET_IFNAME=$IFACE; fi
if [ "$NNODES" = 1 ]; then
  exec "$TORCHRUN" --standalone --nnodes 1 --nproc_per_node "$NPROC" -m archzoo run "$ARCH" "$@"
fi
: "${NODE_RANK:?set NODE_RANK}" "${MASTER_ADDR:?set MASTER_ADDR}"
MASTER_PORT=${MASTER_PORT:-29500}
RDZV_TIMEOUT=${ARCHZOO_RDZV_TIMEOUT:-300}
if [ "$NODE_RANK" != 0 ]; then
  "$PY" -m archzoo.multinode reach "$MASTER_ADDR" "$MASTER_PORT" "$RDZV_TIMEOUT"
fi
code=0
"$TORCHRUN" --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$NPROC" \
  --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" --rdzv_conf "timeout=$RDZV_TIMEOUT" \
  -m archzoo run "$ARCH" "$@" || code=$?
if [ "$code" != 0 ]; then
  echo "archzoo: error: node $NODE_RANK: torchrun exited with code $code; if it gave up on the" \
    "rendezvous at $MASTER_ADDR:$MASTER_PORT, check that all $NNODES nodes started within" \
    "${RDZV_TIMEOUT}s with the same MASTER_ADDR, MASTER_PORT and NNODES" >&2
fi
exit "$code"
