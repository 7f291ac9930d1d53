package temporal

import (
	"bytes"
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/agentplane/agentplane/store"
)

// Metadata of a payload that the blob codec moved into the blob store.
const (
	// blobRefEncoding is the "encoding" metadata of a reference payload.
	blobRefEncoding  = "agentplane/blob-ref;v1"
	metadataEncoding = "encoding"
	// maxRefBytes bounds the data of a reference payload read back from a
	// history: a reference is about 200 bytes of JSON.
	maxRefBytes = 1024
	// DefaultBlobThreshold: payloads larger than this (encoded size) go to
	// the blob store. Temporal refuses a payload over 2 MB and warns at
	// 512 KB; agentplane keeps histories small, so 16 KiB.
	DefaultBlobThreshold = 16 << 10
	// DefaultMaxBlob bounds a payload the codec stores or reads back.
	DefaultMaxBlob = 64 << 20
	// DefaultBlobTimeout bounds one blob store call.
	DefaultBlobTimeout = 30 * time.Second
	// macContext separates the reference MAC from any other use of the key.
	macContext = "agentplane temporal blob reference v1\x00"
)

// PayloadTenant is the blob-store scope (the tenant name given to
// store.Blobs.Blobs) that a deployment's codec keeps Temporal payloads in.
// Payloads are not a tenant's records: the API serves a run's blob only
// when the platform recorded it in that run's log, which a payload never
// is, so a tenant of this name sees none of them.
const PayloadTenant = "agentplane.temporal-payloads"

// codecKeyLabel separates the codec key from every other key derived from
// the blob master key (store/blobcrypt derives tenant keys with its own).
const codecKeyLabel = "agentplane temporal payload reference key v1"

// CodecKey derives the key a deployment's BlobCodec authenticates
// references with from its blob master key (32 bytes; HKDF-SHA256 with a
// label of its own), so that every process holding the deployment's blob
// key agrees on it and nothing else has to be distributed.
func CodecKey(master []byte) ([]byte, error) {
	if len(master) != 32 {
		return nil, fmt.Errorf("temporal blob codec: the blob master key is %d bytes, want 32", len(master))
	}
	k, err := hkdf.Key(sha256.New, master, nil, codecKeyLabel, 32)
	if err != nil {
		return nil, fmt.Errorf("temporal blob codec: derive key: %w", err)
	}
	return k, nil
}

// BlobCodecOptions configure NewBlobCodec.
type BlobCodecOptions struct {
	// Blobs is agentplane's blob store. Required.
	Blobs store.BlobStore
	// Key authenticates references (HMAC-SHA256, at least 32 bytes), so
	// that a reference planted in a history by anyone without the key does
	// not name a blob of this deployment. Required.
	Key []byte
	// Threshold: payloads whose encoded size exceeds it are stored by
	// reference (default DefaultBlobThreshold).
	Threshold int
	// MaxBlob bounds a stored payload (default DefaultMaxBlob).
	MaxBlob int64
	// Timeout bounds each blob store call (default DefaultBlobTimeout).
	Timeout time.Duration
}

// BlobCodec is a converter.PayloadCodec that keeps large payloads in
// agentplane's blob store and puts a small, authenticated reference in their
// place in the Temporal history. Decoding a reference reads at most MaxBlob
// bytes, refuses bytes that do not hash to the reference, and refuses a
// reference without a valid MAC. Payloads it did not encode pass through
// unchanged. Safe for concurrent use.
type BlobCodec struct {
	o BlobCodecOptions
}

var _ converter.PayloadCodec = (*BlobCodec)(nil)

// blobRef is the data of a reference payload.
type blobRef struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	MAC    string `json:"mac"`
}

// NewBlobCodec checks o and returns the codec.
func NewBlobCodec(o BlobCodecOptions) (*BlobCodec, error) {
	if o.Blobs == nil {
		return nil, errors.New("temporal blob codec: no blob store")
	}
	if len(o.Key) < 32 {
		return nil, fmt.Errorf("temporal blob codec: key of %d bytes; give at least 32 random bytes", len(o.Key))
	}
	if o.Threshold <= 0 {
		o.Threshold = DefaultBlobThreshold
	}
	if o.MaxBlob <= 0 {
		o.MaxBlob = DefaultMaxBlob
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultBlobTimeout
	}
	o.Key = bytes.Clone(o.Key)
	return &BlobCodec{o: o}, nil
}

// NewDataConverter returns the SDK's default data converter with c applied
// to every payload.
func (c *BlobCodec) NewDataConverter() converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}

// Encode implements converter.PayloadCodec.
func (c *BlobCodec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if p == nil || proto.Size(p) <= c.o.Threshold {
			out[i] = p
			continue
		}
		data, err := proto.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("temporal blob codec: marshal payload: %w", err)
		}
		if int64(len(data)) > c.o.MaxBlob {
			return nil, fmt.Errorf("temporal blob codec: payload of %d bytes is over the %d-byte bound", len(data), c.o.MaxBlob)
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.o.Timeout)
		sum, err := c.o.Blobs.PutBlob(ctx, data)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("temporal blob codec: store payload of %d bytes: %w", len(data), err)
		}
		ref, err := json.Marshal(blobRef{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)), MAC: c.mac(sum, int64(len(data)))})
		if err != nil {
			return nil, err
		}
		out[i] = &commonpb.Payload{Metadata: map[string][]byte{metadataEncoding: []byte(blobRefEncoding)}, Data: ref}
	}
	return out, nil
}

// Decode implements converter.PayloadCodec.
func (c *BlobCodec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if p == nil || string(p.GetMetadata()[metadataEncoding]) != blobRefEncoding {
			out[i] = p
			continue
		}
		d, err := c.decodeRef(p.GetData())
		if err != nil {
			return nil, fmt.Errorf("temporal blob codec: payload %d: %w", i, err)
		}
		out[i] = d
	}
	return out, nil
}

// decodeRef resolves one reference: parse it strictly, check its MAC and
// size, read the blob, check its hash and length, and unmarshal the payload,
// which must not itself be a reference.
func (c *BlobCodec) decodeRef(data []byte) (*commonpb.Payload, error) {
	if len(data) > maxRefBytes {
		return nil, fmt.Errorf("blob reference of %d bytes is over the %d-byte bound", len(data), maxRefBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var ref blobRef
	if err := dec.Decode(&ref); err != nil {
		return nil, fmt.Errorf("malformed blob reference: %w", err)
	}
	if dec.More() {
		return nil, errors.New("malformed blob reference: trailing data")
	}
	raw, err := hex.DecodeString(ref.SHA256)
	if err != nil || len(raw) != sha256.Size {
		return nil, fmt.Errorf("malformed blob reference: sha256 %q", ref.SHA256)
	}
	var sum [32]byte
	copy(sum[:], raw)
	if ref.Size <= 0 || ref.Size > c.o.MaxBlob {
		return nil, fmt.Errorf("blob reference of size %d is outside 1..%d", ref.Size, c.o.MaxBlob)
	}
	want := c.mac(sum, ref.Size)
	if !hmac.Equal([]byte(ref.MAC), []byte(want)) {
		return nil, fmt.Errorf("blob reference %s: bad MAC (not written by this deployment's codec)", ref.SHA256)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.o.Timeout)
	defer cancel()
	size, err := c.o.Blobs.BlobSize(ctx, sum)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", ref.SHA256, err)
	}
	if size != ref.Size {
		return nil, fmt.Errorf("blob %s holds %d bytes, its reference says %d: %w", ref.SHA256, size, ref.Size, store.ErrCorrupt)
	}
	blob, err := c.o.Blobs.GetBlob(ctx, sum)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", ref.SHA256, err)
	}
	if int64(len(blob)) != ref.Size || sha256.Sum256(blob) != sum {
		return nil, fmt.Errorf("blob %s: bytes read do not hash to it: %w", ref.SHA256, store.ErrCorrupt)
	}
	var p commonpb.Payload
	if err := proto.Unmarshal(blob, &p); err != nil {
		return nil, fmt.Errorf("blob %s: not a payload: %w", ref.SHA256, err)
	}
	if string(p.GetMetadata()[metadataEncoding]) == blobRefEncoding {
		return nil, fmt.Errorf("blob %s: holds another reference", ref.SHA256)
	}
	return &p, nil
}

// mac authenticates (sum, size) under the codec's key, hex-encoded.
func (c *BlobCodec) mac(sum [32]byte, size int64) string {
	m := hmac.New(sha256.New, c.o.Key)
	m.Write([]byte(macContext))
	m.Write(sum[:])
	fmt.Fprintf(m, "\x00%d", size)
	return hex.EncodeToString(m.Sum(nil))
}
