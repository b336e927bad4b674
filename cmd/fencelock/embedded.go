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
	dir string
	url string // etcd://127.0.0.1:port
}

func startEmbeddedEtcd() (*embeddedEtcd, error) {
	dir, err := os.MkdirTemp("", "fencelock-demo-etcd-")
	if err != nil {
		return nil, err
	}
	client, err := loopbackURL()
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
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting the embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("the embedded etcd was not ready after 30s")
	}
	return &embeddedEtcd{e: e, dir: dir, url: "etcd://" + client.Host}, nil
}

func (m *embeddedEtcd) close() {
	m.e.Close()
	_ = os.RemoveAll(m.dir)
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
