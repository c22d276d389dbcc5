#!/bin/bash
# interleaved: each round, each build at each T via iree-benchmark-module on local-task, 2 threads
B=${IREE_BENCHMARK_MODULE:-iree-benchmark-module}  # run in this folder after gen.py and the compiles
for r in 1 2 3; do
for t in 2 4 8 16 32; do
 for f in default b1 b2 b6 b12; do
  us=$($B --module=$f.vmfb --device=local-task --task_topology_max_group_count=2 --function=main \
    --input=12x${t}x64xf32=1 --input=12x64x${t}xf32=1 --benchmark_min_time=0.2s 2>/dev/null | awk '/BM_main\/process_time\/real_time /{print $2}')
  echo "$r $t $f $us"
 done
done
done
