set -u
export PYTHONPATH=$PWD
m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size
for cfg in best autotune; do
  extra=""; lim=230
  [ $cfg = autotune ] && extra="--autotune" && lim=330
  timeout $lim ncu --profile-from-start off --graph-profiling node --clock-control none --metrics $m --csv --page raw \
    python3 -m tools.dev.kernel_lab.decode_ncu --compile --cuda-graphs --fuse --attention split $extra > $OUT/ncu_$cfg.csv 2> $OUT/ncu_$cfg.err
  echo "$cfg rc=$? lines=$(wc -l < $OUT/ncu_$cfg.csv)"; tail -3 $OUT/ncu_$cfg.err
done
