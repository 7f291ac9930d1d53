package storetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/store"
)

// BlobBackend is a blob store under test and a way to reach behind it.
type BlobBackend struct {
	Blobs store.Blobs
	// Overwrite replaces the bytes stored for tenant's blob sum with data
	// behind the store's back (a damaged disk, a tampered bucket). The
	// corruption cases need it; the Store suite leaves it nil.
	Overwrite func(t *testing.T, tenant string, sum [32]byte, data []byte)
}

// ExerciseBlobs runs the blob conformance suite against the blob stores
// made by newBackend: round trips, tenant isolation, concurrent puts, large
// blobs, and the detection and repair of damaged copies. Every
// store.Blobs implementation (the blob folder, S3) passes it; Exercise runs
// the part that needs no Overwrite against a whole store.
func ExerciseBlobs(t *testing.T, newBackend func(t *testing.T) BlobBackend) {
	testBlobs(t, newBackend)
	t.Run("Corruption", func(t *testing.T) { testBlobCorruption(t, newBackend(t)) })
}

const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
)

func testBlobs(t *testing.T, newBackend func(t *testing.T) BlobBackend) {
	t.Run("RoundTrip", func(t *testing.T) { testBlobRoundTrip(t, newBackend(t).Blobs.Blobs(tenantA)) })
	t.Run("TenantIsolation", func(t *testing.T) { testBlobIsolation(t, newBackend(t).Blobs) })
	t.Run("InvalidTenants", func(t *testing.T) { testBlobTenantNames(t, newBackend(t).Blobs) })
	t.Run("ConcurrentPuts", func(t *testing.T) { testBlobConcurrentPuts(t, newBackend(t).Blobs) })
	t.Run("Large", func(t *testing.T) { testBlobLarge(t, newBackend(t).Blobs.Blobs(tenantA)) })
}

func testBlobRoundTrip(t *testing.T, s store.BlobStore) {
	for _, data := range [][]byte{
		[]byte(`{"tool":"lookup_order","result":"shipped"}`),
		bytes.Repeat([]byte{0, 1, 2, 0xff}, 300_000), // larger than one page, not UTF-8
		{},
	} {
		sum := putBlob(t, s, data)
		checkBlob(t, "after the first put", s, sum, data)
		again, err := s.PutBlob(t.Context(), slices.Clone(data))
		ok(t, "PutBlob(same content again)", err)
		if again != sum {
			t.Fatalf("second PutBlob = %x, want %x", again[:6], sum[:6])
		}
		checkBlob(t, "after the second put", s, sum, data)
	}
	missing := sha256.Sum256([]byte("never stored"))
	_, err := s.GetBlob(t.Context(), missing)
	wantErr(t, "GetBlob(missing)", err, store.ErrNotFound)
	_, err = s.BlobSize(t.Context(), missing)
	wantErr(t, "BlobSize(missing)", err, store.ErrNotFound)
}

// testBlobIsolation: what one tenant stored is, to every other tenant,
// content nobody stored: the same errors, word for word, as a hash never
// stored, for reads and for sizes; storing the same content gives the other
// tenant its own copy, and neither copy depends on the other.
func testBlobIsolation(t *testing.T, blobs store.Blobs) {
	a, b := blobs.Blobs(tenantA), blobs.Blobs(tenantB)
	secret := []byte(`{"customer":"c_88213","card":"4111 1111 1111 1111"}`)
	never := []byte(`{"customer":"c_00000","card":"never stored"}`)
	sum := putBlob(t, a, secret)
	neverSum := sha256.Sum256(never)

	// A tenant whose name starts like another's sees nothing of it either.
	for _, other := range []store.BlobStore{b, blobs.Blobs(tenantA + ".x"), blobs.Blobs("tenant")} {
		data, errGet := other.GetBlob(t.Context(), sum)
		wantErr(t, "GetBlob(another tenant's hash)", errGet, store.ErrNotFound)
		if data != nil {
			t.Fatalf("GetBlob(another tenant's hash) returned %d bytes", len(data))
		}
		size, errSize := other.BlobSize(t.Context(), sum)
		wantErr(t, "BlobSize(another tenant's hash)", errSize, store.ErrNotFound)
		if size != 0 {
			t.Fatalf("BlobSize(another tenant's hash) = %d, want 0", size)
		}
		_, errGetNever := other.GetBlob(t.Context(), neverSum)
		_, errSizeNever := other.BlobSize(t.Context(), neverSum)
		sameError(t, "GetBlob", errGet, sum, errGetNever, neverSum)
		sameError(t, "BlobSize", errSize, sum, errSizeNever, neverSum)
	}

	// b stores the same content: its own copy, readable by b.
	if got := putBlob(t, b, secret); got != sum {
		t.Fatalf("tenant b's PutBlob = %x, want %x", got[:6], sum[:6])
	}
	checkBlob(t, "tenant b's copy", b, sum, secret)
	checkBlob(t, "tenant a's copy", a, sum, secret)
}

// sameError fails unless errFound (about a hash another tenant stored) and
// errNever (about a hash nobody stored) read the same once each names its
// own hash.
func sameError(t *testing.T, what string, errFound error, found [32]byte, errNever error, never [32]byte) {
	t.Helper()
	if errFound == nil || errNever == nil {
		t.Fatalf("%s: errors %v and %v, want both ErrNotFound", what, errFound, errNever)
	}
	norm := func(err error, sum [32]byte) string {
		s := err.Error()
		for _, h := range []string{hex.EncodeToString(sum[:]), hex.EncodeToString(sum[:8])} {
			s = strings.ReplaceAll(s, h, "HASH")
		}
		return s
	}
	if f, n := norm(errFound, found), norm(errNever, never); f != n {
		t.Fatalf("%s: another tenant's hash answers %q, a hash nobody stored %q: the difference tells that the content exists", what, f, n)
	}
}

// testBlobTenantNames: names that could climb out of a tenant's folder or
// key prefix, or that no tenant can have, are refused on every call, and
// never reach another tenant's content.
func testBlobTenantNames(t *testing.T, blobs store.Blobs) {
	data := []byte("tenant a's own content")
	sum := putBlob(t, blobs.Blobs(tenantA), data)
	for _, name := range []string{"", ".", "..", "../" + tenantA, tenantA + "/..", tenantA + "/x", "x/../" + tenantA,
		".tmp", "-a", "a b", "a\x00", "a\\b", "%2e%2e", strings.Repeat("a", 129)} {
		s := blobs.Blobs(name)
		got, err := s.GetBlob(t.Context(), sum)
		wantErr(t, fmt.Sprintf("GetBlob as tenant %q", name), err, store.ErrInvalidTenant)
		if got != nil {
			t.Fatalf("GetBlob as tenant %q returned %d bytes", name, len(got))
		}
		_, err = s.BlobSize(t.Context(), sum)
		wantErr(t, fmt.Sprintf("BlobSize as tenant %q", name), err, store.ErrInvalidTenant)
		_, err = s.PutBlob(t.Context(), []byte("overwrite"))
		wantErr(t, fmt.Sprintf("PutBlob as tenant %q", name), err, store.ErrInvalidTenant)
	}
	checkBlob(t, "after the refused names", blobs.Blobs(tenantA), sum, data)
}

// testBlobConcurrentPuts: many puts of the same content at once, by one
// tenant and by another, all succeed with the same hash and leave one whole
// copy per tenant.
func testBlobConcurrentPuts(t *testing.T, blobs store.Blobs) {
	data := bytes.Repeat([]byte("the same tool result, put by every worker at once. "), 20_000)
	want := sha256.Sum256(data)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range 2 * n {
		tenant := []string{tenantA, tenantB}[i%2]
		wg.Go(func() {
			sum, err := blobs.Blobs(tenant).PutBlob(t.Context(), slices.Clone(data))
			if err == nil && sum != want {
				err = fmt.Errorf("PutBlob = %x, want %x", sum[:6], want[:6])
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		ok(t, "concurrent PutBlob", err)
	}
	checkBlob(t, "tenant a after concurrent puts", blobs.Blobs(tenantA), want, data)
	checkBlob(t, "tenant b after concurrent puts", blobs.Blobs(tenantB), want, data)
}

// testBlobLarge: a blob of tens of MiB round-trips; one above MaxBlobSize
// is refused and leaves nothing behind.
func testBlobLarge(t *testing.T, s store.BlobStore) {
	big := make([]byte, 24<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>13)
	}
	sum := putBlob(t, s, big)
	checkBlob(t, "24 MiB blob", s, sum, big)

	tooBig := make([]byte, store.MaxBlobSize+1)
	tooBig[0] = 1
	if _, err := s.PutBlob(t.Context(), tooBig); err == nil {
		t.Fatalf("PutBlob(%d bytes) succeeded, want a refusal above MaxBlobSize (%d)", len(tooBig), store.MaxBlobSize)
	}
	_, err := s.GetBlob(t.Context(), sha256.Sum256(tooBig))
	wantErr(t, "GetBlob(refused blob)", err, store.ErrNotFound)
}

// testBlobCorruption: bytes changed behind the store's back are never
// returned; the next put of the right content repairs the copy; damage to
// one tenant's copy leaves another's alone.
func testBlobCorruption(t *testing.T, be BlobBackend) {
	if be.Overwrite == nil {
		t.Fatal("BlobBackend.Overwrite is nil: the corruption cases need a way to damage a stored blob")
	}
	data := bytes.Repeat([]byte(`{"refund":"INR 12,000","approved_by":"supervisor"}`), 100)
	a, b := be.Blobs.Blobs(tenantA), be.Blobs.Blobs(tenantB)
	flipped := slices.Clone(data)
	flipped[len(flipped)/2] ^= 1
	for _, tc := range []struct {
		name   string
		stored []byte
	}{
		{"flipped byte", flipped},
		{"truncated", data[:len(data)-1]},
		{"emptied", []byte{}},
		{"other content", []byte(`{"refund":"INR 99,999"}`)},
		{"longer", append(slices.Clone(data), '\n')},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum := putBlob(t, a, data)
			putBlob(t, b, data)
			be.Overwrite(t, tenantA, sum, tc.stored)
			got, err := a.GetBlob(t.Context(), sum)
			wantErr(t, "GetBlob(damaged)", err, store.ErrCorrupt)
			if got != nil {
				t.Fatalf("GetBlob(damaged) returned %d bytes", len(got))
			}
			checkBlob(t, "tenant b's copy of damaged content", b, sum, data)
			// The next put of the right content rewrites the copy.
			if again := putBlob(t, a, data); again != sum {
				t.Fatalf("repairing PutBlob = %x, want %x", again[:6], sum[:6])
			}
			checkBlob(t, "after the repairing put", a, sum, data)
		})
	}
	t.Run("over the size bound", func(t *testing.T) {
		small := []byte("small")
		sum := putBlob(t, a, small)
		be.Overwrite(t, tenantA, sum, make([]byte, store.MaxBlobSize+1))
		got, err := a.GetBlob(t.Context(), sum)
		wantErr(t, "GetBlob(grown past MaxBlobSize)", err, store.ErrCorrupt)
		if got != nil {
			t.Fatalf("GetBlob(grown past MaxBlobSize) returned %d bytes", len(got))
		}
	})
}

func putBlob(t *testing.T, s store.BlobStore, data []byte) [32]byte {
	t.Helper()
	sum, err := s.PutBlob(t.Context(), data)
	ok(t, "PutBlob", err)
	if sum != sha256.Sum256(data) {
		t.Fatalf("PutBlob = %x, want sha256 %x", sum[:6], sha256.Sum256(data))
	}
	return sum
}

func checkBlob(t *testing.T, what string, s store.BlobStore, sum [32]byte, want []byte) {
	t.Helper()
	got, err := s.GetBlob(t.Context(), sum)
	if err != nil {
		t.Fatalf("%s: GetBlob(%x): %v", what, sum[:6], err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: GetBlob(%x) = %d bytes, want the %d stored", what, sum[:6], len(got), len(want))
	}
	size, err := s.BlobSize(t.Context(), sum)
	if err != nil || size != int64(len(want)) {
		t.Fatalf("%s: BlobSize(%x) = %d, %v; want %d", what, sum[:6], size, err, len(want))
	}
}
