#!/usr/bin/env bash
# The Blendplane demo: start a control plane and an agent on loopback with
# temporary data directories, run examples/plans/hello.json on real Blender,
# show its receipts live, download the render it made and show it, close the
# session and stop both daemons.
# Run it through `make demo`, which builds the binaries and installs Blender.
set -euo pipefail
cd "$(dirname "$0")/.."

CP_ADDR=${BLENDPLANE_DEMO_CP_ADDR:-127.0.0.1:7400}
AGENT_ADDR=${BLENDPLANE_DEMO_AGENT_ADDR:-127.0.0.1:7401}
PLAN=${1:-examples/plans/hello.json}

for addr in "$CP_ADDR" "$AGENT_ADDR"; do
	if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
		echo "demo: $addr is in use; stop what listens there or set BLENDPLANE_DEMO_CP_ADDR / BLENDPLANE_DEMO_AGENT_ADDR" >&2
		exit 1
	fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/blendplane-demo.XXXXXX")
pids=()
stop() {
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop EXIT
trap 'exit 130' INT TERM

echo "== starting controlplane on $CP_ADDR and agentd on $AGENT_ADDR (logs in $work)"
./bin/controlplane --listen "$CP_ADDR" --data-dir "$work/controlplane" >"$work/controlplane.log" 2>&1 &
pids+=($!)
./bin/agentd --listen "$AGENT_ADDR" --control-plane "$CP_ADDR" --data-dir "$work/agentd" >"$work/agentd.log" 2>&1 &
pids+=($!)

export BLENDPLANE_ADDR=$CP_ADDR
printf "== waiting for the agent to probe Blender and register"
for _ in $(seq 1 120); do
	if ./bin/blendctl agents 2>/dev/null | grep -q READY; then break; fi
	if ! kill -0 "${pids[1]}" 2>/dev/null; then
		echo; echo "demo: agentd exited:" >&2; tail -20 "$work/agentd.log" >&2; exit 1
	fi
	printf "."; sleep 0.5
done
echo
./bin/blendctl agents

echo "== submitting $PLAN"
./bin/blendctl submit "$PLAN" --watch --out "$work/out" --show

png=$(find "$work/out" -name '*.png' -print -quit)
echo "== render downloaded to ${png:-nothing}"
echo "== data and logs kept in $work (rm -rf it when done)"
