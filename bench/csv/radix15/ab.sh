#!/bin/bash
# The before/after A/B of session 8 (radix15): each round runs every binary given on each
# selected replay (KVB_TRACE_SEL), alternated; before = 64fc8ff with the KVB_TRACE_SEL patch,
# beforeB = 64fc8ff's library with 93dc5b1's bench, after = e3c2cff.
# usage: ab.sh OUTDIR ROUNDS binA binB ...   (alternated per round)
out=$1; rounds=$2; shift 2
mkdir -p $out
for r in $(seq 1 $rounds); do
  for b in "$@"; do
    name=$(basename $b)
    for sel in chat-1-10000 chat-1-100000 pressure-1-10000 pressure-1-100000 chat-16-100000 pressure-1-1000000; do
      KVB_ONLY=trace KVB_TRACE_SEL=$sel nice $b > $out/$name-$sel-$r.txt 2>&1
      cat /proc/loadavg > $out/$name-$sel-$r.load
    done
  done
done
