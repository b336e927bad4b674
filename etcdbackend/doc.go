// Package etcdbackend keeps fencelock locks in etcd.
package etcdbackend
