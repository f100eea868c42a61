package app

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/blendplane/blendplane/controlplane/internal/executor"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/receiptwire"
)

// replayFiles gives a rebuilt session (or a fork) the files its replay
// reads, when it reads them: a replayed scene.import gets the versions of
// the files it read the first time (its receipt's result names them: the
// model and the files it refers to), older uploads or files the session
// exported itself, and no file it did not find then. After the replay the
// target's sandbox holds what the session's did (settle). Before, every
// upload's newest version was pushed first, and an import replayed after
// its file was uploaded again read the new content and broke the session.
type replayFiles struct {
	app       *App
	sessionID string
	agentID   string
	target    string
	files     sessionFiles
	onAgent   map[string]string                              // name → sha256 of the content pushed to the target
	readByOps map[store.PlanRef]map[string]map[string]string // plan → operation → name → sha256
	legacy    bool                                           // the newest uploads were pushed for an import that names nothing
}

// sessionFiles are the versions of a session's files the control plane
// recorded.
type sessionFiles struct {
	byContent map[string]*cpv1.Artifact   // name + "\x00" + sha256 → a version of any origin
	byName    map[string][]*cpv1.Artifact // name → its versions, oldest first
	uploads   []string                    // the names clients uploaded, in order of first upload
}

func (a *App) newReplayFiles(sessionID, agentID, target string) (*replayFiles, error) {
	files, err := a.sessionFiles(sessionID)
	if err != nil {
		return nil, err
	}
	return &replayFiles{app: a, sessionID: sessionID, agentID: agentID, target: target, files: files,
		onAgent: map[string]string{}, readByOps: map[store.PlanRef]map[string]map[string]string{}}, nil
}

// sessionFiles lists every version of a session's files the control plane
// recorded.
func (a *App) sessionFiles(sessionID string) (sessionFiles, error) {
	f := sessionFiles{byContent: map[string]*cpv1.Artifact{}, byName: map[string][]*cpv1.Artifact{}}
	var after uint64
	uploaded := map[string]bool{}
	for {
		arts, next, err := a.store.ListArtifacts(sessionID, "", after, 1000)
		if err != nil {
			return f, err
		}
		for _, art := range arts {
			f.byContent[art.GetName()+"\x00"+art.GetSha256()] = art
			if art.GetRequestId() == "" && !uploaded[art.GetName()] {
				uploaded[art.GetName()] = true
				f.uploads = append(f.uploads, art.GetName())
			}
			f.byName[art.GetName()] = append(f.byName[art.GetName()], art)
		}
		if next == 0 {
			return f, nil
		}
		after = next
	}
}

// newest is the newest of versions (in the order recorded) that keep
// accepts, as the store orders a name's versions (store.Supersedes), or nil.
func newest(versions []*cpv1.Artifact, keep func(*cpv1.Artifact) (bool, error)) (*cpv1.Artifact, error) {
	var out *cpv1.Artifact
	for _, v := range versions {
		ok, err := keep(v)
		if err != nil {
			return nil, err
		}
		if ok && (out == nil || store.Supersedes(v, out)) {
			out = v
		}
	}
	return out, nil
}

// uploaded accepts the versions clients uploaded.
func uploaded(v *cpv1.Artifact) (bool, error) { return v.GetRequestId() == "", nil }

// beforeImport lists the versions of files that operation opID of plan ref
// (a scene.import) read the first time and the target does not hold. An
// import whose receipt names nothing (from before imports named what they
// read) gets every upload's newest version, once, as replays did then.
func (f *replayFiles) beforeImport(ref store.PlanRef, opID string) ([]*cpv1.Artifact, error) {
	read, ok := f.readByOps[ref]
	if !ok {
		var err error
		if read, err = f.importsRead(ref); err != nil {
			return nil, err
		}
		f.readByOps[ref] = read
	}
	var out []*cpv1.Artifact
	names, named := read[opID]
	if !named {
		if f.legacy {
			return nil, nil
		}
		f.legacy = true
		for _, name := range f.files.uploads {
			if art, _ := newest(f.files.byName[name], uploaded); art != nil && f.onAgent[name] != art.GetSha256() && f.app.blobs.Has(art.GetSha256()) {
				out = append(out, art)
			}
		}
		return out, nil
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		sum := names[name]
		if art := f.files.byContent[name+"\x00"+sum]; art != nil && f.onAgent[name] != sum && f.app.blobs.Has(sum) {
			out = append(out, art)
		}
	}
	return out, nil
}

// importsRead maps each scene.import of a plan that succeeded (or was
// found done: its receipt carries the first run's result) to the files it
// read, by name, with their SHA-256.
func (f *replayFiles) importsRead(ref store.PlanRef) (map[string]map[string]string, error) {
	read := map[string]map[string]string{}
	for from := int64(1); ; {
		rs, err := f.app.store.Receipts(ref, from, 1000)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			st := r.GetStatus()
			if r.GetToolName() != "scene.import" || (st != cpv1.Receipt_STATUS_SUCCEEDED && st != cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT) {
				continue
			}
			raw, err := receiptwire.ResultJSON(r)
			if err != nil {
				return nil, err
			}
			var res struct {
				FilesRead map[string]string `json:"files_read"`
			}
			if json.Unmarshal(raw, &res) == nil && res.FilesRead != nil {
				read[r.GetOperationId()] = res.FilesRead
			}
		}
		if len(rs) < 1000 {
			return read, nil
		}
		from = rs[len(rs)-1].GetSequence() + 1
	}
}

// settle gives the target what the session's sandbox held: each name at
// its newest version (read again: an upload may have come meanwhile). A
// fork gets the names uploaded or pushed for its replay; the session's own
// new home (whole) gets every name its calls wrote too (renders, exports),
// which a later import may read. A name whose newest version the control
// plane does not hold is left out (sandboxContent), and so is a file the
// target refuses for itself (the session's ceiling, a directory or a name
// it does not take), logged: the session goes on without that one file.
// A refusal for the agent's disk fails the rebuild, as an agent that does
// not answer does (the host is short), and so does a copy the control plane
// cannot read: the rebuild is tried again.
func (f *replayFiles) settle(ctx context.Context, whole bool) error {
	files, err := f.app.sessionFiles(f.sessionID)
	if err != nil {
		return err
	}
	arts, err := f.sandboxContent(files, whole)
	if err != nil {
		return err
	}
	for _, art := range arts {
		err := f.push(ctx, art)
		if !errors.Is(err, errAgentDiskShort) && (errors.Is(err, ErrQuotaExceeded) || errors.Is(err, ErrArtifactConflict) ||
			status.Code(err) == codes.InvalidArgument) {
			f.app.log.Warn("the new sandbox refuses a file of the session; the session goes on without it",
				"session_id", f.sessionID, "target", f.target, "name", art.GetName(), "err", err)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sandboxContent is what settle pushes: for each name it gives the target,
// in order, the newest version that was in the session's sandbox, when the
// control plane holds it.
func (f *replayFiles) sandboxContent(files sessionFiles, whole bool) ([]*cpv1.Artifact, error) {
	names := slices.Sorted(maps.Keys(f.onAgent))
	listed := maps.Clone(f.onAgent)
	add := func(name string) {
		if _, ok := listed[name]; !ok {
			listed[name] = ""
			names = append(names, name)
		}
	}
	for _, name := range files.uploads {
		add(name)
	}
	if whole {
		for _, name := range slices.Sorted(maps.Keys(files.byName)) {
			add(name)
		}
	}
	inSandbox := f.app.sandboxed(f.sessionID)
	var out []*cpv1.Artifact
	for _, name := range names {
		art, err := newest(files.byName[name], inSandbox)
		if err != nil {
			return nil, err
		}
		switch {
		case art == nil: // only a distributed render's frames, or previews
		case !f.app.blobs.Has(art.GetSha256()):
			// Left on the old agent (over the artifact quota, or not taken):
			// an older version would be a file the sandbox did not hold then.
			// One a replayed import read stays, though (agents remove no file).
			msg := "the control plane does not hold the newest version of a session's file; its new sandbox goes without it"
			if _, pushed := f.onAgent[name]; pushed {
				msg = "the control plane does not hold the newest version of a session's file; its new sandbox keeps the older one a replayed import read"
			}
			f.app.log.Warn(msg, "session_id", f.sessionID, "target", f.target, "name", name, "sha256", art.GetSha256())
		default:
			out = append(out, art)
		}
	}
	return out, nil
}

// sandboxed tells the versions of a session's files that were in its
// sandbox: uploads and what its calls wrote; not a distributed render's
// frames (rendered on forks, kept by the control plane only), nor a
// preview's render (a plan's, no operation's). A version's plan is read
// under each owner of a plan of the session with its request id (an admin
// may run plans in another's session), once per request id; when two
// owners used one request id, a version is in the sandbox unless no plan
// of them has its operation but a distributed render.
func (a *App) sandboxed(sessionID string) func(*cpv1.Artifact) (bool, error) {
	var owners map[string][]string // request id → owners of plans of the session
	type ops struct{ distributed, other map[string]bool }
	byPlan := map[string]ops{}
	return func(v *cpv1.Artifact) (bool, error) {
		rid, opID := v.GetRequestId(), v.GetOperationId()
		switch {
		case rid == "":
			return true, nil // an upload
		case opID == "":
			return false, nil // a preview's render
		}
		if owners == nil {
			owners = map[string][]string{}
			for before := uint64(0); ; {
				plans, next, err := a.store.SessionPlans(sessionID, "", before, 1000)
				if err != nil {
					return false, err
				}
				for _, p := range plans {
					owners[p.GetRequestId()] = append(owners[p.GetRequestId()], p.GetOwner())
				}
				if next == 0 {
					break
				}
				before = next
			}
		}
		o, ok := byPlan[rid]
		if !ok {
			o = ops{distributed: map[string]bool{}, other: map[string]bool{}}
			for _, owner := range owners[rid] {
				_, req, _, err := a.store.PlanWork(store.PlanRef{Owner: owner, RequestID: rid})
				if err != nil {
					return false, err
				}
				for _, op := range req.GetOperations() {
					if executor.Distributed(op) {
						o.distributed[op.GetOperationId()] = true
					} else {
						o.other[op.GetOperationId()] = true
					}
				}
			}
			byPlan[rid] = o
		}
		return !o.distributed[opID] || o.other[opID], nil
	}
}

// push copies one version to the target unless the target holds it.
func (f *replayFiles) push(ctx context.Context, art *cpv1.Artifact) error {
	if f.onAgent[art.GetName()] == art.GetSha256() {
		return nil
	}
	content, err := f.app.blobs.Open(art.GetSha256())
	if err != nil {
		return err
	}
	defer content.Close()
	to := proto.Clone(art).(*cpv1.Artifact)
	to.SessionId = f.target
	if err := f.app.push(ctx, f.agentID, to, content); err != nil {
		return err
	}
	f.onAgent[art.GetName()] = art.GetSha256()
	return nil
}
