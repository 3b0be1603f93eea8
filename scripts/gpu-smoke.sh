#!/usr/bin/env bash
# gpu-smoke.sh: check the exporter against real NVML on a host with NVIDIA GPUs.
#
# Starts `mirrorwatch-exporter --listen 127.0.0.1:19848` (from .venv when present) without
# --simulate, waits for /readyz, scrapes /metrics, lints the scrape with `promtool check
# metrics`, prints the GPU model and driver, then says for each GPU metric family of the
# contract whether this host exposes it. Exits non-zero when the exporter never gets ready,
# the scrape fails, promtool rejects it, or a collector reports failure.
#
# First (scripts/gpu_symbols.py) lists which NVML functions the exporter uses this host's
# libnvidia-ml.so.1 exports, with the driver version, and compares them with the stand-in of
# that driver branch (tests/exporter/nvml_standin): a difference means the stand-in matrix is
# wrong for this driver, and fails the smoke test.
#
# Then (scripts/gpu_features.py) reports whether each GPU supports per-process utilisation and
# GPM, with each call's cost, and checks the exporter shows GPM on exactly the GPUs that have
# it (after its 15 s sampling interval).
#
# Then mirrorwatch-doctor --probe runs on GPU 0 split into two logical GPUs (its JSON kept in
# SMOKE_OUT, default build/gpu-smoke/doctor.json).
#
# Then (scripts/gpu_train_smoke.py) trains under MirroredStrategy on GPU 0 split into two
# logical GPUs, the callback pushing to that exporter, and checks replica_info carries GPU 0's
# real UUID and that its series move. About 2 minutes in all.
#
# Environment: SMOKE_LISTEN (default 127.0.0.1:19848), SMOKE_READY_TIMEOUT_S (default 60),
# EXPORTER (default .venv/bin/mirrorwatch-exporter, else the one on PATH), SMOKE_TRAIN (1; 0
# skips the fit), SMOKE_TRAIN_SECONDS (60), SMOKE_DOCTOR (1; 0 skips the doctor), SMOKE_OUT
# (build/gpu-smoke), PYTHON (with tensorflow[and-cuda]; default .venv's).

set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
listen="${SMOKE_LISTEN:-127.0.0.1:19848}"
ready_timeout_s="${SMOKE_READY_TIMEOUT_S:-60}"
base_url="http://${listen}"

if [[ -n "${EXPORTER:-}" ]]; then
  exporter="$EXPORTER"
elif [[ -x "$repo_root/.venv/bin/mirrorwatch-exporter" ]]; then
  exporter="$repo_root/.venv/bin/mirrorwatch-exporter"
else
  exporter="$(command -v mirrorwatch-exporter || true)"
fi

fail() {
  echo "gpu-smoke: FAIL: $*" >&2
  exit 1
}

[[ -n "$exporter" ]] || fail "mirrorwatch-exporter not found; run 'make install' first"
command -v curl >/dev/null || fail "curl is required"
command -v promtool >/dev/null || fail "promtool is required ('make tools' installs it)"

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$repo_root/.venv/bin/python" ]]; then python="$repo_root/.venv/bin/python"; else python=python3; fi
fi
"$python" "$repo_root/scripts/gpu_symbols.py" \
  || fail "the stand-in's symbols for this driver branch differ from the real libnvidia-ml (see above)"

workdir="$(mktemp -d)"
exporter_pid=""
cleanup() {
  if [[ -n "$exporter_pid" ]] && kill -0 "$exporter_pid" 2>/dev/null; then
    kill "$exporter_pid" 2>/dev/null || true
    wait "$exporter_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT

# Real NVML only: a stray MIRRORWATCH_SIMULATE would make this a simulator test.
env -u MIRRORWATCH_SIMULATE -u MIRRORWATCH_GPUS \
  "$exporter" --listen "$listen" >"$workdir/exporter.log" 2>&1 &
exporter_pid=$!
echo "gpu-smoke: started $exporter (pid $exporter_pid) on $listen"

ready=""
deadline=$((SECONDS + ready_timeout_s))
while ((SECONDS < deadline)); do
  if ! kill -0 "$exporter_pid" 2>/dev/null; then
    cat "$workdir/exporter.log" >&2
    fail "the exporter exited before it became ready"
  fi
  code="$(curl -s -o "$workdir/readyz" -w '%{http_code}' "$base_url/readyz" || true)"
  if [[ "$code" == "200" ]]; then
    ready=1
    break
  fi
  sleep 0.5
done
if [[ -z "$ready" ]]; then
  echo "last /readyz answer: $(cat "$workdir/readyz" 2>/dev/null || echo none)" >&2
  tail -n 20 "$workdir/exporter.log" >&2
  fail "/readyz did not answer 200 within ${ready_timeout_s}s"
fi
echo "gpu-smoke: /readyz is 200"

metrics="$workdir/metrics.txt"
curl -sf "$base_url/metrics" -o "$metrics" || fail "GET /metrics failed"
[[ -s "$metrics" ]] || fail "GET /metrics answered an empty body"
if ! promtool check metrics <"$metrics"; then
  fail "promtool check metrics rejected the scrape"
fi
echo "gpu-smoke: promtool check metrics passed"

# The value of label $2 on the first series of family $1.
label_of() {
  grep -E "^$1\{" "$metrics" | head -n 1 | sed -nE "s/.*[{,]$2=\"([^\"]*)\".*/\1/p"
}

echo
echo "GPU model:  $(label_of mirrorwatch_gpu_info name)"
echo "Driver:     $(label_of mirrorwatch_exporter_build_info driver_version)"
echo "GPUs seen:  $(grep -E '^mirrorwatch_exporter_gpus ' "$metrics" | awk '{printf "%d", $2}')"
echo "Backend up: $(grep -E '^mirrorwatch_up ' "$metrics" | awk '{printf "%d", $2}')"
echo

families=(
  mirrorwatch_gpu_info
  mirrorwatch_gpu_up
  mirrorwatch_gpu_utilization_ratio
  mirrorwatch_gpu_memory_utilization_ratio
  mirrorwatch_gpu_memory_used_bytes
  mirrorwatch_gpu_memory_total_bytes
  mirrorwatch_gpu_temperature_celsius
  mirrorwatch_gpu_temperature_threshold_celsius
  mirrorwatch_gpu_power_watts
  mirrorwatch_gpu_power_limit_watts
  mirrorwatch_gpu_energy_joules_total
  mirrorwatch_gpu_clock_hertz
  mirrorwatch_gpu_clock_max_hertz
  mirrorwatch_gpu_clocks_event_active
  mirrorwatch_gpu_throttle_seconds_total
  mirrorwatch_gpu_fan_speed_ratio
  mirrorwatch_gpu_pcie_link_generation
  mirrorwatch_gpu_pcie_link_generation_max
  mirrorwatch_gpu_pcie_link_width
  mirrorwatch_gpu_pcie_link_width_max
  mirrorwatch_gpu_pcie_transmit_bytes_total
  mirrorwatch_gpu_pcie_receive_bytes_total
  mirrorwatch_gpu_pcie_replays_total
  mirrorwatch_gpu_nvlink_up
  mirrorwatch_gpu_nvlink_transmit_bytes_total
  mirrorwatch_gpu_nvlink_receive_bytes_total
  mirrorwatch_gpu_nvlink_errors_total
  mirrorwatch_gpu_ecc_errors_total
  mirrorwatch_gpu_xid_errors_total
  mirrorwatch_gpu_xid_last_event_timestamp_seconds
  mirrorwatch_gpu_p2p_link_info
  mirrorwatch_gpu_processes
  mirrorwatch_gpu_processes_memory_used_bytes
  mirrorwatch_gpu_process_memory_used_bytes
  mirrorwatch_gpu_process_sm_utilization_ratio
)
printf '%-48s %s\n' "metric family" "exposed on this GPU"
for family in "${families[@]}"; do
  series="$(grep -cE "^${family}(\{| )" "$metrics" || true)"
  if ((series > 0)); then
    printf '%-48s yes (%d series)\n' "$family" "$series"
  elif [[ "$family" == mirrorwatch_gpu_xid_* ]]; then
    printf '%-48s no (no XID seen since the exporter started)\n' "$family"
  else
    printf '%-48s no\n' "$family"
  fi
done
echo "(see docs/metrics.md for which GPUs and drivers support each family)"

# Per-process readings and GPM: what NVML says this host supports, and that the exporter
# publishes GPM for exactly those GPUs (its background sampler needs two samples 15 s apart).
echo
"$python" "$repo_root/scripts/gpu_features.py" >"$workdir/features.txt" \
  || fail "scripts/gpu_features.py could not ask NVML"
grep -v '^gpm-gpus:' "$workdir/features.txt"
gpm_gpus="$(sed -nE 's/^gpm-gpus: *//p' "$workdir/features.txt")"
if [[ -n "$gpm_gpus" ]]; then
  sleep 17
  curl -sf "$base_url/metrics" -o "$metrics" || fail "GET /metrics failed"
  for gpu in $gpm_gpus; do
    grep -qE "^mirrorwatch_gpu_sm_activity_ratio\{.*gpu=\"$gpu\"" "$metrics" \
      || fail "GPU $gpu supports GPM but the exporter shows no mirrorwatch_gpu_sm_activity_ratio"
  done
  echo "gpu-smoke: GPM series present for GPU(s) $gpm_gpus"
elif grep -qE '^mirrorwatch_gpu_sm_activity_ratio\{' "$metrics"; then
  fail "no GPU supports GPM, yet the exporter shows GPM series"
else
  echo "gpu-smoke: no GPU here supports GPM; its series are absent, as they should be"
fi

failed_collectors="$(grep -E '^mirrorwatch_exporter_collector_success\{.*\} 0(\.0)?$' "$metrics" \
  | sed -nE 's/.*collector="([^"]*)".*/\1/p' || true)"
if [[ -n "$failed_collectors" ]]; then
  tail -n 40 "$workdir/exporter.log" >&2
  fail "collectors reported failure: $(echo "$failed_collectors" | tr '\n' ' ')"
fi

# The pre-flight check with its probes under load, on this GPU split into two logical GPUs as
# the fit below does. On a one-GPU host nvml.gpus fails (exit 1): that is expected here; exit 2
# or a probe that did not run is not. The JSON is kept in SMOKE_OUT.
if [[ "${SMOKE_DOCTOR:-1}" == "1" ]]; then
  out_dir="${SMOKE_OUT:-$repo_root/build/gpu-smoke}"
  mkdir -p "$out_dir"
  echo
  set +e
  "$python" -m mirrorwatch.doctor --probe --split-gpu --model cnn --exporter "$base_url" \
    --json >"$out_dir/doctor.json" 2>"$out_dir/doctor.log"
  doctor_code=$?
  set -e
  ((doctor_code == 0 || doctor_code == 1)) \
    || { cat "$out_dir/doctor.log" >&2; fail "mirrorwatch-doctor exited $doctor_code"; }
  "$python" - "$out_dir/doctor.json" <<'PY' || fail "the doctor's probes did not all run"
import json, sys
document = json.load(open(sys.argv[1]))
for check in document["checks"]:
    if check["status"] != "pass":
        print(f"doctor: {check['status']:4} {check['id']} [{check['gpu']}]: {check['value']}")
print("doctor:", document["summary"], "-", (document["expected_speedup"] or {}).get("text"))
ran = {c["id"]: c["status"] for c in document["checks"]}
assert ran.get("interconnect.allreduce") == "pass", ran.get("interconnect.allreduce")
assert "imbalance.matmul" in ran and ran.get("pcie_degraded.under_load") is not None, ran
assert document["expected_speedup"]["factor"] is not None
PY
  echo "gpu-smoke: mirrorwatch-doctor --probe ran; output kept in $out_dir/doctor.json"
fi

# A real fit on this GPU, split into two logical GPUs, pushing to the exporter above.
if [[ "${SMOKE_TRAIN:-1}" == "1" ]]; then
  "$python" -c "import tensorflow, mirrorwatch.trainer" 2>/dev/null \
    || fail "$python cannot import tensorflow and mirrorwatch.trainer: install tensorflow[and-cuda] and mirrorwatch (or SMOKE_TRAIN=0)"
  echo
  "$python" "$repo_root/scripts/gpu_train_smoke.py" --exporter "$base_url" \
    --seconds "${SMOKE_TRAIN_SECONDS:-60}" || fail "the training check failed"
fi

echo
echo "gpu-smoke: OK"
