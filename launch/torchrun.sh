#!/usr/bin/env bash
# IMPALA under torchrun. Rank 0 is the learner, every other rank an actor; the number of
# actors follows from the world size (nodes x processes per node - 1).
#
# One machine, 1 learner + 2 actors:
#   launch/torchrun.sh
# Two machines (run on each; NODE_RANK=0 on the one that hosts the rendezvous):
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 NPROC=8 launch/torchrun.sh --env CartPole-v1
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 NPROC=8 launch/torchrun.sh --env CartPole-v1
# gloo picks the network interface from the host name; set GLOO_SOCKET_IFNAME=eth0 (say)
# if the nodes can't reach each other.
set -euo pipefail
ARCH=${ARCH:-impala}
NNODES=${NNODES:-1}
NPROC=${NPROC:-3}
if [ "$NNODES" = 1 ]; then
  exec torchrun --standalone --nnodes 1 --nproc_per_node "$NPROC" -m archzoo run "$ARCH" "$@"
fi
exec torchrun --nnodes "$NNODES" --node_rank "${NODE_RANK:?set NODE_RANK}" \
  --nproc_per_node "$NPROC" --master_addr "${MASTER_ADDR:?set MASTER_ADDR}" \
  --master_port "${MASTER_PORT:-29500}" -m archzoo run "$ARCH" "$@"
