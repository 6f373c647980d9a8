#!/bin/bash
# usage: run.sh N TAG COMP ALGO OVERLAP STEPS PREFIX SUBNET
n=$1 tag=$2 comp=$3 algo=$4 ov=$5 steps=$6 prefix=$7 subnet=$8
port=$((29600 + RANDOM % 300))
pids=()
for ((r=0; r<n; r++)); do
  ip netns exec $prefix-h$r env RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=1 MASTER_ADDR=$subnet.1 MASTER_PORT=$port \
    GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 EPOCHS=${EPOCHS:-1} \
    python /tmp/s7/ab.py $comp $algo $ov $steps /tmp/s7/out/$tag.r$r.json > /tmp/s7/out/$tag.r$r.log 2>&1 &
  pids+=($!)
done
for p in ${pids[@]}; do wait $p; done
