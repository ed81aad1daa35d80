#!/bin/bash
# Instructions per operation of several perf binaries in one boot, for
# comparing two trees by pairs (the bench compares ours with perftest).
#
#   cargo xtask vm -- "ci/ab-instructions.sh REPS old=/path/perf new=/path/perf"
#
# Runs send_lat, atomic_lat and send_lat --async at n = 1000 and 3000 under
# callgrind with the bench's command lines, each binary in turn (the order
# reversed every other rep), into
# $XTASK_OUT/<label>/raw/cg-ours-<test>-<size>-n<n>-r<rep>.{server,client}.cg.
# Copy a bench run's cg-perftest-* files beside them, then
#   cargo xtask bench --instructions-from $XTASK_OUT/<label>/raw --reps REPS \
#       --tests send_lat,atomic_lat,send_lat_async
# prints the table for one binary.
set -u
reps=$1; shift
port=19100
one() { # label bin test size n rep perfname mode
  local label=$1 bin=$2 test=$3 size=$4 n=$5 rep=$6 name=$7 mode=$8
  local R="$XTASK_OUT/$label/raw"; mkdir -p "$R"
  local f="$R/cg-ours-$test-$size-n$n-r$rep"
  local s=""; [ "$test" != atomic_lat ] && s=" -s $size"
  port=$((port+1))
  TMPDIR=/dev/shm valgrind --tool=callgrind --vgdb=no -q --compress-pos=no --toggle-collect='*measured_loop*' --callgrind-out-file="$f.server.cg" $bin $name -d "$RXE_DEVICE" -x "$RXE_GID_INDEX" -p $port --timeout 300 --json >"$f.server.txt" 2>&1 &
  local sp=$!
  for _ in $(seq 1 480); do ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break; sleep 0.5; done
  TMPDIR=/dev/shm valgrind --tool=callgrind --vgdb=no -q --compress-pos=no --toggle-collect='*measured_loop*' --callgrind-out-file="$f.client.cg" $bin $name$mode -d "$RXE_DEVICE" -x "$RXE_GID_INDEX"$s -n $n -p $port --timeout 300 --json 127.0.0.1 >"$f.client.txt" 2>&1 || { echo "client failed $label $test $n"; cat "$f.client.txt"; }
  wait $sp || { echo "server failed $label $test $n"; cat "$f.server.txt"; }
  echo "done $label $test n=$n r=$rep"
}
mountpoint -q /dev/shm || { mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm; }
for rep in $(seq 1 $reps); do
  labels=("$@")
  if [ $((rep % 2)) = 0 ]; then labels=($(printf '%s\n' "$@" | tac)); fi
  for lb in "${labels[@]}"; do
    label=${lb%%=*}; bin=${lb#*=}
    for n in 1000 3000; do
      one $label $bin send_lat 64 $n $rep send_lat ""
      one $label $bin atomic_lat 8 $n $rep atomic_lat ""
      one $label $bin send_lat_async 64 $n $rep send_lat " --async"
    done
  done
done
echo "XTASK_OUT=$XTASK_OUT"
