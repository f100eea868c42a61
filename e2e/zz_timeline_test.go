package e2e

import (
	"fmt"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func BenchmarkZZTimeline(b *testing.B) {
	c := startCluster(b)
	for i := 0; i < 4; i++ {
		s := c.negotiate(b)
		warm := make([]*cpv1.Operation, benchWarmup)
		for j := range warm {
			warm[j] = cubeOp(fmt.Sprintf("op-%03d", j), fmt.Sprintf("W%d_%03d", i, j), j)
		}
		runPlan(b, c, s.GetSessionId(), fmt.Sprintf("bench-warm-%d", i), warm)
		ops := make([]*cpv1.Operation, benchOps)
		for j := range ops {
			ops[j] = cubeOp(fmt.Sprintf("op-%03d", j), fmt.Sprintf("C%d_%03d", i, j), j)
		}
		ctx := ctxT(b, time.Minute)
		t0 := time.Now()
		resp, err := c.client.SubmitPlan(ctx, &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: fmt.Sprint("tl", i), Operations: ops})
		if err != nil {
			b.Fatal(err)
		}
		tSub := time.Now()
		stream, _ := c.client.StreamReceipts(ctx, &cpv1.StreamReceiptsRequest{RequestId: fmt.Sprint("tl", i), StartSequence: 1})
		var first, last *cpv1.Receipt
		var firstArr, lastArr time.Time
		var dur time.Duration
		for n := 0; n < len(ops); n++ {
			r, err := stream.Recv()
			if err != nil {
				b.Fatal(err)
			}
			if r.GetReceipt() == nil {
				n--
				continue
			}
			if first == nil {
				first, firstArr = r.GetReceipt(), time.Now()
			}
			last, lastArr = r.GetReceipt(), time.Now()
			dur += time.Duration(r.GetReceipt().GetDurationMicros()) * time.Microsecond
		}
		ct := resp.GetPlan().GetCreateTime().AsTime()
		fStart := first.GetCompleteTime().AsTime().Add(-time.Duration(first.GetDurationMicros()) * time.Microsecond)
		ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e6) }
		fmt.Printf("submit→createTime %s | createTime→submitReturn %s | createTime→firstStart %s | firstStart→lastComplete %s (sum dur %s) | lastComplete→lastArrival %s | firstComplete→firstArrival %s | total server %s\n",
			ms(ct.Sub(t0)), ms(tSub.Sub(ct)), ms(fStart.Sub(ct)), ms(last.GetCompleteTime().AsTime().Sub(fStart)), ms(dur), ms(lastArr.Sub(last.GetCompleteTime().AsTime())), ms(firstArr.Sub(first.GetCompleteTime().AsTime())), ms(lastArr.Sub(ct)))
	}
}
