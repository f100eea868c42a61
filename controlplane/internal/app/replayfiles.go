package app

import (
	"context"
	"encoding/json"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/receiptwire"
)

// replayFiles gives a rebuilt session (or a fork) the files its replay
// reads. Before the replay it holds each uploaded name's newest version;
// a replayed scene.import gets the versions of the files it read the first
// time (its receipt's result names them: the model and the files it refers
// to), older uploads or files the session exported itself; after the
// replay each name pushed holds its newest version again. Without this, an import replayed after its file was
// uploaded again read the new content and the session broke.
type replayFiles struct {
	app       *App
	agentID   string
	target    string
	versions  map[string]*cpv1.Artifact                      // name + "\x00" + sha256 → a version of any origin
	uploads   []*cpv1.Artifact                               // each uploaded name's newest version, in order of first upload
	newest    map[string]*cpv1.Artifact                      // each name's newest version of any origin
	onAgent   map[string]string                              // name → sha256 of the content pushed to the target
	readByOps map[store.PlanRef]map[string]map[string]string // plan → operation → name → sha256
}

// newReplayFiles lists every version of sessionID's files the control
// plane recorded.
func (a *App) newReplayFiles(sessionID, agentID, target string) (*replayFiles, error) {
	f := &replayFiles{app: a, agentID: agentID, target: target, versions: map[string]*cpv1.Artifact{},
		newest: map[string]*cpv1.Artifact{}, onAgent: map[string]string{}, readByOps: map[store.PlanRef]map[string]map[string]string{}}
	newest := map[string]int{}
	var after uint64
	for {
		arts, next, err := a.store.ListArtifacts(sessionID, "", after, 1000)
		if err != nil {
			return nil, err
		}
		for _, art := range arts {
			f.versions[art.GetName()+"\x00"+art.GetSha256()] = art
			f.newest[art.GetName()] = art
			if art.GetRequestId() != "" {
				continue // made by an operation
			}
			if i, seen := newest[art.GetName()]; seen {
				f.uploads[i] = art
			} else {
				newest[art.GetName()] = len(f.uploads)
				f.uploads = append(f.uploads, art)
			}
		}
		if next == 0 {
			return f, nil
		}
		after = next
	}
}

// pushUploads copies each uploaded name's newest version to the target
// where it holds another.
func (f *replayFiles) pushUploads(ctx context.Context) error {
	for _, art := range f.uploads {
		if err := f.push(ctx, art); err != nil {
			return err
		}
	}
	return nil
}

// settle gives every name pushed its newest version again, where the
// control plane holds it: what the session's sandbox held before.
func (f *replayFiles) settle(ctx context.Context) error {
	for _, name := range slices.Sorted(maps.Keys(f.onAgent)) {
		if art := f.newest[name]; f.app.blobs.Has(art.GetSha256()) {
			if err := f.push(ctx, art); err != nil {
				return err
			}
		}
	}
	return nil
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

// beforeImport lists the versions of files that operation opID of plan ref
// (a scene.import) read the first time and the target does not hold: none
// when the control plane does not know or hold them (a receipt from before
// imports named what they read: the replay reads what is there, as it did
// then).
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
	for _, name := range slices.Sorted(maps.Keys(read[opID])) {
		sum := read[opID][name]
		if art := f.versions[name+"\x00"+sum]; art != nil && f.onAgent[name] != sum && f.app.blobs.Has(sum) {
			out = append(out, art)
		}
	}
	return out, nil
}

// importsRead maps each succeeded scene.import of a plan to the files it
// read, by name, with their SHA-256.
func (f *replayFiles) importsRead(ref store.PlanRef) (map[string]map[string]string, error) {
	read := map[string]map[string]string{}
	for from := int64(1); ; {
		rs, err := f.app.store.Receipts(ref, from, 1000)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			if r.GetToolName() != "scene.import" || r.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
				continue
			}
			raw, err := receiptwire.ResultJSON(r)
			if err != nil {
				return nil, err
			}
			var res struct {
				FilesRead map[string]string `json:"files_read"`
			}
			if json.Unmarshal(raw, &res) == nil && len(res.FilesRead) > 0 {
				read[r.GetOperationId()] = res.FilesRead
			}
		}
		if len(rs) < 1000 {
			return read, nil
		}
		from = rs[len(rs)-1].GetSequence() + 1
	}
}
