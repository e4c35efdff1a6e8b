#!/usr/bin/env bash
# Runs collie's GPU checks on a machine with a CUDA device and writes a report:
# OUTDIR/gpu-report.md and OUTDIR/gpu-report.json (date, GPU, driver, CUDA version,
# each check pass/fail/skipped/refused with its figures, the goals), one log per step
# under OUTDIR/logs, and those logs again as OUTDIR/logs.tar.gz. The binaries come
# from the carry folder scripts/gpu-build.sh made (default build-gpu/carry next to this
# script's repository; --carry DIR or COLLIE_GPU_CARRY to change), never from ctest
# files, which name the build machine's paths. Needs bash, coreutils' timeout and
# python3 (the report); torch and compute-sanitizer are used when present.
#
# Usage: scripts/gpu-check.sh [--carry DIR] [--budget SECONDS] [--only REGEX] [--dry-run] OUTDIR
#   - no CUDA device: prints "skipped: no CUDA device" and exits 0, writing nothing;
#   - every step runs under its own timeout, and all of them within --budget seconds
#     (default 330): a step that would start past the budget is recorded as skipped;
#   - a failed step is recorded and the next one runs; the exit status is 1 when any
#     check (step or goal) failed, 0 otherwise;
#   - --only runs just the steps whose whole name matches the extended regex (a
#     second try of some steps within what is left of the device time);
#   - --dry-run needs no device and no carry folder: it runs the same step runner and
#     report writer over stub steps (pass, fail, skip, timeout, canned benchmark
#     figures), so that this machinery is tested where there is no GPU
#     (tests/gpu/gpu_check_test.sh).
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
carry=${COLLIE_GPU_CARRY:-$root/build-gpu/carry}
budget=330
dry_run=0
only=""
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --carry) carry=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --only) only=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    -*) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
if [ -z "$out" ]; then
  echo "usage: scripts/gpu-check.sh [--carry DIR] [--budget SECONDS] [--only REGEX] [--dry-run] OUTDIR" >&2
  exit 2
fi

have_gpu() {
  command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2> /dev/null | grep -q '^GPU '
}
if [ "$dry_run" = 0 ] && ! have_gpu; then
  echo "skipped: no CUDA device"
  exit 0
fi

mkdir -p "$out/logs"
out=$(cd "$out" && pwd)
steps="$out/steps.tsv"
: > "$steps"
start_time=$(date +%s)

# step NAME KIND TIMEOUT COMMAND...: runs COMMAND with its output in logs/NAME.log under
# `timeout TIMEOUT` (less when the budget is nearly spent) and appends one line to
# steps.tsv: name, kind, status (pass, fail, skipped), exit code, seconds. Exit code 77
# means skipped; 124/137 a timeout (fail).
step() {
  local name=$1 kind=$2 limit=$3
  shift 3
  if [ -n "$only" ] && ! echo "$name" | grep -Eq "^($only)\$"; then
    return
  fi
  local log="$out/logs/$name.log"
  local left=$((budget - ($(date +%s) - start_time)))
  if [ "$left" -lt 5 ]; then
    echo "not run: the ${budget} s budget was spent" > "$log"
    printf '%s\t%s\tskipped\t-\t0\n' "$name" "$kind" >> "$steps"
    echo "gpu-check: $name skipped (budget spent)"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "gpu-check: $name (timeout ${limit} s): $*"
  local t0 t1 rc status
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  case $rc in
    0) status=pass ;;
    77) status=skipped ;;
    124|137) status=fail; echo "gpu-check: timed out after ${limit} s" >> "$log" ;;
    *) status=fail ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$kind" "$status" "$rc" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" >> "$steps"
  echo "gpu-check: $name $status (rc $rc)"
}

if [ "$dry_run" = 1 ]; then
  # Stub steps: one of each outcome, then canned figures for the goal evaluation
  # (reduce-copy at 90% of the copy; slower than torch.add at 1 MiB only).
  step stub_pass correctness 10 sh -c 'echo "device_rank 0: ok matrix ring: 3 cases, #wrong 0"'
  step stub_fail correctness 10 sh -c 'echo "device_rank 1: #wrong 3" >&2; exit 1'
  step stub_skipped correctness 10 sh -c 'echo "skipped: no CUDA device"; exit 77'
  step stub_timeout correctness 1 sleep 30
  step stub_sanitizer sanitizer 10 sh -c 'echo "========= ERROR SUMMARY: 0 errors"'
  step nccl_device_n2 correctness 10 sh -c 'for r in 0 1; do
    echo "nccl_device_check rank $r: graph capture: 100 launches, #wrong 0"
    echo "nccl_device_check rank $r: ok (2 ranks, device 0)"; done'
  step stub_sanitizer_refused sanitizer 10 sh -c 'echo "Device not supported"; exit 1'
  step torch_nccl_stub_n2 correctness 10 sh -c '
    echo "[rank 0] rank 0: 139 cases, #wrong 0"; echo "[rank 1] rank 1: 139 cases, #wrong 0"
    echo "torch_nccl_dropin: 2 ranks, nccl on cuda: 139 cases, #wrong 0"'
  step torch_collie_cuda_stub_n2 correctness 10 sh -c '
    echo "torch_nccl_dropin: 2 ranks, collie on cuda: 138 cases, #wrong 0"'
  # Three interleaved rounds; the goals take medians: float32 at 1 MiB is slower (4.0
  # against 3.0) although round 2 alone says otherwise, bfloat16 at 256 MiB is not (298.3
  # against 300.0) although round 2 alone says it is.
  n_round=0
  for round in "4.0 298.3 3.0 300.0" "2.0 310.0 3.0 300.0" "4.0 290.0 5.0 290.0"; do
    set -- $round
    step "bench_reduce_copy_$((n_round + 1))" bench 10 sh -c "echo '{\"device\": \"stub\", \"rows\": [
      {\"bytes\": 1048576, \"memcpy_GBps\": 1000.0, \"float32_us\": $1, \"float32_GBps\": 786.4, \"bfloat16_us\": 4.0, \"bfloat16_GBps\": 786.4},
      {\"bytes\": 268435456, \"memcpy_GBps\": 3000.0, \"float32_us\": 298.3, \"float32_GBps\": 2700.0, \"bfloat16_us\": $2, \"bfloat16_GBps\": 2700.0}]}'"
    step "bench_torch_add_$((n_round + 1))" bench 10 sh -c "echo '{\"torch\": \"stub\", \"rows\": [
      {\"bytes\": 1048576, \"float32_us\": $3, \"bfloat16_us\": 5.0},
      {\"bytes\": 268435456, \"float32_us\": 300.0, \"bfloat16_us\": $4}]}'"
    n_round=$((n_round + 1))
  done
  # Device perf runs with the memory bound after the table (goal_device_latency passes at
  # 14 us, goal_device_roofline fails: 2 ranks reach 0.072 of the bound, 4 ranks 0.45).
  step perf_allreduce_device_n2_mps bench 10 printf '%s\n' \
    '        1024           256     float     sum      -1    12.50    0.08    0.08       0    12.00    0.09    0.09       0' \
    '       65536         16384     float     sum      -1    14.00    4.68    4.68       0    13.00    5.04    5.04       0' \
    '    67108864      16777216     float     sum      -1    880.0   76.26   76.26       0    870.0   77.14   77.14       0' \
    '#   gpu cuda device 0                        copy    4200.0 GB/s of memory traffic, 2 rank(s)' \
    '#       size    bound(us)  out-of-place  in-place' \
    '#       1024         0.00         0.000     0.000' \
    '#   67108864        63.91         0.073     0.072'
  step perf_allreduce_device_n4_mps bench 10 printf '%s\n' \
    '    67108864      16777216     float     sum      -1    300.0  223.70  335.54       0    290.0  231.41  347.12       0' \
    '#   gpu cuda device 0                        copy    4200.0 GB/s of memory traffic, 4 rank(s)' \
    '#   67108864       127.83         0.426     0.441'
  step perf_stub bench 10 printf '%s\n' \
    '        1024           256     float     sum      -1    12.50    0.08    0.08       0    12.00    0.09    0.09       0' \
    '     1048576        262144     float     sum      -1    40.00   26.21   26.21       2    39.00   26.89   26.89       0'
  gpu_name="dry-run"
  driver="dry-run"
  cuda_driver="dry-run"
else
  bin="$carry/bin"
  if [ ! -x "$bin/collie" ]; then
    echo "gpu-check: no carry folder at $carry (scripts/gpu-build.sh makes it)" >&2
    exit 2
  fi
  export LD_LIBRARY_PATH="$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export COLLIE_TIMEOUT=60s
  unset COLLIE_DEVICE_EMULATION CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2> /dev/null | head -1)
  cuda_driver=$(nvidia-smi 2> /dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
  nvidia-smi > "$out/logs/nvidia-smi.log" 2>&1
  run="$bin/collie run"
  rank="$bin/device_rank"

  # Correctness first: kernels against the host backend, then the device path with
  # ranks as processes sharing the one GPU (cuda_ipc windows between processes).
  # Without MPS the GPU time-slices between processes, and every step of a collective
  # waits for its peers' next time slice (milliseconds, tens of them at 4 ranks): the
  # plain runs stay small, the large ones run under MPS below when the machine has it.
  step gpu_kernels_test correctness 180 "$bin/gpu_collectives_test"
  step device_basic_n2 correctness 30 env COLLIE_DEBUG=INFO $run -n 2 -- "$rank"
  step device_matrix_ring_n2 correctness 90 $run -n 2 -- "$rank" matrix 16777216 ring
  step device_matrix_board_n2 correctness 60 $run -n 2 -- "$rank" matrix 262144 board
  step device_stream_order_n2 correctness 30 $run -n 2 -- "$rank" stream 16777216
  # 5 s: the deadline also bounds communicator creation, which includes CUDA's start.
  step device_timeout_n4 correctness 45 $run -n 4 -- "$rank" timeout 5000
  step device_mismatch_n4 correctness 30 $run -n 4 -- "$rank" mismatch
  step device_premul_n2 correctness 30 $run -n 2 -- "$rank" premul 1000000
  # An NCCL program (NVIDIA's nccl.h, -lnccl) on collie's libnccl.so.2 with device
  # buffers and its own streams; then the last rank leaves mid-job (async error, abort).
  step nccl_device_n2 correctness 90 $run -n 2 -- "$bin/nccl_device_check" "$out/nccl_id_n2"
  step nccl_device_fault_n2 correctness 60 env COLLIE_TIMEOUT=10s \
    $run -n 2 -- "$bin/nccl_device_check" "$out/nccl_id_fault_n2" fault
  # Bandwidth of the kernels, one process: reduce-copy and torch.add in interleaved
  # rounds, so that both see the same minutes of the machine (the goals take medians).
  for round in 1 2 3; do
    step "bench_reduce_copy_$round" bench 60 "$bin/gpu_reduce_copy_bench"
    step "bench_torch_add_$round" bench 60 python3 "$root/bench/gpu_torch_add.py"
  done
  step perf_allreduce_device_n2 bench 45 $run -n 2 -- "$bin/collie" perf allreduce \
    -b 1K -e 4M -f 4 -n 5 -w 1 -c 1 --device 1
  # compute-sanitizer: memcheck, racecheck, initcheck (reads of device memory nothing
  # wrote) and synccheck (barriers some threads of a block miss) over the kernels' byte-offset and
  # small-grid cases (one process, no kernel waits for another: the sanitizer may
  # serialise kernels, and ranks as threads of one process would then wait for each
  # other until their deadline); memcheck over ranks as processes comes last.
  sanitizer=$(command -v compute-sanitizer ||
    ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer \
      /opt/nvidia/*/compute-sanitizer/compute-sanitizer 2> /dev/null | head -1)
  kernels_filter='GpuKernels.ReduceCopyEveryByteOffset:GpuKernels.SmallGridsWrap:GpuKernels.Scale*'
  if [ -n "$sanitizer" ]; then
    for tool in memcheck racecheck initcheck synccheck; do
      step "sanitizer_$tool" sanitizer 60 env COLLIE_GPU_KERNEL_LARGE=0 "$sanitizer" \
        --tool "$tool" --error-exitcode 1 "$bin/gpu_collectives_test" \
        --gtest_filter="$kernels_filter"
    done
  else
    for tool in memcheck racecheck initcheck synccheck; do
      step "sanitizer_$tool" sanitizer 5 sh -c 'echo "skipped: no compute-sanitizer found"; exit 77'
    done
  fi
  # Four ranks and the large sizes: under MPS (the processes' kernels then run at once),
  # when its control daemon is there and a first collective passes under it; else the
  # same checks at small sizes, time-sliced.
  mps=$(command -v nvidia-cuda-mps-control ||
    ls /usr/local/nvidia/bin/nvidia-cuda-mps-control /usr/bin/nvidia-cuda-mps-control \
      2> /dev/null | head -1)
  mps_on=0
  if [ -n "$mps" ]; then
    export CUDA_MPS_PIPE_DIRECTORY="$out/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$out/mps/log"
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    step mps_start setup 20 sh -c '"$0" -d || exit 77' "$mps"
    step device_basic_n4_mps correctness 30 $run -n 4 -- "$rank"
    if tail -1 "$steps" | grep -q "	pass	"; then
      mps_on=1
    else
      echo quit | "$mps" > /dev/null 2>&1
      sleep 1
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
  else
    step mps_start setup 5 sh -c 'echo "skipped: no nvidia-cuda-mps-control"; exit 77'
  fi
  if [ "$mps_on" = 1 ]; then
    step device_matrix_ring_n4_mps correctness 90 $run -n 4 -- "$rank" matrix 67108864 ring
    step device_matrix_tree_n4_mps correctness 60 $run -n 4 -- "$rank" matrix 16777216 tree
    step device_matrix_board_n4_mps correctness 60 $run -n 4 -- "$rank" matrix 1048576 board
    # The ring matrix above runs the ring program (one kernel per collective); the step
    # kernels it replaced, with the program off.
    step device_matrix_ring_n4_mps_steps correctness 90 env COLLIE_DEVICE_RING_SLICE_BYTES=0 \
      $run -n 4 -- "$rank" matrix 16777216 ring
    step device_premul_n4_mps correctness 30 $run -n 4 -- "$rank" premul 16777216
    step nccl_device_n4_mps correctness 90 $run -n 4 -- "$bin/nccl_device_check" \
      "$out/nccl_id_n4"
    # PyTorch's own NCCL backend (this machine's torch, unmodified) on collie's
    # libnccl.so.2, loaded with LD_PRELOAD (torch's RPATH wins over LD_LIBRARY_PATH):
    # every case at 2 and 4 ranks on the one GPU, then the last rank leaving.
    for n in 2 4; do
      step "torch_nccl_n${n}_mps" correctness 150 env LD_PRELOAD="$carry/lib/libnccl.so.2" \
        python3 "$root/tests/gpu/torch_nccl_dropin.py" --nranks $n --timeout 60
    done
    step torch_nccl_fault_n2_mps correctness 90 env LD_PRELOAD="$carry/lib/libnccl.so.2" \
      COLLIE_TIMEOUT=10s python3 "$root/tests/gpu/torch_nccl_dropin.py" --nranks 2 --fault \
      --timeout 20
    # Training: DDP of 25.2 M parameters, 20 steps, against the same run on gloo with
    # CUDA tensors (1e-6); FSDP2, 5 steps, losses against one process (1e-5).
    for train in ddp fsdp; do
      step "torch_nccl_${train}_n2_mps" correctness 150 env LD_PRELOAD="$carry/lib/libnccl.so.2" \
        python3 "$root/tests/gpu/torch_nccl_dropin.py" --nranks 2 --train $train --timeout 60
    done
    # The torch_collie backend with CUDA tensors (one backend for "cpu" and "cuda"): the
    # extension is built here against this machine's torch (its headers and compiler),
    # with the carried libcollie, then the same cases through backend "collie".
    tc="$out/torch_collie"
    step torch_collie_build setup 300 sh -c 'mkdir -p "$2/libdir" &&
      ln -sf "$1/lib/libcollie.so.0" "$2/libdir/libcollie.so" && cd "$3/python" &&
      MAX_JOBS=16 COLLIE_BUILD_DIR="$2/libdir" python3 setup.py -q build \
        --build-base "$2/build" --build-lib "$2/lib"' sh "$carry" "$tc" "$root"
    for n in 2 4; do
      step "torch_collie_cuda_n${n}_mps" correctness 150 env PYTHONPATH="$tc/lib" \
        python3 "$root/tests/gpu/torch_nccl_dropin.py" --nranks $n --backend collie \
        --device cuda --timeout 60
    done
    for train in ddp fsdp; do
      step "torch_collie_cuda_${train}_n2_mps" correctness 150 env PYTHONPATH="$tc/lib" \
        python3 "$root/tests/gpu/torch_nccl_dropin.py" --nranks 2 --backend collie \
        --device cuda --train $train --timeout 60
    done
    step perf_allreduce_device_n2_mps bench 60 $run -n 2 -- "$bin/collie" perf allreduce \
      -b 1K -e 1G -f 4 -n 10 -w 2 -c 1 --device 1
    step perf_allreduce_device_n4_mps bench 60 $run -n 4 -- "$bin/collie" perf allreduce \
      -b 1K -e 256M -f 4 -n 5 -w 1 -c 1 --device 1
    # The same small sizes on the step kernels alone (no board): the board kernel's
    # gain, and where the two cross, for the tuner's threshold.
    step perf_allreduce_device_n2_mps_steps bench 30 env COLLIE_DEVICE_BOARD_BYTES=0 \
      $run -n 2 -- "$bin/collie" perf allreduce -b 8 -e 4M -f 4 -n 10 -w 2 -c 1 --device 1
    step perf_allreduce_device_n2_mps_board bench 30 \
      $run -n 2 -- "$bin/collie" perf allreduce -b 8 -e 4M -f 4 -n 10 -w 2 -c 1 --device 1
    for kind in reducescatter allgather; do
      step "perf_${kind}_device_n2_mps" bench 30 $run -n 2 -- "$bin/collie" perf $kind \
        -b 8 -e 64M -f 4 -n 10 -w 2 -c 1 --device 1
    done
    # The ring program against the step kernels (COLLIE_DEVICE_RING_SLICE_BYTES=0), and
    # its FIFO slice: 32 KiB, the default 128 KiB, 512 KiB.
    step perf_allreduce_device_n2_mps_ring_off bench 45 env COLLIE_DEVICE_RING_SLICE_BYTES=0 \
      $run -n 2 -- "$bin/collie" perf allreduce -b 1M -e 1G -f 4 -n 5 -w 1 -c 1 --device 1
    for slice in 32K 512K; do
      step "perf_allreduce_device_n2_mps_slice$slice" bench 45 \
        env COLLIE_DEVICE_RING_SLICE_BYTES=$slice \
        $run -n 2 -- "$bin/collie" perf allreduce -b 1M -e 1G -f 4 -n 5 -w 1 -c 1 --device 1
    done
    # The direct kernel: the buffers registered as device windows (-R 1), so that each
    # rank reduces its share straight from every input into every output (the HBM
    # traffic bound of goal_device_roofline, which takes these runs first).
    step perf_allreduce_device_n2_mps_window bench 60 $run -n 2 -- "$bin/collie" perf allreduce \
      -b 1M -e 1G -f 4 -n 10 -w 2 -c 1 --device 1 -R 1
    step perf_allreduce_device_n4_mps_window bench 60 $run -n 4 -- "$bin/collie" perf allreduce \
      -b 1M -e 256M -f 4 -n 5 -w 1 -c 1 --device 1 -R 1
    # 8 ranks: the direct kernel's passes through each rank's own output (-c 1 checks).
    step perf_allreduce_device_n8_mps_window bench 60 $run -n 8 -- "$bin/collie" perf allreduce \
      -b 1M -e 64M -f 4 -n 5 -w 1 -c 1 --device 1 -R 1
    for kind in reducescatter allgather alltoall; do
      step "perf_${kind}_device_n2_mps_window" bench 45 $run -n 2 -- "$bin/collie" perf $kind \
        -b 1M -e 256M -f 4 -n 10 -w 2 -c 1 --device 1 -R 1
    done
    # Where a collective's time goes: how long the kernels wait for their peers' flags
    # (COLLIE_DEVICE_PROFILE; the ring program's block 0), at 1 MiB and 64 MiB.
    for size in 1M 64M; do
      step "perf_profile_n2_mps_$size" bench 30 env COLLIE_DEVICE_PROFILE=1 COLLIE_DEBUG=INFO \
        $run -n 2 -- "$bin/collie" perf allreduce -b $size -e $size -n 20 -w 2 -c 1 --device 1
    done
    echo quit | "$mps" > /dev/null 2>&1
    sleep 1
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  else
    step device_matrix_ring_n4 correctness 60 $run -n 4 -- "$rank" matrix 65536 ring
    step device_matrix_tree_n4 correctness 60 $run -n 4 -- "$rank" matrix 65536 tree
    step torch_nccl_n2 correctness 180 env LD_PRELOAD="$carry/lib/libnccl.so.2" \
      python3 "$root/tests/gpu/torch_nccl_dropin.py" --nranks 2 --timeout 60
  fi
  # And memcheck over ranks as processes (cuda_ipc windows, the step kernels waiting
  # for each other), every child followed. Not initcheck: it tracks writes per process,
  # so every read of a peer's window (zeroed by its owner before export) counts as a read
  # of memory nothing wrote, and under it the step kernels missed the 60 s deadline
  # (2026-11-28, docs/gpu/README.md).
  if [ -n "$sanitizer" ]; then
    step sanitizer_memcheck_n2 sanitizer 90 "$sanitizer" --tool memcheck --error-exitcode 1 \
      --target-processes all $run -n 2 -- "$rank"
  fi
fi

export GPU_CHECK_DATE
GPU_CHECK_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
python3 "$root/scripts/gpu_report.py" "$out" \
  --mode "$([ "$dry_run" = 1 ] && echo dry-run || echo gpu)" \
  --gpu "$gpu_name" --driver "$driver" --cuda-driver "$cuda_driver" \
  --manifest "$carry/MANIFEST" --seconds "$(($(date +%s) - start_time))"
status=$?
# The logs also travel as one file: the device tool brings back at most 8 files.
tar -C "$out" -czf "$out/logs.tar.gz" logs steps.tsv $([ -d "$out/mps/log" ] && echo mps/log) \
  2> /dev/null
exit $status
