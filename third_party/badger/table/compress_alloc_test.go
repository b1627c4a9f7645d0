package table

import (
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/y"
)

// A builder that compresses its blocks keeps in its allocator only the
// bytes each block compressed to: not the compressor's bound for each
// block, nor the raw block once it is compressed (Ratchet's patches). On
// compressible data (a 16 MiB memtable flush of Ratchet's records) its
// allocator holds well under half the raw blocks' bytes.
func TestBuilderAllocatorHoldsCompressedBytesNotTheirBound(t *testing.T) {
	for _, c := range []options.CompressionType{options.Snappy, options.ZSTD} {
		opts := Options{BlockSize: 16 << 10, TableSize: 2 << 20, BloomFalsePositive: 0.01, Compression: c, ZSTDCompressionLevel: 1}
		b := NewTableBuilder(opts)
		val := make([]byte, 200)
		for i := range val {
			val[i] = byte('a' + i%8)
		}
		for i := 0; b.uncompressedSize.Load() < 8<<20; i++ {
			b.Add(y.KeyWithTs([]byte(fmt.Sprintf("effect/%016d", i)), 1), y.ValueStruct{Value: val}, 0)
		}
		b.Finish()
		raw, used := int(b.uncompressedSize.Load()), b.alloc.Size()
		b.Close()
		if limit := raw / 2; used > limit {
			t.Errorf("compression %d: the allocator holds %d bytes for %d bytes of blocks (compressed to %d), more than %d", c, used, raw, b.compressedSize.Load(), limit)
		}
	}
}
