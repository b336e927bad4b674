package redislayer

import _ "embed"

// AnnounceLua is announce.lua: the Lua function announce, which the scripts that free a lock
// put before their own source.
//
//go:embed announce.lua
var AnnounceLua string

// Announce returns how releases are announced on a deployment, as announce.lua reads it.
// Under sharded pub/sub the shard's server counts the listeners of a channel ("SHARDNUMSUB":
// SPUBLISH when it counts one); without it a Cluster node counts only its own, so a Cluster
// without sharded pub/sub always publishes ("PUBLISH"); a single server counts them
// ("NUMSUB": PUBLISH when it counts one).
func Announce(cluster, sharded bool) string {
	switch {
	case sharded:
		return "SHARDNUMSUB"
	case cluster:
		return "PUBLISH"
	}
	return "NUMSUB"
}
