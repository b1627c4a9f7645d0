package badgerstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/dgraph-io/badger/v4/pb"
	"google.golang.org/protobuf/proto"
)

// withoutReserved reads a backup stream (Badger's format: a little-endian
// uint64 length, then a pb.KVList, repeated) and yields it without the
// store's own keys (reservedKey), which backups taken before Backup left
// them out still carry: loaded, another directory's applied sequence
// number or ledger id would replace this one's.
func withoutReserved(r io.Reader) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(filterBackup(bufio.NewReaderSize(r, 64<<10), pw))
	}()
	return pr
}

func filterBackup(r io.Reader, w io.Writer) error {
	var buf []byte
	for {
		var sz uint64
		if err := binary.Read(r, binary.LittleEndian, &sz); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading backup: %w", err)
		}
		if sz > 1<<31 {
			return fmt.Errorf("reading backup: a list of %d bytes", sz)
		}
		if uint64(cap(buf)) < sz {
			buf = make([]byte, sz)
		}
		if _, err := io.ReadFull(r, buf[:sz]); err != nil {
			return fmt.Errorf("reading backup: %w", err)
		}
		list := &pb.KVList{}
		if err := proto.Unmarshal(buf[:sz], list); err != nil {
			return fmt.Errorf("reading backup: %w", err)
		}
		kept := list.Kv[:0]
		for _, kv := range list.Kv {
			if !reservedKey(kv.Key) {
				kept = append(kept, kv)
			}
		}
		list.Kv = kept
		out, err := proto.Marshal(list)
		if err != nil {
			return err
		}
		if err := binary.Write(w, binary.LittleEndian, uint64(len(out))); err != nil {
			return err
		}
		if _, err := w.Write(out); err != nil {
			return err
		}
	}
}
