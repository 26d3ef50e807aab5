#!/bin/sh
# Reads IBBENCH lines (bench/ib/pair.sh, both roles) and prints, per size,
# ib_write_bw's bandwidth, hetccl's broadcast and all-reduce bus bandwidth,
# and their ratios to ib_write_bw. perftest's --report_gbits figure is read
# as 1e9 bits/s; hetccl-perf's GB/s as 1e9 bytes/s.
awk '
  $1 == "IBBENCH" && $2 == "write_bw" && $4 != "failed" { wire[$3] = $4 / 8; sizes[$3] = 1 }
  $1 == "IBBENCH" && ($2 == "broadcast" || $2 == "all_reduce") && $4 != "FAILED" { bus[$2, $3] = $5; sizes[$3] = 1 }
  $1 == "IBBENCH" && ($4 == "FAILED" || $4 == "failed") { print "failed:", $0; bad = 1 }
  END {
    printf "%12s %14s %14s %7s %14s %7s\n", "bytes", "write_bw GB/s", "bcast busbw", "ratio", "allred busbw", "ratio"
    n = 0
    for (s in sizes) list[++n] = s + 0
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (list[j] < list[i]) { t = list[i]; list[i] = list[j]; list[j] = t }
    for (i = 1; i <= n; i++) {
      s = list[i]; w = wire[s]; x = bus["broadcast", s]; y = bus["all_reduce", s]
      printf "%12d %14s %14s %7s %14s %7s\n", s, w == "" ? "-" : sprintf("%.3f", w), x == "" ? "-" : x,
             (w > 0 && x != "") ? sprintf("%.2f", x / w) : "-", y == "" ? "-" : y, (w > 0 && y != "") ? sprintf("%.2f", y / w) : "-"
    }
    exit bad
  }'
