package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// auditEtcd reports the members and the leader and judges the round trip. etcd keeps every
// write on a majority of members' disks and times leases on the leader, so the Redis checks do
// not apply.
func auditEtcd(ctx context.Context, s *store, ttl time.Duration) ([]finding, error) {
	c := s.etcd
	var ml *clientv3.MemberListResponse
	if err := probeStep(ctx, func(ctx context.Context) error {
		var err error
		ml, err = c.MemberList(ctx)
		return err
	}); err != nil {
		return nil, fmt.Errorf("listing the members: %w", err)
	}
	names := map[uint64]string{}
	for _, m := range ml.Members {
		names[m.ID] = memberName(m)
	}
	fs := []finding{etcdMembers(ml.Members)}

	leaders := map[uint64]bool{}
	version := ""
	for _, ep := range c.Endpoints() {
		var st *clientv3.StatusResponse
		err := probeStep(ctx, func(ctx context.Context) error {
			var err error
			st, err = c.Status(ctx, ep)
			return err
		})
		if err != nil {
			fs = append(fs, finding{Check: "member", Node: ep, Severity: sevWarn, Message: fmt.Sprintf(
				"does not answer: %v. The client fails over to the other endpoints; check that this member runs and is reachable from here.", err)})
			continue
		}
		leaders[st.Leader] = true
		version = st.Version
	}
	fs = append(fs, etcdLeader(leaders, names, version))

	var rtts []time.Duration
	for range doctorPings {
		start := time.Now()
		err := probeStep(ctx, func(ctx context.Context) error {
			_, err := c.Get(ctx, "fencelock-doctor", clientv3.WithCountOnly()) // linearizable: a trip through the leader
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("reading a key: %w", err)
		}
		rtts = append(rtts, time.Since(start))
	}
	fs = append(fs, judgeRTT("", rtts, ttl))
	fs = append(fs, finding{Check: "n/a", Severity: sevInfo, Message: "eviction, persistence, replication and clock checks do not apply to etcd: it writes every change to a majority of members' disks before it answers, never evicts keys, and times leases on the leader's monotonic clock."})
	return fs, nil
}

func memberName(m *etcdserverpb.Member) string {
	if m.Name != "" {
		return m.Name
	}
	return strconv.FormatUint(m.ID, 16)
}

func etcdMembers(members []*etcdserverpb.Member) finding {
	var voting []string
	for _, m := range members {
		if !m.IsLearner {
			voting = append(voting, memberName(m))
		}
	}
	n := len(voting)
	f := finding{Check: "members"}
	list := strings.Join(voting, ", ")
	switch {
	case n <= 1:
		f.Severity = sevWarn
		f.Message = fmt.Sprintf("one voting member (%s): no fault tolerance. While it is down no lock can be taken or renewed, and if its disk is lost so are the locks and their fencing revisions. Run 3 or 5 members on separate machines.", list)
	case n%2 == 0:
		f.Severity = sevInfo
		f.Message = fmt.Sprintf("%d voting members (%s): an even count tolerates no more failures (%d) than one member fewer; an odd count is the usual choice.", n, list, (n-1)/2)
	default:
		f.Severity = sevOK
		f.Message = fmt.Sprintf("%d voting members (%s): locks stay available with %d of them down.", n, list, (n-1)/2)
	}
	return f
}

func etcdLeader(leaders map[uint64]bool, names map[uint64]string, version string) finding {
	f := finding{Check: "leader"}
	switch {
	case len(leaders) == 0:
		f.Severity = sevWarn
		f.Message = "no member answered a status request: the leader is unknown."
	case leaders[0]:
		f.Severity = sevWarn
		f.Message = "a member reports no leader: until one is elected etcd refuses writes, so no lock can be taken or renewed (held leases are kept by the next leader)."
	case len(leaders) > 1:
		f.Severity = sevWarn
		f.Message = "members name different leaders: an election is under way or members are partitioned; locks wait until it settles."
	default:
		for id := range leaders {
			f.Severity = sevOK
			f.Message = fmt.Sprintf("leader %s, etcd %s.", names[id], version)
		}
	}
	return f
}
