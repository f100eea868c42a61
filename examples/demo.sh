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
HTTP_ADDR=${BLENDPLANE_DEMO_HTTP_ADDR:-127.0.0.1:7480}
PLAN=${1:-examples/plans/hello.json}

for addr in "$CP_ADDR" "$AGENT_ADDR" "$HTTP_ADDR"; do
	if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
		echo "demo: $addr is in use; stop what listens there or set BLENDPLANE_DEMO_CP_ADDR / BLENDPLANE_DEMO_AGENT_ADDR / BLENDPLANE_DEMO_HTTP_ADDR" >&2
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

echo "== starting controlplane on $CP_ADDR (logs in $work)"
./bin/controlplane --listen "$CP_ADDR" --http-listen "$HTTP_ADDR" --data-dir "$work/controlplane" >"$work/controlplane.log" 2>&1 &
pids+=($!)
# Its first start writes an admin token; blendctl calls with it.
export BLENDPLANE_ADDR=$CP_ADDR BLENDPLANE_TOKEN_FILE=$work/controlplane/admin.token
for _ in $(seq 1 100); do
	[ -s "$BLENDPLANE_TOKEN_FILE" ] && break
	if ! kill -0 "${pids[0]}" 2>/dev/null; then
		echo "demo: controlplane exited:" >&2; tail -20 "$work/controlplane.log" >&2; exit 1
	fi
	sleep 0.1
done
echo "== making a token for the agent (scope agent) and starting agentd on $AGENT_ADDR"
./bin/blendctl token create --name demo-agent --scope agent >"$work/agent.token"
chmod 600 "$work/agent.token"
./bin/agentd --listen "$AGENT_ADDR" --control-plane "$CP_ADDR" --data-dir "$work/agentd" \
	--token-file "$work/agent.token" >"$work/agentd.log" 2>&1 &
pids+=($!)

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
