package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// embeddedEtcd is a real, single-member etcd started inside this process on loopback ports,
// so that the demo needs nothing installed.
type embeddedEtcd struct {
	e   *embed.Etcd
	dir string // its data, removed at close; empty for a directory of the caller's
	url string // etcd://127.0.0.1:port
}

func startEmbeddedEtcd() (*embeddedEtcd, error) { return serveEtcd("", "") }

// serveEtcd starts a single-member etcd in this process, its clients served on listen
// (host:port; a free loopback port when empty), its data in dir (a temporary directory, removed
// at close, when empty).
func serveEtcd(listen, dir string) (*embeddedEtcd, error) {
	temp := dir == ""
	if temp {
		var err error
		if dir, err = os.MkdirTemp("", "fencelock-demo-etcd-"); err != nil {
			return nil, err
		}
	}
	client, err := loopbackURL()
	if listen != "" {
		client, err = url.Parse("http://" + listen)
	}
	if err != nil {
		return nil, err
	}
	peer, err := loopbackURL()
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "demo"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = "demo=" + peer.String()
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	m := &embeddedEtcd{url: "etcd://" + client.Host}
	if temp {
		m.dir = dir
	}
	if m.e, err = embed.StartEtcd(cfg); err != nil {
		m.close()
		return nil, fmt.Errorf("starting the embedded etcd: %w", err)
	}
	select {
	case <-m.e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		m.close()
		return nil, fmt.Errorf("the embedded etcd was not ready after 30s")
	}
	return m, nil
}

// close stops the etcd and removes its data when it was temporary.
func (m *embeddedEtcd) close() {
	if m.e != nil {
		m.e.Close()
	}
	if m.dir != "" {
		_ = os.RemoveAll(m.dir)
	}
}

func loopbackURL() (*url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	return url.Parse("http://" + addr)
}
