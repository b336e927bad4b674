package redislayer

import (
	"fmt"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisconn"
)

// Open returns c as a Conn (see redisconn.Of); what is not a Redis client gives an error that
// matches driver.ErrInvalid.
func Open(c any) (redisconn.Conn, error) {
	conn, err := redisconn.Of(c)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", driver.ErrInvalid, err)
	}
	return conn, nil
}
