# Sourced by the bench/gpu scripts. Two processes on one GPU are two
# contexts, which the GPU time-slices; under CUDA MPS they are clients of
# one server context and run at once, as processes on GPUs of their own
# would not need to: the closest this one-GPU machine comes to the
# cluster's layout.
#   under_mps command [args...]
# runs the command (a function too) under a private MPS daemon, started in
# a temporary directory and stopped after it, and returns its status; 125,
# after saying why, where no daemon could be started.
under_mps() {
  if ! command -v nvidia-cuda-mps-control >/dev/null; then
    echo "MPS: nvidia-cuda-mps-control is not installed"
    return 125
  fi
  local dir rc
  dir=$(mktemp -d)
  mkdir -p "$dir/pipe" "$dir/log"
  (
    export CUDA_MPS_PIPE_DIRECTORY=$dir/pipe CUDA_MPS_LOG_DIRECTORY=$dir/log
    nvidia-cuda-mps-control -d || {
      echo "MPS: the daemon did not start"
      exit 125
    }
    "$@"
    rc=$?
    echo quit | nvidia-cuda-mps-control
    exit $rc
  )
  rc=$?
  rm -rf "$dir"
  return $rc
}
