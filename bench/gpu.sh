#!/usr/bin/env bash
# One prepared run on a GPU machine (the project's lent H200): prints figures, asserts nothing.
#
#   bash bench/gpu.sh            # on the GPU machine, from the repository root; figures in $OUT/gpu.log
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_SCALE=small bash bench/gpu.sh   # a dry run of the same steps here
#
# What it shows that a CPU machine cannot: NVML telemetry of a real GPU (utilisation, memory,
# power, the energy counter's J per output token), the `hf:` target on CUDA, and how the client
# scales with --workers on 16 cores. The machine has no network and no vLLM (its GPU wheel is
# far over what can travel there), so `vllm serve`, `vllm:` and `vllm bench serve` are not run;
# the script says so. Missing pure-Python/binary dependencies travel as wheels in .whl/
# (bench/README or the device tool's notes say how to fetch them for Python 3.12).
set -u
OUT=${OUT:-/tmp/tokspeed-gpu-check}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
SCALE=${GPU_CHECK_SCALE:-full}
mkdir -p "$OUT"
LOG="$OUT/gpu.log"
exec > >(tee "$LOG") 2>&1
export PYTHONUNBUFFERED=1
say() { printf '\n== %s  [%s]\n' "$*" "$(date -u +%H:%M:%S)"; }

say "machine"
nvidia-smi -L 2>&1 || echo "no nvidia-smi"
python3 --version
nproc
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || echo "the carried wheels did not install"
    export PYTHONPATH="/tmp/site:$PWD/src"
else
    export PYTHONPATH="$PWD/src"
fi
python3 - <<'EOF'
import importlib.util
for name in ("torch", "transformers", "vllm", "pynvml"):
    print(f"{name}: {'present' if importlib.util.find_spec(name) else 'absent'}")
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "sees a GPU:", torch.cuda.is_available())
EOF

if [ "$SCALE" = full ]; then N=200; C=8; TOK=128; REQ=2000; SCHED=400; else N=6; C=2; TOK=8; REQ=100; SCHED=100; fi

say "hf: on $DEVICE (the embedded small model exported as a Hugging Face directory, random bf16 weights)"
python3 -c "from tokspeed.backends.embedded.export import export_model; print(export_model('/tmp/tokspeed-model', 'small'))"
timeout 300 python3 -m tokspeed run --target hf:/tmp/tokspeed-model --device "$DEVICE" --dataset synthetic \
    --input-tokens 256 --max-tokens "$TOK" --extra-body '{"ignore_eos": true}' --requests "$N" --concurrency "$C" \
    --plain --out "$OUT/hf" || echo "hf run exit $?"
python3 - "$OUT/hf" <<'EOF'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
run = json.loads((d / "run.json").read_text())
b = run["benchmarks"][-1]
s = b.get("summary", {})
print("summary keys:", sorted(s)[:40])
tel = b.get("telemetry") or run.get("telemetry")
print("telemetry:", json.dumps(tel, indent=1)[:3000] if tel else None)
lines = (d / "telemetry.jsonl").read_text().splitlines() if (d / "telemetry.jsonl").exists() else []
gpu = [json.loads(l) for l in lines if '"gpu' in l]
print(f"telemetry.jsonl: {len(lines)} lines, {len(gpu)} with GPU fields; first GPU line:", gpu[0] if gpu else None)
EOF

# several simulators share the port (--sims), half the cores' worth: one simulator process was the limit at
# ~1,230 req/s on 2026-12-04, so --workers 1/4/8 could not show scaling
SIMS=$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))
say "client capacity with --workers on $(nproc) cores, $SIMS simulators (bench/client.py, capacity part only)"
timeout 300 python3 bench/client.py --streams 256 --workers 1 2 4 --sims "$SIMS" --requests "$REQ" --skip-truth \
    || echo "client bench exit $?"

say "schedule precision on a quiet machine (bench/schedule.py)"
timeout 200 python3 bench/schedule.py --requests "$SCHED" || echo "schedule bench exit $?"

say "not run here: vllm serve, vllm:, vllm bench serve (vLLM is not installed on this machine and cannot travel to it)"
say "done"
