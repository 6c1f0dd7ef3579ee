package webhook

import (
	"testing"
	"time"
)

// FuzzVerify: Verify never panics on any header values and body, and a body
// signed with Sign always verifies, alone or next to other values.
func FuzzVerify(f *testing.F) {
	f.Add([]byte("whsec-test-0123456789"), "1700000000", "v1=00", []byte(`{}`), int64(1700000000))
	f.Add([]byte("k"), "", "", []byte(nil), int64(0))
	f.Add([]byte(""), "99999999999999999999", "v1=,v1=zz,,v0=", []byte("\x00\xff"), int64(-1))
	f.Fuzz(func(t *testing.T, secret []byte, ts, sig string, body []byte, unix int64) {
		unix &= 1<<40 - 1 // a positive time well inside time.Time's range
		now := time.Unix(unix, 0)
		_ = Verify(secret, ts, sig, body, now, MaxAge)
		if len(secret) == 0 {
			return
		}
		goodTS, goodSig := Sign(secret, body, now)
		if err := Verify(secret, goodTS, goodSig, body, now, MaxAge); err != nil {
			t.Fatalf("a signed body does not verify: %v", err)
		}
		if err := Verify(secret, goodTS, sig+","+goodSig, body, now.Add(MaxAge), MaxAge); err != nil {
			t.Fatalf("a signed body next to other values does not verify: %v", err)
		}
	})
}
