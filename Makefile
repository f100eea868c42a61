# Blendplane build. `make demo` and `make test` set up everything they need,
# Blender included, on a fresh machine.

SHELL := /bin/bash
.DEFAULT_GOAL := build

# Pinned tool versions (buf: newer tags need modules the Go proxy lacks offline).
BUF_VERSION                := v1.70.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.0
GRPC_GATEWAY_VERSION       := v2.33.0
# Blender 4.5 LTS as a Python module, for CPython 3.11.
BPY_VERSION                := 4.5.15
# Third-party clients the tests drive the front doors with.
MCP_PY_VERSION             := 2.3.0
OPENAPI_VALIDATOR_VERSION  := 0.9.0
OPENAPI_CLIENT_GEN_VERSION := 0.29.1
MCP_INSPECTOR_VERSION      := 2.12.0
NODE22_VERSION             := 22.23.3
GEMINI_CLI_VERSION         := 0.61.0
CLAUDE_CODE_VERSION        := 2.1.197
GRPCIO_TOOLS_VERSION       := 1.85.1
GRPCIO_VERSION             := 1.85.3
PROTOBUF_PY_VERSION        := 7.36.2
GOOGLEAPIS_PROTOS_VERSION  := 1.76.0
PYTEST_VERSION             := 9.2.0
PROTOC_GEN_ES_VERSION      := 2.17.0
# Debian 12's chromium, for the web console's browser tests.
CHROMIUM_VERSION           := 156.0.8078.108-1~deb12u1

TOOLS_BIN := $(CURDIR)/.tools/bin
TOOLS_PY  := $(CURDIR)/.tools/py
TOOLS_NODE := $(CURDIR)/.tools/node
VENV      := $(CURDIR)/.blender/venv
CLIENTS   := $(CURDIR)/.clients
PYTHON311 ?= $(shell command -v python3.11 || command -v python3)
# The bpy wheel's interpreter: the system's python3.11 where it can make a venv (Debian's
# is linked statically; a pyenv build, first on PATH here, loads a shared libpython, and the
# bridge ran 10 % more instructions per object.set_transform on it, 6 % per object.create
# and 13 % to start: testdata/bridge_instructions.py), else PYTHON311.
BPY_PYTHON ?= $(shell for p in /usr/bin/python3.11 $(PYTHON311); do \
	"$$p" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null && { echo "$$p"; break; }; done)
export PATH := $(TOOLS_BIN):$(PATH)

GO_PACKAGES := ./...
BINARIES    := bin/controlplane bin/agentd bin/blendctl

.PHONY: tools generate lint build test check bench demo blender clients hosts browser screenshots clean

## tools: install pinned buf and the protoc plugins (Go, gRPC, grpc-gateway, OpenAPI) into .tools/bin
tools: $(TOOLS_BIN)/buf $(TOOLS_BIN)/protoc-gen-go $(TOOLS_BIN)/protoc-gen-go-grpc \
	$(TOOLS_BIN)/protoc-gen-grpc-gateway $(TOOLS_BIN)/protoc-gen-openapiv3 $(TOOLS_PY)/.grpcio-tools-$(GRPCIO_TOOLS_VERSION) \
	$(TOOLS_NODE)/.protoc-gen-es-$(PROTOC_GEN_ES_VERSION)

# protoc-gen-es for the TypeScript client (a Node script; buf runs it as a
# local plugin with buf.gen.ts.yaml).
$(TOOLS_NODE)/.protoc-gen-es-$(PROTOC_GEN_ES_VERSION):
	rm -rf $(TOOLS_NODE)
	mkdir -p $(TOOLS_NODE)
	echo '{"private": true}' > $(TOOLS_NODE)/package.json
	npm install --prefix $(TOOLS_NODE) --no-audit --no-fund --loglevel=error @bufbuild/protoc-gen-es@$(PROTOC_GEN_ES_VERSION)
	touch $@

# grpcio-tools for the Python client's stubs (its grpc plugin does not run
# under buf: python -m grpc_tools.protoc, directly).
$(TOOLS_PY)/.grpcio-tools-$(GRPCIO_TOOLS_VERSION):
	rm -rf $(TOOLS_PY)
	$(PYTHON311) -m venv $(TOOLS_PY)
	$(TOOLS_PY)/bin/pip install --quiet --disable-pip-version-check grpcio-tools==$(GRPCIO_TOOLS_VERSION)
	touch $@

$(TOOLS_BIN)/buf:
	GOBIN=$(TOOLS_BIN) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(TOOLS_BIN)/protoc-gen-go:
	GOBIN=$(TOOLS_BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(TOOLS_BIN)/protoc-gen-go-grpc:
	GOBIN=$(TOOLS_BIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(TOOLS_BIN)/protoc-gen-grpc-gateway:
	GOBIN=$(TOOLS_BIN) go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
$(TOOLS_BIN)/protoc-gen-openapiv3:
	GOBIN=$(TOOLS_BIN) go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv3@$(GRPC_GATEWAY_VERSION)

## generate: write the imported protos (validate, google.api) from their Go modules, then gen/ and the OpenAPI document from proto/
generate: tools
	go run ./cmd/protodeps proto
	buf format -w --path proto/buf --path proto/google
	rm -rf gen/blendplane gen/openapi/blendplane
	buf generate
	rm -rf clients/typescript/src/gen
	buf generate --template buf.gen.ts.yaml
	rm -rf clients/python/src/blendplane/controlplane clients/python/src/buf
	$(TOOLS_PY)/bin/python -m grpc_tools.protoc -I proto --python_out=clients/python/src --pyi_out=clients/python/src \
		--grpc_python_out=clients/python/src proto/blendplane/controlplane/v1/controlplane.proto proto/buf/validate/validate.proto

## lint: buf lint (STANDARD), buf format, gofmt, go vet
lint: tools
	buf lint
	@test -z "$$(buf format -d)" || { buf format -d; echo "buf format: run 'buf format -w'"; exit 1; }
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	go vet $(GO_PACKAGES)

## build: bin/controlplane, bin/agentd, bin/blendctl
build:
	go build -o bin/ ./cmd/controlplane ./cmd/agentd ./cmd/blendctl

## blender: make a Blender available (bpy wheel venv, and Debian's blender where apt works)
blender: $(VENV)/.bpy-$(BPY_VERSION)
	@if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	   { ! command -v blender >/dev/null 2>&1 || ! dpkg -s python3-numpy >/dev/null 2>&1; }; then \
		echo "installing Debian's blender package (Blender 3.4) and numpy for its glTF add-on"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends blender python3-numpy >/dev/null; } \
			|| echo "warning: apt could not install blender; continuing with the bpy wheel only"; \
	fi

## hosts: ip(8) and nft(8) for the multi-host tests (each host a network namespace), where apt works
hosts:
	@if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	   { ! command -v ip >/dev/null 2>&1 || ! command -v nft >/dev/null 2>&1; }; then \
		echo "installing Debian's iproute2 and nftables for the multi-host tests"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 nftables >/dev/null; } \
			|| echo "warning: apt could not install iproute2/nftables; the multi-host tests will skip"; \
	fi

## browser: Debian's chromium for the web console's tests (headless, driven by chromedp), where apt works;
## the pinned version while apt still serves it (Debian replaces it with each security update), else apt's
browser:
	@if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && ! command -v chromium >/dev/null 2>&1; then \
		echo "installing Debian's chromium $(CHROMIUM_VERSION) for the console's browser tests"; \
		apt-get update -qq && { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium=$(CHROMIUM_VERSION) >/dev/null \
			|| { echo "chromium $(CHROMIUM_VERSION) is no longer on apt; installing the version apt has"; \
			     DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; } \
			|| echo "warning: apt could not install chromium; the console's browser tests will fail"; \
	fi

## screenshots: the console's screenshots in docs/console/, taken by its browser test
screenshots: blender browser
	BLENDPLANE_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console go test -count=1 -run '^TestConsole$$' ./e2e/

$(VENV)/.bpy-$(BPY_VERSION):
	@test -n "$(BPY_PYTHON)" || { echo "need python3.11 (with its venv module) for the bpy wheel"; exit 1; }
	@echo "installing bpy==$(BPY_VERSION) (Blender 4.5 LTS) into .blender/venv, on $(BPY_PYTHON)"
	rm -rf $(VENV)
	$(BPY_PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check bpy==$(BPY_VERSION)
	$(VENV)/bin/python -c 'import bpy; print("bpy", bpy.app.version_string)'
	touch $@

## clients: the third-party clients the tests use (Python MCP SDK, openapi-spec-validator, openapi-python-client; MCP Inspector, Gemini CLI and Claude Code on Node 22), pinned, in .clients/
clients: $(CLIENTS)/py/.mcp-$(MCP_PY_VERSION)-$(OPENAPI_VALIDATOR_VERSION)-$(OPENAPI_CLIENT_GEN_VERSION) $(CLIENTS)/node/.clients-$(MCP_INSPECTOR_VERSION)-$(GEMINI_CLI_VERSION)-$(CLAUDE_CODE_VERSION) \
	$(CLIENTS)/py/.blendplane-$(GRPCIO_VERSION)-$(PROTOBUF_PY_VERSION)-$(GOOGLEAPIS_PROTOS_VERSION)-$(PYTEST_VERSION) \
	clients/typescript/node_modules/.installed

# The TypeScript client's packages, as its package-lock.json pins them.
clients/typescript/node_modules/.installed: clients/typescript/package-lock.json
	npm ci --prefix clients/typescript --no-audit --no-fund --loglevel=error
	touch $@

# The project's own Python client (editable: the tests always run the tree's
# code), its pinned dependencies and pytest, beside the MCP SDK.
$(CLIENTS)/py/.blendplane-$(GRPCIO_VERSION)-$(PROTOBUF_PY_VERSION)-$(GOOGLEAPIS_PROTOS_VERSION)-$(PYTEST_VERSION): $(CLIENTS)/py/.mcp-$(MCP_PY_VERSION)-$(OPENAPI_VALIDATOR_VERSION)-$(OPENAPI_CLIENT_GEN_VERSION)
	@echo "installing the Python client (clients/python, editable) and pytest into .clients/py"
	$(CLIENTS)/py/bin/pip install --quiet --disable-pip-version-check grpcio==$(GRPCIO_VERSION) grpcio-status==$(GRPCIO_VERSION) \
		protobuf==$(PROTOBUF_PY_VERSION) googleapis-common-protos==$(GOOGLEAPIS_PROTOS_VERSION) pytest==$(PYTEST_VERSION)
	$(CLIENTS)/py/bin/pip install --quiet --disable-pip-version-check --no-deps -e clients/python
	touch $@

# The Inspector needs Node 22; npm serves it as the node@22 package, whose
# bin/node the tests put first on PATH.
$(CLIENTS)/node/.clients-$(MCP_INSPECTOR_VERSION)-$(GEMINI_CLI_VERSION)-$(CLAUDE_CODE_VERSION):
	@echo "installing Node $(NODE22_VERSION), the MCP Inspector $(MCP_INSPECTOR_VERSION), Gemini CLI $(GEMINI_CLI_VERSION) and Claude Code $(CLAUDE_CODE_VERSION) into .clients/node"
	rm -rf $(CLIENTS)/node
	mkdir -p $(CLIENTS)/node
	echo '{"private": true}' > $(CLIENTS)/node/package.json
	npm install --prefix $(CLIENTS)/node --no-audit --no-fund --loglevel=error \
		node@$(NODE22_VERSION) @modelcontextprotocol/inspector@$(MCP_INSPECTOR_VERSION) @google/gemini-cli@$(GEMINI_CLI_VERSION) \
		@anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)
	$(CLIENTS)/node/node_modules/.bin/node --version
	touch $@

$(CLIENTS)/py/.mcp-$(MCP_PY_VERSION)-$(OPENAPI_VALIDATOR_VERSION)-$(OPENAPI_CLIENT_GEN_VERSION):
	@echo "installing the Python MCP SDK (mcp==$(MCP_PY_VERSION)), openapi-spec-validator and openapi-python-client into .clients/py"
	rm -rf $(CLIENTS)/py
	$(PYTHON311) -m venv $(CLIENTS)/py
	$(CLIENTS)/py/bin/pip install --quiet --disable-pip-version-check mcp==$(MCP_PY_VERSION) \
		openapi-spec-validator==$(OPENAPI_VALIDATOR_VERSION) openapi-python-client==$(OPENAPI_CLIENT_GEN_VERSION)
	touch $@

## test: unit tests, then integration tests on the real binaries and real Blender
## (the bridge's tests run on every installed Blender; the end-to-end suite runs
## on the bpy wheel, its main cluster tests once more on Debian's 3.4, and its
## random requests and main cluster test on daemons built with -race)
test: blender clients hosts browser
	go test -count=1 -timeout 20m $(GO_PACKAGES)
	@if [ -x /usr/bin/blender ]; then \
		echo "== end-to-end cluster tests on Debian's Blender 3.4"; \
		BLENDPLANE_TEST_BLENDER=/usr/bin/blender go test -count=1 -timeout 10m -run 'TestCluster|TestAtomicRollback|TestBadInput' ./e2e/; \
	fi
	@echo "== the daemons built with the race detector: random requests, then the cluster test"
	BLENDPLANE_E2E_RACE=1 go test -count=1 -timeout 10m -run 'TestRandomRequests|TestCluster$$' ./e2e/

## check: fail on any drift (generated code, lint, format, go.mod, import boundaries)
check: lint
	@snap=$$(mktemp -d) && cp -r gen proto go.mod go.sum "$$snap"/ && cp -r clients/python/src "$$snap"/pysrc && cp -r clients/typescript/src/gen "$$snap"/tsgen && \
	$(MAKE) --no-print-directory generate && \
	{ diff -r "$$snap/gen" gen && diff -r "$$snap/proto" proto && diff -r -x __pycache__ -x "*.egg-info" "$$snap/pysrc" clients/python/src && \
	  diff -r "$$snap/tsgen" clients/typescript/src/gen; } || { echo "gen/ or a client's generated code drifted from proto/: run 'make generate' and commit"; exit 1; }; \
	go mod tidy && { cmp -s "$$snap/go.mod" go.mod && cmp -s "$$snap/go.sum" go.sum; } || { echo "go.mod/go.sum drifted: run 'go mod tidy' and commit"; exit 1; }; \
	rm -rf "$$snap"
	@deps=$$(go list -deps ./agentd/... ./cmd/agentd) && ! echo "$$deps" | grep -q '/controlplane/internal' || { echo "agentd imports controlplane internals"; exit 1; }
	@deps=$$(go list -deps ./controlplane/... ./cmd/controlplane) && ! echo "$$deps" | grep -q '/agentd/internal' || { echo "controlplane imports agentd internals"; exit 1; }
	@deps=$$(go list -deps ./mcp/... ./lesson/... ./planner/... ./planjson/... ./cmd/blendctl) && ! echo "$$deps" | grep -Eq 'blendplane/blendplane/(controlplane|agentd)/' || \
		{ echo "a front door imports a daemon's packages: front doors are clients of gen/ only"; exit 1; }
	@echo "check: no drift"

## bench: end-to-end, scale, recovery, validation and per-tool-family benchmarks (results: docs/BENCHMARKS.md)
# One full measurement per benchmark run (-benchtime 1x), three runs for the spread
# (BenchmarkScale builds its 100- and 10,000-object scenes once and repeats only the
# measurements); about 12 minutes on 2 CPUs (BenchmarkDispatch runs 20 Blenders and 500 plans
# three times, BenchmarkFailover builds a 10,000-object
# session per run, BenchmarkRenderFanOut renders 72 frames). Then BenchmarkToolFamilies (every tool
# family at 100 vs 10,000 objects, in process on the bpy wheel; it builds its scenes
# per run, in seconds), BenchmarkCheckpointSave and BenchmarkRehash (a checkpoint's save,
# its load and python.exec at 100 vs 10,000 objects) and BenchmarkBridgePhases (where the bridge's
# time per create and per set_transform goes, on both Blenders): about 3 minutes more. The output also goes to bin/bench.out.
# -p 1: one package's benchmarks at a time (go test runs packages side by side
# by default, and two benchmarks sharing the 2 CPUs measure each other).
bench: blender
	@mkdir -p bin
	set -o pipefail; go test -p 1 -run '^$$' -bench . -benchtime 1x -count 3 -timeout 30m \
		./e2e/ ./controlplane/internal/plan/ ./controlplane/internal/store/ ./agentd/internal/sessions/ ./agentd/internal/journal/ | tee bin/bench.out
	set -o pipefail; go test -run '^$$' -bench '^(BenchmarkToolFamilies|BenchmarkCheckpointSave|BenchmarkRehash|BenchmarkBridgePhases)$$' -benchtime 1x -count 3 -timeout 15m \
		./agentd/internal/blender/ | tee -a bin/bench.out
	@if [ -x /usr/bin/blender ]; then \
		echo "== ObjectCreate400 on Debian's Blender 3.4"; \
		set -o pipefail; BLENDPLANE_TEST_BLENDER=/usr/bin/blender go test -run '^$$' -bench '^BenchmarkObjectCreate400$$' \
			-benchtime 1x -count 3 -timeout 10m ./e2e/ | tee -a bin/bench.out; \
	fi

## demo: start both daemons on loopback, run examples/plans/hello.json, show receipts
demo: build blender
	./examples/demo.sh

clean:
	rm -rf bin .tools
