package redislayer

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisconn"
)

// CheckPrefix says why prefix cannot begin the keys of locks: a brace would break the hash tag
// that keeps a lock's keys in one Cluster slot.
func CheckPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("%w: key prefix %q contains a brace, which would break the hash tag", driver.ErrInvalid, prefix)
	}
	return nil
}

// CheckName says why name cannot be locked. A name that starts with '}' would make the hash
// tag of its keys empty, and Redis Cluster would then hash each key whole, into different
// slots.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty lock name", driver.ErrInvalid)
	case name[0] == '}':
		return fmt.Errorf("%w: lock name %q starts with '}', which would empty its Cluster hash tag", driver.ErrInvalid, name)
	}
	return nil
}

// Key returns the key of the lock name: <prefix>{<name>}. The lock's other keys are this key
// and a suffix, in the same slot.
func Key(prefix, name string) string { return prefix + "{" + name + "}" }

// Names returns the names of the locks under prefix whose names start with namePrefix, from
// a SCAN of every master. It sees the keys there when each was scanned, not at one instant.
func Names(ctx context.Context, c redisconn.Conn, prefix, namePrefix string) ([]string, error) {
	return NamesOf(ctx, c, prefix, namePrefix, "")
}

// NamesOf returns the names N that start with namePrefix of the keys <prefix>{N}<suffix>,
// for each of suffixes (one or more), each name once, from one SCAN of every master. It sees the keys there
// when each was scanned, not at one instant.
func NamesOf(ctx context.Context, c redisconn.Conn, prefix, namePrefix string, suffixes ...string) ([]string, error) {
	// One pattern for every suffix, so that each master is scanned once: the suffixes' common
	// beginning, then anything when they differ; the keys found are held to each suffix here.
	common := suffixes[0]
	for _, s := range suffixes[1:] {
		for !strings.HasPrefix(s, common) {
			common = common[:len(common)-1]
		}
	}
	match := globEscape(prefix+"{"+namePrefix) + "*}" + globEscape(common)
	if len(suffixes) > 1 {
		match += "*"
	}
	var mu sync.Mutex // ForEachMaster may call at once for several masters; guards seen and names
	seen := map[string]bool{}
	var names []string
	err := c.ForEachMaster(ctx, func(ctx context.Context, n redisconn.Node) error {
		return scan(ctx, n, match, func(key string) {
			mu.Lock()
			defer mu.Unlock()
			for _, s := range suffixes {
				end := len(key) - len(s) - 1 // the closing brace
				if end < len(prefix)+1 || !strings.HasSuffix(key, "}"+s) {
					continue
				}
				if name := key[len(prefix)+1 : end]; !seen[name] {
					seen[name] = true
					names = append(names, name)
				}
			}
		})
	})
	if err != nil {
		return nil, Classify(err)
	}
	return names, nil
}

// scan calls found with each key of node n that matches match.
func scan(ctx context.Context, n redisconn.Node, match string, found func(key string)) error {
	cursor := "0"
	for {
		reply, err := redisconn.Slice(n.Do(ctx, "SCAN", cursor, "MATCH", match, "COUNT", 512))
		if err != nil {
			return err
		}
		if len(reply) != 2 {
			return fmt.Errorf("%w: unexpected SCAN reply %v", driver.ErrUnavailable, reply)
		}
		keys, _ := reply[1].([]any)
		for _, k := range keys {
			if s, ok := k.(string); ok {
				found(s)
			}
		}
		switch c := reply[0].(type) {
		case string:
			cursor = c
		case int64:
			cursor = strconv.FormatInt(c, 10)
		default:
			return fmt.Errorf("%w: unexpected SCAN cursor %v", driver.ErrUnavailable, reply[0])
		}
		if cursor == "0" {
			return nil
		}
	}
}

// globEscape escapes the characters SCAN MATCH treats as a pattern.
func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}
