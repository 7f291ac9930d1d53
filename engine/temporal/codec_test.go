package temporal

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobdir"
)

func testKey(t testing.TB) []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// openDir returns a fresh blob folder.
func openDir(t testing.TB) *blobdir.Dir {
	t.Helper()
	d, err := blobdir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// openBlobs returns one tenant's blobs in a fresh blob folder.
func openBlobs(t testing.TB) store.BlobStore { return openDir(t).Blobs("t") }

func newCodec(t testing.TB, blobs store.BlobStore, key []byte) *BlobCodec {
	t.Helper()
	c, err := NewBlobCodec(BlobCodecOptions{Blobs: blobs, Key: key, Threshold: 1024, MaxBlob: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func payload(n int) *commonpb.Payload {
	return &commonpb.Payload{
		Metadata: map[string][]byte{"encoding": []byte("json/plain")},
		Data:     bytes.Repeat([]byte("x"), n),
	}
}

func TestBlobCodecRoundTrip(t *testing.T) {
	blobs := openBlobs(t)
	c := newCodec(t, blobs, testKey(t))
	small, big := payload(100), payload(100_000)
	enc, err := c.Encode([]*commonpb.Payload{small, big, nil})
	if err != nil {
		t.Fatal(err)
	}
	if enc[0] != small || enc[2] != nil {
		t.Fatalf("a small or nil payload was changed: %v", enc)
	}
	if got := string(enc[1].Metadata["encoding"]); got != blobRefEncoding {
		t.Fatalf("large payload encoding %q, want a reference", got)
	}
	if len(enc[1].Data) > 300 {
		t.Fatalf("reference is %d bytes", len(enc[1].Data))
	}
	var ref blobRef
	if err := json.Unmarshal(enc[1].Data, &ref); err != nil {
		t.Fatal(err)
	}
	raw, _ := hex.DecodeString(ref.SHA256)
	var sum [32]byte
	copy(sum[:], raw)
	if n, err := blobs.BlobSize(context.Background(), sum); err != nil || n != ref.Size {
		t.Fatalf("blob %s in the store: size %d, %v; reference says %d", ref.SHA256, n, err, ref.Size)
	}
	dec, err := c.Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	if dec[0] != small || dec[2] != nil || !bytes.Equal(dec[1].Data, big.Data) || string(dec[1].Metadata["encoding"]) != "json/plain" {
		t.Fatalf("decoded payloads differ from the originals")
	}
}

// refTo encodes a payload, then lets mutate change the reference's fields.
func refTo(t *testing.T, c *BlobCodec, mutate func(*blobRef)) *commonpb.Payload {
	t.Helper()
	enc, err := c.Encode([]*commonpb.Payload{payload(50_000)})
	if err != nil {
		t.Fatal(err)
	}
	var ref blobRef
	if err := json.Unmarshal(enc[0].Data, &ref); err != nil {
		t.Fatal(err)
	}
	mutate(&ref)
	data, _ := json.Marshal(ref)
	return &commonpb.Payload{Metadata: enc[0].Metadata, Data: data}
}

func TestBlobCodecRefusesBadReferences(t *testing.T) {
	blobs := openBlobs(t)
	key := testKey(t)
	c := newCodec(t, blobs, key)
	other := newCodec(t, blobs, testKey(t))

	otherSum, err := blobs.PutBlob(context.Background(), []byte("another tenant's blob"))
	if err != nil {
		t.Fatal(err)
	}
	refBytes := func(data string) *commonpb.Payload {
		return &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte(blobRefEncoding)}, Data: []byte(data)}
	}
	cases := []struct {
		name string
		p    *commonpb.Payload
		want string
	}{
		{"minted by another key", func() *commonpb.Payload {
			enc, err := other.Encode([]*commonpb.Payload{payload(50_000)})
			if err != nil {
				t.Fatal(err)
			}
			return enc[0]
		}(), "bad MAC"},
		{"hash swapped for another blob", refTo(t, c, func(r *blobRef) { r.SHA256 = hex.EncodeToString(otherSum[:]) }), "bad MAC"},
		{"size changed", refTo(t, c, func(r *blobRef) { r.Size++ }), "bad MAC"},
		{"size over the bound", refTo(t, c, func(r *blobRef) { r.Size = 1 << 40 }), "outside 1.."},
		{"negative size", refTo(t, c, func(r *blobRef) { r.Size = -1 }), "outside 1.."},
		{"short hash", refTo(t, c, func(r *blobRef) { r.SHA256 = "abcd" }), "malformed"},
		{"unknown field", refBytes(`{"sha256":"00","size":1,"mac":"","path":"/etc/passwd"}`), "malformed"},
		{"trailing data", refBytes(`{"sha256":"00","size":1,"mac":""} {}`), "trailing"},
		{"not JSON", refBytes("\x00\x01"), "malformed"},
		{"oversized reference", refBytes(`{"sha256":"` + strings.Repeat("0", 2000) + `"}`), "over the 1024-byte bound"},
	}
	for _, tc := range cases {
		_, err := c.Decode([]*commonpb.Payload{tc.p})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Decode = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}

	// A reference whose MAC the right key made (so it passed every check
	// above) to a blob that does not exist is refused too.
	var missing [32]byte
	p := refTo(t, c, func(r *blobRef) {
		r.SHA256 = hex.EncodeToString(missing[:])
		r.MAC = c.mac(missing, r.Size)
	})
	if _, err := c.Decode([]*commonpb.Payload{p}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("reference to a missing blob: Decode = %v, want ErrNotFound", err)
	}
}

// TestBlobCodecRefusesDamagedBlob: bytes damaged on disk, and a hostile store
// that answers with other bytes, are both refused.
func TestBlobCodecRefusesDamagedBlob(t *testing.T) {
	dir := openDir(t)
	blobs := dir.Blobs("t")
	c := newCodec(t, blobs, testKey(t))
	enc, err := c.Encode([]*commonpb.Payload{payload(50_000)})
	if err != nil {
		t.Fatal(err)
	}
	var ref blobRef
	if err := json.Unmarshal(enc[0].Data, &ref); err != nil {
		t.Fatal(err)
	}
	var sum [32]byte
	if _, err := hex.Decode(sum[:], []byte(ref.SHA256)); err != nil {
		t.Fatal(err)
	}
	path := dir.Path("t", sum)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("blob file: %v", err)
	}
	data[len(data)-1] ^= 1
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decode(enc); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("damaged blob on disk: Decode = %v, want ErrCorrupt", err)
	}

	// The store itself lies: it answers with bytes of the right size that
	// do not hash to the reference. The codec checks the hash itself.
	liar := &lyingBlobs{BlobStore: blobs}
	lc := newCodec(t, liar, c.o.Key)
	enc, err = lc.Encode([]*commonpb.Payload{payload(60_000)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Decode(enc); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "do not hash") {
		t.Fatalf("store answering other bytes: Decode = %v, want ErrCorrupt for bytes that do not hash", err)
	}
}

// lyingBlobs returns a blob with its last byte flipped, without checking.
type lyingBlobs struct{ store.BlobStore }

func (l *lyingBlobs) GetBlob(ctx context.Context, sum [32]byte) ([]byte, error) {
	b, err := l.BlobStore.GetBlob(ctx, sum)
	if err != nil {
		return nil, err
	}
	b = bytes.Clone(b)
	b[len(b)-1] ^= 1
	if sha256.Sum256(b) == sum {
		panic("unreachable")
	}
	return b, nil
}

func TestBlobCodecRefusesOversizeAndNesting(t *testing.T) {
	blobs := openBlobs(t)
	key := testKey(t)
	c, err := NewBlobCodec(BlobCodecOptions{Blobs: blobs, Key: key, Threshold: 1024, MaxBlob: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Encode([]*commonpb.Payload{payload(20_000)}); err == nil || !strings.Contains(err.Error(), "over the 10000-byte bound") {
		t.Fatalf("Encode of a payload over MaxBlob = %v", err)
	}
	// A blob holding a reference (a loop through the store) is refused.
	inner, err := c.Encode([]*commonpb.Payload{payload(5_000)})
	if err != nil {
		t.Fatal(err)
	}
	padded := &commonpb.Payload{Metadata: inner[0].Metadata, Data: append(bytes.Clone(inner[0].Data), bytes.Repeat([]byte(" "), 2000)...)}
	outer, err := c.Encode([]*commonpb.Payload{padded})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decode(outer); err == nil || !strings.Contains(err.Error(), "holds another reference") {
		t.Fatalf("Decode of a reference to a reference = %v", err)
	}

	if _, err := NewBlobCodec(BlobCodecOptions{Blobs: blobs, Key: key[:16]}); err == nil {
		t.Fatal("a 16-byte key was accepted")
	}
	if _, err := NewBlobCodec(BlobCodecOptions{Key: key}); err == nil {
		t.Fatal("a codec without a blob store was accepted")
	}
}
