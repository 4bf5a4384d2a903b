#!/bin/sh
# Re-make the committed SimGrid time-independent traces (the test suite does not need SimGrid).
# Needs SimGrid 3.32 (Debian: apt-get install libsimgrid-dev, which has smpicc and smpirun).
# Each trace NAME is written to NAME/NAME.txt (the index) and NAME/NAME.txt_files/ (one file per rank).
# Compute is recorded at smpi/host-speed 1 Gflop/s (written to NAME/NAME.txt.meta.json, the sidecar
# cxlsim replay reads), except p2p, recorded at SimGrid's default speed and given no sidecar, so that
# replaying it needs --trace-host-speed 20kf.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
trace() {  # trace NAME NP HOST_SPEED PROGRAM [ARGS...]
  name=$1 np=$2 speed=$3
  shift 3
  rm -rf "$here/$name"
  mkdir -p "$here/$name"
  (cd "$here/$name" && smpirun -np "$np" -platform "$here/platform.xml" -hostfile "$here/hostfile" \
      -trace-ti --cfg=tracing/filename:"$name.txt" --cfg=smpi/host-speed:"$speed" "$@" >/dev/null 2>&1)
}
for src in p2p colls halo lossy; do
  smpicc -O0 -o "$build/$src" "$here/src/$src.c"
done
trace p2p 4 20000f "$build/p2p"
trace colls 4 1Gf "$build/colls"
trace halo 4 1Gf "$build/halo"
trace derived 2 1Gf "$build/lossy" derived
trace block 2 1Gf "$build/lossy" block
for name in colls halo derived block; do
  printf '{"host_speed_flops_per_s": 1e9, "tracer": "smpirun -trace-ti (SimGrid %s)"}\n' \
    "$(smpirun -version 2>&1 | tail -1 | awk '{print $3}')" > "$here/$name/$name.txt.meta.json"
done
