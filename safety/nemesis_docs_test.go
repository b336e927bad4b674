package safety

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"syscall"
)

// replaceBetween replaces what lies between the begin and end markers of the file at path
// with body, under an exclusive lock: the long run's two test processes may write the file at
// once (see writeResults).
func replaceBetween(path, begin, end, body string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	doc, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q … %q markers", path, begin, end)
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(begin)])
	out.WriteString("\n" + body)
	out.Write(doc[j:])
	if _, err := f.WriteAt(out.Bytes(), 0); err != nil {
		return err
	}
	return f.Truncate(int64(out.Len()))
}
