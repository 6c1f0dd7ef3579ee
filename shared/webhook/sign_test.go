package webhook

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIssue10_WebhookSignVector pins the signature scheme to a value computed
// outside Go (Python's hmac), so a receiver in any language can check its
// implementation against it.
func TestIssue10_WebhookSignVector(t *testing.T) {
	t.Parallel()
	secret := []byte("whsec-test-0123456789")
	body := []byte(`{"action":"bump","reason":"r"}`)
	ts, sig := Sign(secret, body, time.Unix(1700000000, 999_000_000))
	assert.Equal(t, "1700000000", ts)
	assert.Equal(t, "v1=2e7bb2e03f85c11a489713dd93cbe14d698d2f32f90cc26ff81e3b91ce1af6c8", sig)
}

func TestIssue10_WebhookVerify(t *testing.T) {
	t.Parallel()
	secret := []byte("whsec-test-0123456789")
	body := []byte(`{"txId":"t1"}`)
	now := time.Unix(1700000000, 0)
	ts, sig := Sign(secret, body, now)
	_, otherSig := Sign([]byte("another-secret-0123456789"), body, now)

	ok := []struct {
		name, ts, sig string
		now           time.Time
	}{
		{"plain", ts, sig, now},
		{"rotation: new value second", ts, otherSig + "," + sig, now},
		{"rotation: spaces and other schemes", ts, "v0=abc, " + sig + " ,v2=zz", now},
		{"exactly max age old", ts, sig, now.Add(MaxAge)},
		{"exactly max age ahead", ts, sig, now.Add(-MaxAge)},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, Verify(secret, tc.ts, tc.sig, body, tc.now, MaxAge))
		})
	}

	bad := []struct {
		name, ts, sig string
		body          []byte
		now           time.Time
		secret        []byte
		want          string
	}{
		{"other secret", ts, otherSig, body, now, secret, "does not match"},
		{"body changed", ts, sig, []byte(`{"txId":"t2"}`), now, secret, "does not match"},
		{"timestamp changed", "1700000001", sig, body, now, secret, "does not match"},
		{"timestamp with leading zero", "0" + ts, sig, body, now, secret, "does not match"},
		{"stale", ts, sig, body, now.Add(MaxAge + time.Second), secret, "old"},
		{"future", ts, sig, body, now.Add(-MaxAge - time.Second), secret, "future"},
		{"missing timestamp", "", sig, body, now, secret, "missing X-Txfence-Timestamp"},
		{"missing signature", ts, "", body, now, secret, "missing X-Txfence-Signature"},
		{"signed timestamp", "+" + ts, sig, body, now, secret, "unix seconds"},
		{"negative timestamp", "-1", sig, body, now, secret, "unix seconds"},
		{"fractional timestamp", ts + ".5", sig, body, now, secret, "unix seconds"},
		{"too many digits", strings.Repeat("9", 20), sig, body, now, secret, "unix seconds"},
		{"no v1 value", ts, "v0=" + strings.TrimPrefix(sig, "v1="), body, now, secret, "no v1"},
		{"bare hex", ts, strings.TrimPrefix(sig, "v1="), body, now, secret, "no v1"},
		{"not hex", ts, "v1=zz", body, now, secret, "does not match"},
		{"truncated", ts, sig[:len(sig)-2], body, now, secret, "does not match"},
		{"no secret", ts, sig, body, now, nil, "no secret"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			err := Verify(tc.secret, tc.ts, tc.sig, tc.body, tc.now, MaxAge)
			require.ErrorIs(t, err, ErrRefused)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), string(secret))
		})
	}

	require.ErrorIs(t, Verify(secret, ts, sig, body, now, 0), ErrRefused, "a zero max age refuses everything")
}
