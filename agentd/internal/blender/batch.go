package blender

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// batchWindow is how many execute requests ExecuteBatch keeps written ahead
// of the responses it has read.
const batchWindow = 16

// BatchResult is the result of one call of ExecuteBatch.
type BatchResult struct {
	// Outcome and Err are what Execute would have returned for the call.
	Outcome Outcome
	Err     error
	// Start is when Blender could start the call: when its request was
	// written or, if later, when the previous call's response arrived.
	// Duration runs from Start to the arrival of its response.
	Start    time.Time
	Duration time.Duration
	// TimedOut: the call ran over its Call.Budget and Blender was killed
	// (Err is context.DeadlineExceeded).
	TimedOut bool
}

// written is the writer's news of one request: when it was written, or why
// it could not be.
type written struct {
	at     time.Time
	err    error // the write failed
	encode error // the request was refused (args too deep) or could not be encoded: nothing was written
}

// ExecuteBatch runs calls in order, like one Execute each, but writes up to
// batchWindow requests ahead of the responses, so that Blender starts a call
// as soon as it has answered the previous one and the round trip through
// the caller overlaps Blender's work. each receives the result of every call
// that ran, in order, on the caller's goroutine, as soon as it arrives;
// progress reports reach the call's OnProgress before its result. Results
// are handed to each one at a time: the next is not read until each returns.
//
// A failure stops the batch as it would stop a loop of Execute calls: after a
// call fails (any Err), no later call of the batch runs (the bridge refuses
// them unrun; they are not reported). When each returns false the batch stops
// there too; if later requests were already written, Blender may have run
// some of them, so it is killed (its next call fails with ErrProcessExited)
// and the caller must restore the scene from its journal, as after a
// cancelled call. If ctx ends while a call of the batch may still run,
// Blender is killed and the call in flight reports ctx.Err(); once the last
// call has answered, or the bridge reported a failure (it refuses the rest
// of the batch unrun), ctx's end changes nothing. A call over its
// Call.Budget kills Blender and reports TimedOut.
//
// It returns how many results each received.
func (p *Process) ExecuteBatch(ctx context.Context, calls []Call, each func(i int, r BatchResult) bool) int {
	if len(calls) == 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.unusable(); err != nil {
		each(0, BatchResult{Err: err, Start: time.Now()})
		return 1
	}
	if err := ctx.Err(); err != nil {
		each(0, BatchResult{Err: err, Start: time.Now()})
		return 1
	}
	first := p.nextID + 1
	p.nextID += uint64(len(calls))
	batch := fmt.Sprintf("b%d", first)

	ab := p.abandoner("batch abandoned; killing blender")
	defer ab.watch(ctx)()

	// The writer: one request per token; a token comes back with each
	// response, so at most batchWindow requests are ahead.
	tokens := make(chan struct{}, batchWindow)
	quit := make(chan struct{})
	wrote := make(chan written, len(calls))
	writerDone := make(chan struct{})
	nWritten := 0 // read only after writerDone
	go func() {
		defer close(writerDone)
		defer close(wrote)
		for i := range calls {
			select {
			case tokens <- struct{}{}:
			case <-quit:
				return
			}
			if err := checkArgsDepth(calls[i].Args); err != nil {
				wrote <- written{encode: err} // refused unsent, like Execute
				return
			}
			line, err := encodeExecute(first+uint64(i), calls[i].params(batch))
			if err != nil {
				wrote <- written{encode: fmt.Errorf("blender: encode execute: %w", err)}
				return
			}
			if _, err := p.reqW.Write(append(line, '\n')); err != nil {
				wrote <- written{err: err}
				return
			}
			nWritten++
			wrote <- written{at: time.Now()}
		}
	}()
	// abort stops the writer of a dead or killed process.
	abort := func() {
		close(quit)
		<-writerDone
	}

	var prevEnd time.Time
	for i := range calls {
		c := calls[i]
		id := first + uint64(i)
		res := BatchResult{Start: time.Now()}
		fail := func(err error) int {
			if ctx.Err() != nil {
				err = ab.abandon(ctx)
			}
			res.Err = err
			res.Duration = time.Since(res.Start)
			p.callLog(c).Warn("tool call failed", "err", err)
			each(i, res)
			abort()
			return i + 1
		}
		var w written
		select {
		case w = <-wrote:
		case <-ctx.Done():
			return fail(ctx.Err())
		}
		if w.encode != nil {
			return fail(w.encode)
		}
		if w.err != nil {
			return fail(p.exitError(w.err))
		}
		res.Start = w.at
		if prevEnd.After(res.Start) {
			res.Start = prevEnd
		}
		var timeout <-chan time.Time
		var timer *time.Timer
		if c.Budget > 0 {
			timer = time.NewTimer(time.Until(res.Start.Add(c.Budget)))
			timeout = timer.C
		}
	read:
		for {
			select {
			case <-ctx.Done():
				return fail(ctx.Err())
			case <-timeout:
				p.broken.Store(true)
				p.callLog(c).Warn("call over its budget; killing blender", "budget", c.Budget)
				p.killGroup()
				res.TimedOut = true
				res.Err = context.DeadlineExceeded
				res.Duration = time.Since(res.Start)
				each(i, res)
				abort()
				return i + 1
			case raw, ok := <-p.resps:
				if !ok {
					return fail(p.exitError(io.EOF))
				}
				resp, derr := decodeExecute(raw) // its result is decoded by outcome
				if derr != nil {
					p.broken.Store(true)
					p.killGroup()
					return fail(fmt.Errorf("%w: execute: bad response: %v", ErrProcessExited, derr))
				}
				if resp.ID == nil || *resp.ID != id {
					p.logger().Warn("dropping stale bridge response", "method", "execute", "want_id", id)
					continue
				}
				if resp.Progress != nil {
					if c.OnProgress != nil {
						c.OnProgress(resp.Progress)
					}
					continue
				}
				end := time.Now()
				<-tokens
				if i == len(calls)-1 || !resp.OK {
					// The last answer, or a failure the bridge saw: it
					// refuses the rest of the batch unrun (drain checks
					// while ctx lasts). An ok=false from outside m_execute
					// (a request the bridge could not parse) would not mark
					// the batch failed; checkArgsDepth keeps Go's requests
					// parseable.
					ab.settle()
				}
				var errHash string
				var err error
				switch {
				case !resp.OK && resp.Error == nil:
					err = &ToolError{Code: CodeInternalError, Message: "bridge returned ok=false without an error"}
				case !resp.OK && resp.Error.Code == codeNotRun:
					// Only after a failure, which ended the batch already.
					p.broken.Store(true)
					p.killGroup()
					return fail(fmt.Errorf("%w: bridge refused a call of a batch that had not failed", ErrProcessExited))
				case !resp.OK && resp.Error.Code == codeOutOfMemory:
					return fail(p.stopOverMemory(resp.Error.Message))
				case !resp.OK:
					errHash = resp.Error.SceneHash
					err = &ToolError{Code: resp.Error.Code, Message: resp.Error.Message}
				}
				res.Outcome, res.Err = p.outcome(c, resp.Result, errHash, err, res.Start)
				res.Duration = end.Sub(res.Start)
				prevEnd = end
				break read
			}
		}
		if timer != nil {
			timer.Stop()
		}
		more := each(i, res)
		if res.Err != nil {
			p.drain(ctx, ab, quit, writerDone, &nWritten, first, i+1)
			return i + 1
		}
		if !more {
			if i+1 < len(calls) {
				// Later requests may be written already, and may run: the
				// scene would no longer match the caller's record of it.
				// Killed first: the writer may be blocked on a full pipe.
				p.broken.Store(true)
				p.logger().Warn("batch stopped early with calls in flight; killing blender")
				p.killGroup()
			}
			abort()
			return i + 1
		}
	}
	<-writerDone
	return len(calls)
}

// drain reads the bridge's answers to the requests of a failed batch written
// after call index next-1 (failed): each must be a not_run refusal. Anything
// else means a call ran that the caller does not know of, so Blender is
// killed.
func (p *Process) drain(ctx context.Context, ab *abandonment, quit, writerDone chan struct{}, nWritten *int, first uint64, next int) {
	close(quit)
	done := false
	read := next
	for {
		if done && read >= *nWritten {
			return
		}
		select {
		case <-writerDone:
			done = true
			writerDone = nil
		case <-ctx.Done():
			// Unsettled (a failure Go made of an answer the bridge sent as
			// ok): the bridge runs the later requests. AfterFunc's kill may
			// not have started yet, and the deferred stop would cancel it.
			ab.abandonUnsettled(ctx)
			if !done {
				<-writerDone
			}
			return
		case raw, ok := <-p.resps:
			if !ok {
				if !done {
					<-writerDone
				}
				return
			}
			var resp response[json.RawMessage]
			if err := json.Unmarshal(raw, &resp); err != nil || resp.ID == nil {
				continue
			}
			if resp.Progress != nil || *resp.ID < first+uint64(read) {
				continue
			}
			if resp.OK || resp.Error == nil || resp.Error.Code != codeNotRun {
				p.broken.Store(true)
				p.logger().Warn("bridge ran a call after its batch failed; killing blender", "id", *resp.ID)
				p.killGroup()
				if !done {
					<-writerDone
				}
				return
			}
			read++
		}
	}
}
