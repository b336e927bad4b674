package etcdbackend_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdbackend/etcdtest"
)

func BenchmarkScratchReleaseForms(b *testing.B) {
	ctx := context.Background()
	cluster := etcdtest.Start(b, etcdtest.Options{NoFsync: true})
	cli := cluster.Client(b)
	lease, err := cli.Grant(ctx, 10)
	if err != nil {
		b.Fatal(err)
	}
	key, meta, val := "/bench/q/ownerownerownerowner", "/bench/!meta/q/ownerownerownerowner", "\x00"
	forms := map[string]func(rev int64) error{
		"A-delete": func(int64) error { _, err := cli.Delete(ctx, key); return err },
		"B-txn1cmp": func(int64) error {
			_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", val)).Then(clientv3.OpDelete(key)).Commit()
			return err
		},
		"B2-txnrev": func(rev int64) error {
			_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
			return err
		},
		"C-txn2cmp": func(rev int64) error {
			_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", val), clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
			return err
		},
		"D-txn2cmp2del": func(rev int64) error {
			_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", val), clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key), clientv3.OpDelete(meta)).Commit()
			return err
		},
		"E-current": func(rev int64) error {
			_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", val), clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key), clientv3.OpDelete(meta)).Else(clientv3.OpGet(key)).Commit()
			return err
		},
	}
	names := []string{"A-delete", "B-txn1cmp", "B2-txnrev", "C-txn2cmp", "D-txn2cmp2del", "E-current"}
	times := map[string][]time.Duration{}
	for i := 0; b.Loop(); i++ {
		for j := range names {
			n := names[(i+j)%len(names)]
			r, err := cli.Put(ctx, key, val, clientv3.WithLease(lease.ID))
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			if err := forms[n](r.Header.Revision); err != nil {
				b.Fatal(err)
			}
			times[n] = append(times[n], time.Since(t0))
		}
	}
	base := p50(times["A-delete"])
	for _, n := range names {
		b.ReportMetric(float64(p50(times[n]))/float64(base), n)
	}
	b.ReportMetric(float64(base.Microseconds()), "delete-µs")
}
