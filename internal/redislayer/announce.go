package redislayer

import _ "embed"

// AnnounceLua is announce.lua: the Lua function announce, which the scripts that free a lock
// put before their own source.
//
//go:embed announce.lua
var AnnounceLua string

// Announcement is what a release script passes to announce: the command that publishes a
// release, and the PUBSUB subcommand that counts its listeners ("" to publish always), each
// boxed once as a script argument (boxing a string allocates).
type Announcement struct {
	Publish, Count any
}

// Announce returns how releases are announced on a deployment. Under sharded pub/sub the
// shard's server counts the listeners of a channel; without it a Cluster node counts only its
// own, so a Cluster without sharded pub/sub always publishes.
func Announce(cluster, sharded bool) Announcement {
	switch {
	case sharded:
		return Announcement{"SPUBLISH", "SHARDNUMSUB"}
	case cluster:
		return Announcement{"PUBLISH", ""}
	}
	return Announcement{"PUBLISH", "NUMSUB"}
}
