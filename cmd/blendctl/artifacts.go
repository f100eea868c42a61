package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// chunkSize is the size of the chunks files are uploaded in.
const chunkSize = 512 << 10 // under the smallest message limit a control plane takes (1 MiB)

func (c *cli) upload(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("upload", flag.ContinueOnError)
	session := fs.String("session", "", "session to upload into (required)")
	name := fs.String("name", "", "name in the session's sandbox (default: the file's base name)")
	path, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *session == "" {
		return usageErr(errors.New("upload: --session is required"))
	}
	if *name == "" {
		*name = filepath.Base(path)
	}
	if !utf8.ValidString(*name) { // gRPC cannot carry it: say so before sending
		return fmt.Errorf("upload: the name %q is not valid UTF-8; give one with --name", *name)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// Declare size and hash, so the control plane refuses a file that
	// changed while it was read.
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	stream, err := c.cp.UploadArtifact(ctx)
	if err != nil {
		return err
	}
	header := &cpv1.ArtifactUpload{SessionId: *session, Name: *name, SizeBytes: size, Sha256: hex.EncodeToString(h.Sum(nil))}
	if err := stream.Send(&cpv1.UploadArtifactRequest{Part: &cpv1.UploadArtifactRequest_Header{Header: header}}); err != nil {
		_, err = stream.CloseAndRecv()
		return err
	}
	buf := make([]byte, chunkSize)
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			if err := stream.Send(&cpv1.UploadArtifactRequest{Part: &cpv1.UploadArtifactRequest_Chunk{Chunk: buf[:n]}}); err != nil {
				_, err = stream.CloseAndRecv() // the server's refusal
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(resp.GetArtifact())
	}
	a := resp.GetArtifact()
	fmt.Fprintf(c.out, "uploaded %s to session %s: %d bytes, sha256 %s\n", a.GetName(), a.GetSessionId(), a.GetSizeBytes(), a.GetSha256())
	return nil
}

func (c *cli) download(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("download", flag.ContinueOnError)
	session := fs.String("session", "", "session of the artifact (required)")
	sum := fs.String("sha256", "", "a version of the file by its SHA-256 (default: the newest)")
	out := fs.String("o", "", "file or directory to save to (default: the artifact's name here)")
	name, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *session == "" {
		return usageErr(errors.New("download: --session is required"))
	}
	target := *out
	switch fi, err := os.Stat(target); {
	case target == "":
		target = name
	case err == nil && fi.IsDir():
		target = filepath.Join(target, name)
	case strings.HasSuffix(target, "/"): // a directory to make, as submit --out makes its own
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		target = filepath.Join(target, name)
	}
	if fi, err := os.Stat(filepath.Dir(target)); err != nil || !fi.IsDir() {
		return fmt.Errorf("download: no directory %s to save %s in (end -o with / to make it)", filepath.Dir(target), filepath.Base(target))
	}
	a, err := c.fetch(ctx, &cpv1.DownloadArtifactRequest{SessionId: *session, Name: name, Sha256: *sum}, target)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(a)
	}
	fmt.Fprintf(c.out, "saved %s: %d bytes, sha256 %s\n", target, a.GetSizeBytes(), a.GetSha256())
	return nil
}

// fetch downloads an artifact into target (through a temporary file, so a
// broken download never leaves a partial file) and checks its SHA-256.
func (c *cli) fetch(ctx context.Context, req *cpv1.DownloadArtifactRequest, target string) (*cpv1.Artifact, error) {
	stream, err := c.cp.DownloadArtifact(ctx, req)
	if err != nil {
		return nil, err
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	a := first.GetArtifact()
	if a == nil {
		return nil, errors.New("download: the first message carried no artifact header")
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), ".blendctl-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	w := io.MultiWriter(tmp, h)
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(resp.GetChunk()); err != nil {
			return nil, err
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != a.GetSha256() {
		return nil, fmt.Errorf("download %s: content hashes to %s, the control plane said %s", a.GetName(), got, a.GetSha256())
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	return a, os.Rename(tmp.Name(), target)
}

func (c *cli) artifacts(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("artifacts", flag.ContinueOnError)
	session := fs.String("session", "", "session whose artifacts to list (required)")
	requestID := fs.String("request-id", "", "only the artifacts of this plan")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if *session == "" {
		return usageErr(errors.New("artifacts: --session is required"))
	}
	list, err := c.listArtifacts(ctx, *session, *requestID)
	if err != nil {
		return err
	}
	return printList(c, list, printArtifacts)
}

func (c *cli) listArtifacts(ctx context.Context, session, requestID string) ([]*cpv1.Artifact, error) {
	return allPages(ctx, func(ctx context.Context, token string) ([]*cpv1.Artifact, string, error) {
		resp, err := c.cp.ListArtifacts(ctx, &cpv1.ListArtifactsRequest{SessionId: session, RequestId: requestID, PageSize: 1000, PageToken: token})
		return resp.GetArtifacts(), resp.GetNextPageToken(), err
	})
}

// saveArtifacts downloads the files a plan's receipts made into dir (the
// newest version of each name) and returns their paths.
func (c *cli) saveArtifacts(ctx context.Context, session, requestID, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	list, err := c.listArtifacts(ctx, session, requestID)
	if err != nil {
		return nil, err
	}
	newest := map[string]*cpv1.Artifact{}
	var names []string
	for _, a := range list {
		if _, seen := newest[a.GetName()]; !seen {
			names = append(names, a.GetName())
		}
		newest[a.GetName()] = a
	}
	var saved []string
	for _, name := range names {
		a := newest[name]
		target := filepath.Join(dir, name)
		if _, err := c.fetch(ctx, &cpv1.DownloadArtifactRequest{SessionId: session, Name: name, Sha256: a.GetSha256()}, target); err != nil {
			return saved, fmt.Errorf("save %s: %w", name, err)
		}
		saved = append(saved, target)
		if !c.json {
			fmt.Fprintf(c.out, "saved %s (%d bytes, sha256 %s)\n", target, a.GetSizeBytes(), short(a.GetSha256()))
		}
	}
	if len(names) == 0 && !c.json {
		fmt.Fprintln(c.out, "the plan wrote no files")
	}
	return saved, nil
}
